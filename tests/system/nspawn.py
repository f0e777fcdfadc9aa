"""A real systemd, booted with systemd-nspawn from the host's own /usr (read-only, tmpfs root, private network),
per ../shared/INFRA.md. Always powered off and its cgroups removed, even when a test fails."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import reap


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

    def text(self, *argv: str) -> str:
        return self.run(*argv).stdout.decode().strip()

    def show(self, unit: str, prop: str) -> str:
        return self.text("systemctl", "show", "-p", prop, "--value", unit)

    def until(self, what: str, cond: object, timeout: float = 60.0) -> None:
        """Wait for a condition of the machine (bounded; the machine is another system, so we ask it)."""
        deadline = time.monotonic() + timeout
        while not cond():  # type: ignore[operator]
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(0.1)


def _leader(nspawn_pid: int) -> int | None:
    for child in Path(f"/proc/{nspawn_pid}/task/{nspawn_pid}/children").read_text().split():
        with contextlib.suppress(OSError):
            if Path(f"/proc/{child}/comm").read_text().strip() == "systemd":
                return int(child)
    return None


@contextlib.contextmanager
def machine(name: str, binds: Sequence[tuple[str, str, bool]] = ()) -> Iterator[Machine]:
    if os.geteuid() != 0 or shutil.which("systemd-nspawn") is None:
        pytest.skip("needs root and systemd-nspawn (systemd-container)")
    cg = f"nctest-{name}"
    hierarchies = [h for h in ("systemd", "unified") if Path(f"/sys/fs/cgroup/{h}").is_dir()]
    for h in hierarchies:
        Path(f"/sys/fs/cgroup/{h}/{cg}").mkdir(exist_ok=True)
    bind_args = [f"--bind{'' if rw else '-ro'}={src}:{dst}" for src, dst, rw in binds]
    # Join our cgroup first (else nspawn leaves its cgroups at the root of the hierarchy), then exec nspawn.
    join = "; ".join(f"echo $$ > /sys/fs/cgroup/{h}/{cg}/cgroup.procs" for h in hierarchies)
    cmd = [
        "sh",
        "-c",
        f'{join}; exec setsid "$@"',
        "sh",
        "systemd-nspawn",
        "--directory=/",
        "--volatile=yes",
        "--register=no",
        "--keep-unit",
        "--boot",
        f"--machine={name}",
        "--private-network",
        "--console=pipe",
        "--bind-ro=/etc/alternatives",
        *bind_args,
        "--",
        "systemd.mask=nftables.service",
        "systemd.mask=systemd-firstboot.service",
        # Nothing here needs the network online; a unit that wants it (podman-restart.service, installed with
        # podman) would hold the boot for systemd-networkd-wait-online's two minutes.
        "systemd.mask=systemd-networkd-wait-online.service",
    ]
    nspawn = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    m: Machine | None = None
    try:
        deadline = time.monotonic() + 60
        leader = None
        while leader is None:  # the container's PID 1 appears as nspawn's child named systemd
            assert nspawn.poll() is None, "systemd-nspawn exited during boot"
            assert time.monotonic() < deadline, "the container's systemd did not start"
            leader = _leader(nspawn.pid)
            if leader is None:
                time.sleep(0.05)
        m = Machine(name, nspawn, leader)
        state = ""
        while state not in ("running", "degraded"):  # the first calls fail with "Failed to connect to bus"
            assert time.monotonic() < deadline, f"the container did not finish booting: {state!r}"
            state = m.run("systemctl", "is-system-running", "--wait", check=False).stdout.decode().strip()
        yield m
    finally:
        if m is not None:
            m.run("systemctl", "poweroff", "--no-block", check=False)
        reap(nspawn, 60)
        for h in hierarchies:
            for d in sorted(Path(f"/sys/fs/cgroup/{h}/{cg}").glob("**/"), key=lambda p: -len(p.parts)):
                with contextlib.suppress(OSError):
                    d.rmdir()
        # nspawn leaves these behind, empty (INFRA.md); deepest first.
        for leftover in (
            f"/run/systemd/nspawn/propagate/{name}",
            "/run/systemd/nspawn/propagate",
            "/run/systemd/nspawn",
            "/run/systemd/nspawn-root",
        ):
            with contextlib.suppress(OSError):
                os.rmdir(leftover)
