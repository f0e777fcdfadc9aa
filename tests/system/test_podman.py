"""A real container runtime: Debian 12's podman 4.3 (CNI backend) runs containers on a netcomp network through the
installed package. `podman run --network netcomp` gets its interfaces from netcomp's shim, more networks come
through podman's CNI args (podman 4.3 passes its own CNI_ARGS environment on to every plugin, after its
`IgnoreUnknown=1;K8S_POD_NAME=<name>`; its `--network NAME:opts` take only ip, ip6, mac, alias and
interface_name), `netcomp attach` hot-plugs one more into the running container, `podman inspect` shows the
address netcomp returned, and stop, restart and rm free everything (interfaces, host-local leases, netcomp cache
entries).

Where things run, and why. podman runs on this machine: inside an nspawn container it starts nothing here (runc
needs the cgroup v1 controllers, which nspawn mounts read-only; crun refuses the hybrid cgroup layout; podman's
--cgroups=disabled needs crun). The daemon is the installed netcomp.service under a real systemd booted with
nspawn from this machine's /usr, as on a node, and it writes the runtime's conflist itself
(`writeRuntimeConfig`): the machine's /etc/cni/net.d is podman's network_config_dir, its /run/netcomp is this
machine's (so the installed shim's default socket path reaches it), and it sees this machine's /run/netns (the
namespaces podman makes). Its private network is the node's side of every attachment (the bridge, the veths'
host ends, the macvlan master): nothing but namespaces this test made carries traffic.

podman is isolated from this machine's defaults: its own containers.conf, storage.conf and registries.conf
(CONTAINERS_*), CNI config dir and plugin dir, storage, run and tmp dirs, all in a temp dir; and it runs in a
mount namespace of its own where /var/lib is an empty tmpfs, so what podman 4.3 writes there whatever its
configuration (libcni's result cache /var/lib/cni, the blob-info cache /var/lib/containers) goes nowhere. The
image is /bin/busybox imported (no registry, and --pull=never). Containers, image, namespaces, mounts and temp
dirs are removed and the machine powered off even when the test fails; the package is purged (`installed`)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.lab.intents import intent
from tests.lab.nspawn import Machine, machine

pytestmark = pytest.mark.root

IMAGE = "localhost/netcomp-test-bb"
MGMT_BRIDGE = {
    "cniVersion": "1.0.0",
    "name": "podbridge",
    "plugins": [
        {
            "type": "bridge",
            "bridge": "ncpod0",
            "isGateway": True,
            "ipam": {"type": "host-local", "subnet": "10.210.0.0/24"},
        }
    ],
}
NETWORKS = {
    "mgmt": "{type: static, networkID: podbridge}",
    "storage": "{type: macvlan, hostDevice: m0, interfacePrefix: stor, ipam: {type: host-local, "
    "subnet: 10.211.0.0/24}}",
    "backup": "{type: macvlan, hostDevice: m0, ipam: {type: host-local, subnet: 10.212.0.0/24}}",
}


@dataclass
class Podman:
    base: Path
    mntns: Path

    def env(self, cni_args: str | None = None) -> dict[str, str]:
        env = {
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(self.base),
            "CONTAINERS_CONF": str(self.base / "containers.conf"),
            "CONTAINERS_STORAGE_CONF": str(self.base / "storage.conf"),
            "CONTAINERS_REGISTRIES_CONF": str(self.base / "registries.conf"),
        }
        if cni_args is not None:
            env["CNI_ARGS"] = cni_args
        return env

    def __call__(self, *args: str, cni_args: str | None = None, check: bool = True) -> str:
        p = subprocess.run(
            ["nsenter", f"--mount={self.mntns}", "podman", *args],
            env=self.env(cni_args),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if check and p.returncode != 0:
            raise AssertionError(f"podman {' '.join(args)}: {p.returncode}\n{p.stdout}{p.stderr}")
        return p.stdout

    def private(self, *argv: str) -> str:
        """A command in podman's mount namespace."""
        return subprocess.run(
            ["nsenter", f"--mount={self.mntns}", *argv], capture_output=True, text=True, timeout=60, check=True
        ).stdout

    def inspect(self, ctr: str) -> dict[str, Any]:
        doc: list[dict[str, Any]] = json.loads(self("inspect", ctr))
        return doc[0]


