"""A real systemd, booted with systemd-nspawn from the host's own /usr (read-only, tmpfs root, private network),
per ../shared/INFRA.md, or from another Debian root on a throw-away overlay; and commands run in such a root.
Always powered off and its cgroups and mounts removed, even when a test fails."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.lab.poll import until
from tests.lab.processes import reap


@dataclass
class Machine:
    name: str
    nspawn: subprocess.Popen[bytes]
    leader: int

    def run(
        self,
        *argv: str,
        check: bool = True,
        input: bytes | None = None,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[bytes]:
        prefix = ["nsenter", "-t", str(self.leader), "-a"]
        if env is not None:
            prefix += ["env", "-i", *(f"{k}={v}" for k, v in env.items())]
        p = subprocess.run([*prefix, *argv], input=input, capture_output=True, timeout=120, check=False)
        if check and p.returncode != 0:
            raise AssertionError(f"{' '.join(argv)}: {p.returncode}\n{p.stdout.decode()}{p.stderr.decode()}")
        return p

    def put(self, path: str, text: str) -> None:
        """Write a file in the machine (its parent dirs made)."""
        self.run("sh", "-c", 'mkdir -p "$(dirname "$1")" && cat > "$1"', "sh", path, input=text.encode())

    def text(self, *argv: str) -> str:
        return self.run(*argv).stdout.decode().strip()

    def show(self, unit: str, prop: str) -> str:
        return self.text("systemctl", "show", "-p", prop, "--value", unit)


def _leader(nspawn_pid: int) -> int | None:
    for child in Path(f"/proc/{nspawn_pid}/task/{nspawn_pid}/children").read_text().split():
        with contextlib.suppress(OSError):
            if Path(f"/proc/{child}/comm").read_text().strip() == "systemd":
                return int(child)
    return None


# Mounts a throw-away root: a tmpfs on $1, the root $2 as the lower layer of an overlay on it, then execs
# systemd-nspawn on that overlay with the remaining arguments. Run under `unshare --mount`, so the mounts exist only
# in that namespace and vanish with it (whatever happens to the test); the root itself is never written. nspawn's
# own --volatile=overlay refuses the host's "/", which is the Debian 12 root these tests use.
OVERLAY = """set -eu
mnt=$1; lower=$2; shift 2
mount -t tmpfs -o mode=0755 netcomp-test "$mnt"
mkdir "$mnt/upper" "$mnt/work" "$mnt/root"
mount -t overlay overlay -o "lowerdir=$lower,upperdir=$mnt/upper,workdir=$mnt/work" "$mnt/root"
exec systemd-nspawn --directory="$mnt/root" "$@"
"""


def _needs_nspawn() -> None:
    if os.geteuid() != 0 or shutil.which("systemd-nspawn") is None:
        pytest.skip("needs root and systemd-nspawn (systemd-container)")


@contextlib.contextmanager
def _nspawn_argv(name: str, root: Path | None, nspawn_args: Sequence[str]) -> Iterator[list[str]]:
    """The command that starts systemd-nspawn from a cgroup of its own (else nspawn leaves its cgroups at the
    root of the hierarchy), on the host's own /usr (root None: --volatile=yes) or on an overlay of `root`; the
    cgroups, the overlay's mount point and what nspawn leaves in /run are removed afterwards."""
    cg = f"nctest-{name}"
    hierarchies = [h for h in ("systemd", "unified") if Path(f"/sys/fs/cgroup/{h}").is_dir()]
    for h in hierarchies:
        Path(f"/sys/fs/cgroup/{h}/{cg}").mkdir(exist_ok=True)
    join = "; ".join(f"echo $$ > /sys/fs/cgroup/{h}/{cg}/cgroup.procs" for h in hierarchies)
    mnt = Path(tempfile.mkdtemp(prefix=f"nctest-{name}-"))
    if root is None:
        spawn = ["systemd-nspawn", "--directory=/", "--volatile=yes"]
    else:
        spawn = ["unshare", "--mount", "--propagation=private", "sh", "-c", OVERLAY, "sh", str(mnt), str(root)]
    try:
        yield [
            "sh",
            "-c",
            f'{join}; exec setsid "$@"',
            "sh",
            *spawn,
            "--register=no",
            "--keep-unit",
            f"--machine={name}",
            *nspawn_args,
        ]
    finally:
        for h in hierarchies:
            for d in sorted(Path(f"/sys/fs/cgroup/{h}/{cg}").glob("**/"), key=lambda p: -len(p.parts)):
                with contextlib.suppress(OSError):
                    d.rmdir()
        with contextlib.suppress(OSError):
            mnt.rmdir()  # the tmpfs on it went with the mount namespace
        # nspawn leaves these behind, empty (INFRA.md); deepest first.
        for leftover in (
            f"/run/systemd/nspawn/propagate/{name}",
            "/run/systemd/nspawn/propagate",
            "/run/systemd/nspawn/locks",
            "/run/systemd/nspawn",
            "/run/systemd/nspawn-root",
        ):
            with contextlib.suppress(OSError):
                os.rmdir(leftover)


