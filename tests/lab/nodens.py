"""The namespaces a test node lives in, so that the machine's own network and paths stay as they were: a network
namespace of its own (the node's "host" netns: its links, bridges, routes and sysctls) and a mount namespace of
its own, kept by a file, in which

- /sys is this netns's sysfs (its /sys/class/net), with the machine's cgroup hierarchies bound back under
  /sys/fs/cgroup (a fresh sysfs has none) and a sysfs-shaped VF tree's bus/pci/devices bound over
  /sys/bus/pci/devices (the host-device plugin finds a VF's link there);
- /run, /var/lib and /var/log are empty tmpfs: the fixed paths containerd, its shims, runc, libcni and the kubelet
  write whatever their configuration says (/run/containerd, libcni's /var/lib/cni, /var/log/pods,
  /var/log/containers) go nowhere; the kubelet's root dir /var/lib/kubelet (its device-plugins dir there is fixed
  in kubelet 1.20) and the device-info dir /run/k8s.cni.cncf.io/devinfo are lab dirs bound there, so that
  everything sits where a node has it (a daemon's defaults find it) and a test reaches it by its lab path;
- the six kernel tunables the kubelet sets at start (container_manager_linux.go setupKernelTunables) are files of
  the lab bound over /proc/sys, so the kubelet's writes change nothing of the machine's.

Processes start in both namespaces through nsenter; stop() ends every process left in the mount namespace (the
shims and pause processes containerd leaves behind), drops the namespaces and removes the cgroup dirs the
containers had, and says what it could not remove."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from tests.lab.netlab import ip
from tests.lab.poll import within
from tests.lab.processes import reap

CGROUP_ROOT = Path("/sys/fs/cgroup")
# What the kubelet sets, and the value it wants (it writes only a value that differs).
KERNEL_TUNABLES = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)
DEVINFO = "/run/k8s.cni.cncf.io/devinfo"
KUBELET_ROOT = "/var/lib/kubelet"


@dataclass
class NodeNamespaces:
    base: Path
    netns: str
    cgroup: str  # the containers' cgroup parent under every hierarchy, e.g. /nctest-1a2b3c4d
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def mntns(self) -> Path:
        return self.base / "ns" / "mnt"

    def argv(self, *argv: str) -> list[str]:
        """argv run inside the node: its mount and network namespaces."""
        return ["nsenter", f"--mount={self.mntns}", f"--net=/run/netns/{self.netns}", "--", *argv]

    def run(self, *argv: str, check: bool = True, timeout: float = 60) -> str:
        p = subprocess.run(self.argv(*argv), capture_output=True, text=True, timeout=timeout, check=False)
        if check and p.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: {p.returncode}: {p.stderr.strip()}")
        return p.stdout

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """A long-running process of the node, its output in <base>/logs/<name>.log."""
        (self.base / "logs").mkdir(exist_ok=True)
        with open(self.base / "logs" / f"{name}.log", "ab") as log:
            p = subprocess.Popen(
                self.argv(*argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
                start_new_session=True,
            )
        self.procs[name] = p
        return p

    def stop(self, name: str, timeout: float = 30) -> None:
        p = self.procs.pop(name, None)
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGTERM)
            reap(p, timeout)

    def log(self, name: str, tail: int = 40) -> str:
        path = self.base / "logs" / f"{name}.log"
        lines = path.read_text(errors="replace").splitlines() if path.exists() else []
        return "\n".join(lines[-tail:])

    def pids(self) -> list[int]:
        """Every process in the node's mount namespace."""
        try:
            mine = os.stat(self.mntns)
        except OSError:
            return []
        out = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            with contextlib.suppress(OSError):
                st = os.stat(f"/proc/{entry}/ns/mnt")
                if (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino):
                    out.append(int(entry))
        return out

    def cgroup_dirs(self) -> list[Path]:
        return [d / self.cgroup.lstrip("/") for d in CGROUP_ROOT.iterdir() if (d / self.cgroup.lstrip("/")).exists()]


def create(base: Path, netns: str, cgroup: str, pci_devices: Path) -> NodeNamespaces:
    """The namespaces, empty: the netns with its loopback up, the mount namespace as the module says."""
    ns = NodeNamespaces(base, netns, cgroup)
    try:
        _make(ns, pci_devices)
    except BaseException:
        destroy(ns)
        raise
    return ns


def _make(ns: NodeNamespaces, pci_devices: Path) -> None:
    base, netns, cgroup = ns.base, ns.netns, ns.cgroup
    (base / "ns").mkdir(parents=True)
    for d in ("cgroup-keep", "sysctl", "kubelet", "devinfo"):
        (base / d).mkdir(exist_ok=True)
    # The containers' parent cgroup, made now so the kubelet's stats of it work from the start.
    for h in CGROUP_ROOT.iterdir():
        (h / cgroup.lstrip("/")).mkdir()
    ip("netns", "add", netns)
    ip("link", "set", "lo", "up", netns=netns)
    binds = [f"mount --bind {pci_devices} /sys/bus/pci/devices"] if pci_devices else []
    for t in KERNEL_TUNABLES:
        copy = base / "sysctl" / t.replace("/", ".")
        copy.write_text(Path("/proc/sys", t).read_text())
        binds.append(f"mount --bind {copy} /proc/sys/{t}")
    script = "\n".join(
        [
            "set -e",
            f"mount --rbind /sys/fs/cgroup {base}/cgroup-keep",
            "mount -t sysfs nctest-sysfs /sys",
            f"mount --move {base}/cgroup-keep /sys/fs/cgroup",
            *binds,
            "for d in /run /var/lib /var/log; do mount -t tmpfs -o mode=0755 nctest-node $d; done",
            f"mkdir -p {KUBELET_ROOT} {DEVINFO}",
            f"mount --bind {base}/kubelet {KUBELET_ROOT}",
            f"mount --bind {base}/devinfo {DEVINFO}",
        ]
    )
    ns.mntns.touch()
    unshare = ["unshare", f"--mount={ns.mntns}", "--propagation", "slave"]
    subprocess.run(
        ["nsenter", f"--net=/run/netns/{netns}", *unshare, "sh", "-c", script],
        check=True,
        capture_output=True,
        timeout=30,
    )


def destroy(ns: NodeNamespaces) -> list[str]:
    """Everything of the node gone; what could not be removed, said (empty when nothing is left)."""
    for name in list(ns.procs)[::-1]:
        ns.stop(name)
    left = []
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = ns.pids()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        within(lambda: not ns.pids(), 10)  # processes of the node exiting after the signal
    left += [f"process {pid} ({_comm(pid)}) still in the node's mount namespace" for pid in ns.pids()]
    if ns.mntns.exists():
        subprocess.run(["umount", str(ns.mntns)], check=False, capture_output=True, timeout=30)
    ip("netns", "del", ns.netns, check=False)
    for top in ns.cgroup_dirs():
        # Depth first: a cgroup dir is removed by rmdir once its children are.
        for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                d.rmdir()
        try:
            top.rmdir()
        except OSError as e:
            left.append(f"cgroup {top}: {e.strerror}")
    return left


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"
