"""Network namespaces for tests: a "host" netns (so links, bridges and sysctls the plugins make stay inside it)
with a veth pair as a macvlan master, and container netns. Everything is removed on exit, even on failure."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import pytest

from netcomp.cni.invoke import ExecResult, Runner, RuntimeConf, real_exec

PLUGIN_DIR = "/usr/lib/cni"
IP = shutil.which("ip") or "/usr/sbin/ip"  # real_exec takes absolute paths only


def ip(*args: str, netns: str | None = None, check: bool = True) -> str:
    argv = ["ip", *(["-n", netns] if netns else []), *args]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {p.stderr.strip()}")
    return p.stdout


def require_root_and_plugins() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    if not os.access(f"{PLUGIN_DIR}/macvlan", os.X_OK) or shutil.which("ip") is None:
        pytest.fail("containernetworking-plugins and iproute2 are missing: run `make setup`")


@dataclass
class Lab:
    host: str
    master: str = "ncm0"
    containers: list[str] = field(default_factory=list)

    def container(self, suffix: str = "") -> str:
        name = f"nc-ctr-{secrets.token_hex(4)}{suffix}"
        ip("netns", "add", name)
        self.containers.append(name)
        return name

    def exec_in_host(self, argv: Sequence[str], env: dict[str, str], stdin: bytes, timeout: float) -> ExecResult:
        """An Exec that runs the plugin inside the host netns."""
        return real_exec([IP, "netns", "exec", self.host, *argv], env, stdin, timeout)

    def attachment(self, ifname: str, container_id: str = "") -> tuple[str, Runner, RuntimeConf]:
        """A new container netns, a Runner that execs plugins in the host netns, and the runtime args."""
        ctr = self.container()
        runner = Runner([PLUGIN_DIR], exec_=self.exec_in_host, timeout=30)
        return ctr, runner, RuntimeConf(container_id or f"test-{ctr}", f"/var/run/netns/{ctr}", ifname)

    def links(self, netns: str) -> list[str]:
        out = ip("-o", "link", "show", netns=netns)
        return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines()]

    def mac(self, netns: str, dev: str) -> str:
        return ip("-o", "link", "show", "dev", dev, netns=netns).split("link/ether ")[1].split()[0]

    def addrs(self, netns: str, dev: str) -> list[str]:
        out = ip("-o", "addr", "show", "dev", dev, netns=netns)
        return [f.split()[3] for f in out.splitlines() if " inet" in f and "scope link" not in f]


@contextlib.contextmanager
def lab() -> Iterator[Lab]:
    require_root_and_plugins()
    lb = Lab(host=f"nc-host-{secrets.token_hex(4)}")
    ip("netns", "add", lb.host)
    try:
        ip("link", "add", lb.master, "type", "veth", "peer", "name", "ncm0p", netns=lb.host)
        for dev in ("lo", lb.master, "ncm0p"):
            ip("link", "set", dev, "up", netns=lb.host)
        yield lb
    finally:
        for ns in [*lb.containers, lb.host]:
            ip("netns", "del", ns, check=False)