def run_in(
    root: Path,
    *argv: str,
    binds: Sequence[tuple[str, str, bool]] = (),
    env: dict[str, str] | None = None,
    chdir: str = "/",
    timeout: float = 900,
) -> subprocess.CompletedProcess[str]:
    """Run a command in a throw-away copy of `root` ("/" is this machine), not booted, sharing this machine's
    network (for pip and apt). Whatever it writes outside `binds` is gone when it returns."""
    _needs_nspawn()
    bind_args = [f"--bind{'' if rw else '-ro'}={src}:{dst}" for src, dst, rw in binds]
    env_args = [f"--setenv={k}={v}" for k, v in (env or {}).items()]
    name = f"run-{os.getpid()}-{time.monotonic_ns() % 100000}"
    nspawn_args = ["--quiet", "--console=pipe", f"--chdir={chdir}", *bind_args, *env_args, "--", *argv]
    with _nspawn_argv(name, root, nspawn_args) as cmd:
        return subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, check=False, stdin=subprocess.DEVNULL
        )


@contextlib.contextmanager
def machine(name: str, binds: Sequence[tuple[str, str, bool]] = (), root: Path | None = None) -> Iterator[Machine]:
    """A booted systemd: on this machine's /usr on a tmpfs root (root None), or on a throw-away overlay of
    another root (the Debian 13 one, which has its own /etc and dpkg database)."""
    _needs_nspawn()
    bind_args = [f"--bind{'' if rw else '-ro'}={src}:{dst}" for src, dst, rw in binds]
    nspawn_args = [
        "--boot",
        "--private-network",
        "--console=pipe",
        *(["--bind-ro=/etc/alternatives"] if root is None else []),
        *bind_args,
        "--",
        "systemd.mask=nftables.service",
        "systemd.mask=systemd-firstboot.service",
        # A first boot (empty /etc) enables every installed unit by preset; those wanting network-online.target
        # (podman-restart, podman-auto-update) would hold the boot for wait-online's 2 minutes: there is no
        # network to wait for in a --private-network container.
        "systemd.mask=systemd-networkd-wait-online.service",
    ]
    with _nspawn_argv(name, root, nspawn_args) as cmd:
        nspawn = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        m: Machine | None = None
        try:

            def leader() -> int | None:  # the container's PID 1 appears as nspawn's child named systemd
                assert nspawn.poll() is None, "systemd-nspawn exited during boot"
                return _leader(nspawn.pid)

            m = Machine(name, nspawn, until(leader, "the container's systemd did not start", 60, 0.05))
            states = [""]

            def booted() -> bool:  # the first calls fail with "Failed to connect to bus"
                states.append(m.run("systemctl", "is-system-running", "--wait", check=False).stdout.decode().strip())
                return states[-1] in ("running", "degraded")

            until(booted, lambda: f"the container did not finish booting: {states[-1]!r}", 60)
            yield m
        finally:
            if m is not None:
                m.run("systemctl", "poweroff", "--no-block", check=False)
            reap(nspawn, 60)
