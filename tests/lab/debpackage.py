"""The Debian package under test, for the system tests: the commands that build and inspect it (with a PATH that
keeps this machine's pyenv out), the releases it is built for (Dist), and a booted systemd with it installed
(on this machine's /usr, or in the Debian 13 root scripts/trixie-root.sh makes). The package itself is built
once per session by tests/system/conftest.py."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.lab.nspawn import Machine, machine

CLEAN_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"  # pyenv's python on PATH must not reach the build (INFRA)
# Made by scripts/trixie-root.sh (`make trixie-root`); never written by the tests, which use overlays of it.
TRIXIE_ROOT = Path(os.environ.get("NETCOMP_TRIXIE_ROOT", "/var/cache/netcomp-test/trixie/root"))
# A default network the booted machine serves with the Debian plugins: a bridge on host-local.
NSBRIDGE = {
    "cniVersion": "1.0.0",
    "name": "nsbridge",
    "plugins": [
        {
            "type": "bridge",
            "bridge": "ncns0",
            "isGateway": True,
            "ipam": {"type": "host-local", "subnet": "10.201.0.0/24"},
        }
    ],
}


def run(*argv: str, check: bool = True, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=900, check=check, **kw)  # type: ignore[call-overload]


@dataclass
class Dist:
    """A Debian release the package is built for and tested on: `root` is "/" for this machine."""

    name: str
    root: Path
    deb: Path

    @property
    def python(self) -> str:
        """The minor version of the root's python3, e.g. "3.11" (from its /usr/bin/python3 -> python3.11)."""
        return os.readlink(self.root / "usr/bin/python3").removeprefix("python")


@contextlib.contextmanager
def installed_machine(dist: Dist, request: pytest.FixtureRequest) -> Iterator[Machine]:
    """A booted systemd with the package installed and its units stopped, so that the test starts them."""
    name = f"ncsys-{dist.name}"
    if dist.root.samefile("/"):
        request.getfixturevalue("installed")  # on this machine; purged when the test ends
        with machine(name) as m:
            # A first boot enables units by preset: netcomp's started with the machine.
            m.run("systemctl", "stop", "netcomp.service", "netcomp.socket")
            yield m
        return
    with machine(name, binds=[(str(dist.deb.parent), "/debs", False)], root=dist.root) as m:
        env = {"PATH": CLEAN_PATH, "DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C.UTF-8"}
        m.run("apt-get", "install", "-y", "-q", f"/debs/{dist.deb.name}", env=env)
        # The maintainer scripts enabled and started the units, as on any node with systemd.
        assert m.show("netcomp.socket", "UnitFileState") == "enabled"
        assert m.show("netcomp.service", "ActiveState") == "active"
        m.run("systemctl", "stop", "netcomp.service", "netcomp.socket")
        yield m