@contextlib.contextmanager
def podman(base: Path, network_config_dir: Path) -> Iterator[Podman]:
    for d in ("storage", "run", "tmp"):
        (base / d).mkdir(parents=True)
    (base / "containers.conf").write_text(
        f"""[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
tmp_dir = "{base}/tmp"
image_copy_tmp_dir = "{base}/tmp"

[network]
network_backend = "cni"
network_config_dir = "{network_config_dir}"
cni_plugin_dirs = ["/usr/lib/cni"]
"""
    )
    (base / "storage.conf").write_text(
        f'[storage]\ndriver = "vfs"\ngraphroot = "{base}/storage"\nrunroot = "{base}/run"\n'
    )
    (base / "registries.conf").write_text("unqualified-search-registries = []\n")
    netns_before = set(os.listdir("/run/netns"))
    runc_state_existed = Path("/run/runc").exists()
    # A mount namespace kept by its file: /run/netns stays shared with this machine (propagation unchanged),
    # /var/lib becomes an empty tmpfs.
    mntns = base / "mntns"
    mntns.touch()
    unshare = ["unshare", f"--mount={mntns}", "--propagation", "unchanged"]
    subprocess.run(
        [*unshare, "mount", "-t", "tmpfs", "-o", "mode=0755", "nctest-podman", "/var/lib"], check=True, timeout=30
    )
    pod = Podman(base, mntns)
    try:
        image = base / "image"
        (image / "bin").mkdir(parents=True)
        shutil.copy("/bin/busybox", image / "bin" / "busybox")
        for applet in ("sh", "ip", "sleep", "cat", "ls"):
            (image / "bin" / applet).symlink_to("busybox")
        subprocess.run(["tar", "-C", str(image), "-cf", str(base / "bb.tar"), "."], check=True, timeout=60)
        pod("import", str(base / "bb.tar"), IMAGE)
        yield pod
    finally:
        pod("rm", "--all", "--force", "--time", "0", check=False)  # each one's DEL while the daemon is up
        pod("rmi", "--all", "--force", check=False)
        subprocess.run(["umount", str(mntns)], check=False, timeout=30)
        # A namespace podman made (it names them netns-<uuid>) and could not remove; others' are not ours.
        for ns in {n for n in os.listdir("/run/netns") if n.startswith("netns-")} - netns_before:
            subprocess.run(["umount", f"/run/netns/{ns}"], check=False, timeout=30)
            with contextlib.suppress(OSError):
                os.unlink(f"/run/netns/{ns}")
        if not runc_state_existed:  # runc's state dir, the one thing outside the namespace it writes
            with contextlib.suppress(OSError):
                os.rmdir("/run/runc")
        shutil.rmtree(base, ignore_errors=True)


def leases(m: Machine) -> list[str]:
    """host-local's leases on the node, as network/address."""
    found = m.text("find", "/var/lib/cni/networks", "-type", "f").splitlines()
    names = [f.removeprefix("/var/lib/cni/networks/") for f in found]
    return sorted(n for n in names if not n.rsplit("/", 1)[-1].startswith(("last_reserved_ip", "lock")))


def attachments(m: Machine) -> dict[str, dict[str, Any]]:
    """netcomp's own view, from its cache: container ID -> {network name -> status}."""
    doc = json.loads(m.text("netcomp", "attachments", "-o", "json"))
    return {c["containerID"]: {n["name"]: n for n in c["networks"]} for c in doc["containers"]}


def node_links(m: Machine) -> list[str]:
    return sorted(line.split()[0].split("@")[0] for line in m.text("ip", "-br", "link").splitlines())


def addrs(pod: Podman, ctr: str) -> dict[str, str]:
    """The container's interfaces and their IPv4 address, as it sees them."""
    out = pod("exec", ctr, "ip", "-o", "-4", "addr", "show")
    return {line.split()[1]: line.split()[3] for line in out.splitlines() if line.split()[1] != "lo"}


def ip(cidr: str) -> str:
    return cidr.split("/")[0]


def podman_address(pod: Podman, ctr: str) -> str:
    """The address `podman inspect` shows for the container on the network "netcomp"."""
    return str(pod.inspect(ctr)["NetworkSettings"]["Networks"]["netcomp"]["IPAddress"])


def test_podman_runs_containers_on_netcomp_networks(installed: None, tmp_path: Path) -> None:
    if shutil.which("podman") is None or shutil.which("runc") is None or not Path("/bin/busybox").exists():
        pytest.skip("needs podman, runc and busybox-static (make setup installs them)")
    netconf = tmp_path / "net.d"
    netconf.mkdir()
    binds = [
        ("/run/netcomp", "/run/netcomp", True),
        (str(netconf), "/etc/cni/net.d", True),
        ("/run/netns", "/run/netns", False),
    ]
    with machine("ncpodman", binds=binds) as m:
        m.run("systemctl", "stop", "netcomp.service", "netcomp.socket")  # started by preset at first boot
        m.put("/etc/netcomp/netcomp.yaml", "defaultNetwork: mgmt\nwriteRuntimeConfig: true\n")
        m.put("/etc/netcomp/static.d/podbridge.conflist", json.dumps(MGMT_BRIDGE))
        for name, spec in NETWORKS.items():
            m.put(f"/etc/netcomp/networks.d/{name}.yaml", intent(name, spec))
        m.run("ip", "link", "add", "m0", "type", "veth", "peer", "name", "m0p")
        m.run("ip", "link", "set", "m0", "up")
        m.run("ip", "link", "set", "m0p", "up")
        m.run("systemctl", "start", "netcomp.socket", "netcomp.service")
        links_before = node_links(m)

        with podman(tmp_path / "podman", netconf) as pod:
            # The runtime entry the daemon wrote is podman's network "netcomp".
            assert json.loads((netconf / "00-netcomp.conflist").read_text())["name"] == "netcomp"
            assert "netcomp" in pod("network", "ls", "--format", "{{.Name}}").split()

            # A container on the default network, and storage through podman's CNI args.
            run = ["run", "--pull=never", "--network", "netcomp"]
            pod(*run, "-d", "--name", "c1", IMAGE, "/bin/sleep", "600", cni_args="NETCOMP_NETWORKS=storage")
            c1 = pod.inspect("c1")
            cid = c1["Id"]
            seen = addrs(pod, "c1")
            assert sorted(seen) == ["eth0", "stor0"], seen
            att = attachments(m)[cid]
            assert att["mgmt"]["interface"] == "eth0" and att["storage"]["interface"] == "stor0"
            assert ip(seen["eth0"]) == att["mgmt"]["ips"][0] and ip(seen["stor0"]) == att["storage"]["ips"][0]
            # podman shows the address netcomp returned (the default network's, the result of the ADD).
            assert podman_address(pod, "c1") == ip(seen["eth0"])
            assert leases(m) == sorted([f"mgmt/{ip(seen['eth0'])}", f"storage/{ip(seen['stor0'])}"])

            # Hot-plug one more network into the running container, from the node.
            sandbox = c1["NetworkSettings"]["SandboxKey"]
            m.run("netcomp", "attach", cid, sandbox, "backup", "--ifname", "bk0")
            assert sorted(addrs(pod, "c1")) == ["bk0", "eth0", "stor0"]
            assert sorted(attachments(m)[cid]) == ["backup", "mgmt", "storage"]

            # restart: podman's DEL takes everything (the hot-plugged network too), its ADD attaches afresh.
            pod("restart", "--time", "0", "c1", cni_args="NETCOMP_NETWORKS=storage")
            again = addrs(pod, "c1")
            assert sorted(again) == ["eth0", "stor0"], again
            assert sorted(attachments(m)[cid]) == ["mgmt", "storage"]
            assert podman_address(pod, "c1") == ip(again["eth0"])
            assert leases(m) == sorted([f"mgmt/{ip(again['eth0'])}", f"storage/{ip(again['stor0'])}"])

            # stop frees everything on the node: leases, cache entry, the veth's host end; rm leaves nothing more.
            pod("stop", "--time", "0", "c1")
            assert leases(m) == [] and attachments(m) == {}
            assert node_links(m) == sorted([*links_before, "ncpod0"])  # the bridge plugin's DEL keeps its bridge
            assert not Path(sandbox).exists()
            pod("rm", "c1")
            assert pod("ps", "--all", "--quiet") == ""

            # run --rm: attached for its life, nothing left after it.
            out = pod(*run, "--rm", IMAGE, "/bin/ip", "-o", "-4", "addr", "show", "eth0")
            assert " 10.210.0." in out, out
            assert leases(m) == [] and attachments(m) == {}
            # podman's own CNI state (libcni's result cache, in its private /var/lib) is gone too.
            assert pod.private("find", "/var/lib/cni", "-type", "f") == ""

        journal = m.text("journalctl", "-u", "netcomp", "--no-pager", "-o", "cat")
        assert f"CNI ADD container={cid} networks=mgmt,storage ok" in journal
        assert "Traceback" not in journal
