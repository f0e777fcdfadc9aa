"""The Debian package, built with Debian's own tooling and installed for real: files and modes, the installed
command and shim working, and remove/purge leaving nothing behind that would hurt a node (lintian and the
interpreter pin, on both distributions: test_distributions.py).

Installs on this machine (as root) and purges in `finally`; refuses to run where netcomp is already installed,
so that it never touches an operator's real installation."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from tests.lab.debpackage import run

pytestmark = pytest.mark.root


def test_package_contents_and_modes(deb: Path) -> None:
    listing = run("dpkg-deb", "-c", str(deb)).stdout.splitlines()
    modes = {line.split()[-1].lstrip("."): line.split()[0] for line in listing}
    want = {
        "/usr/bin/netcomp": "-rwxr-xr-x",
        "/usr/lib/cni/netcomp": "-rwxr-xr-x",
        "/lib/systemd/system/netcomp.service": "-rw-r--r--",
        "/lib/systemd/system/netcomp.socket": "-rw-r--r--",
        "/usr/lib/tmpfiles.d/netcomp.conf": "-rw-r--r--",
        "/etc/netcomp/netcomp.yaml": "-rw-r--r--",
        "/usr/share/man/man8/netcomp.8.gz": "-rw-r--r--",
        "/usr/share/netcomp/schemas/network.schema.json": "-rw-r--r--",
        "/usr/share/netcomp/kubernetes/crd.yaml": "-rw-r--r--",
        "/usr/share/netcomp/kubernetes/rbac.yaml": "-rw-r--r--",
        "/usr/share/doc/netcomp/examples/networks.d/10-storage.yaml": "-rw-r--r--",
    }
    for path, mode in want.items():
        assert modes.get(path) == mode, (path, modes.get(path))
    assert not any("__pycache__" in p or "/opt/" in p for p in modes)
    conffiles = run("dpkg-deb", "-I", str(deb), "conffiles").stdout.split()
    assert "/etc/netcomp/netcomp.yaml" in conffiles


def test_install_use_remove_purge(installed: None) -> None:
    assert run("/usr/bin/netcomp", "--version").stdout.strip() == "netcomp 0.1.0"
    ex = "/usr/share/doc/netcomp/examples"
    p = run("/usr/bin/netcomp", "validate", f"{ex}/networks.d", "--static-dir", f"{ex}/static.d", check=False)
    assert p.returncode == 0, p.stderr
    p = run("/usr/lib/cni/netcomp", env={"CNI_COMMAND": "VERSION"})
    assert json.loads(p.stdout)["cniVersion"] == "1.0.0"
    st = os.stat("/usr/lib/cni/netcomp")
    assert stat.S_IMODE(st.st_mode) == 0o755 and st.st_uid == 0
    # The CNI plugin is the compiled shim, alone (docs/packaging.md says why no Python shim is installed beside it).
    assert Path("/usr/lib/cni/netcomp").read_bytes()[:4] == b"\x7fELF"
    assert not Path("/usr/lib/netcomp/shim").exists()
    # The daemon would write the runtime's entry; removing the package must take it out.
    entry = Path("/etc/cni/net.d/00-netcomp.conflist")
    entry.parent.mkdir(parents=True, exist_ok=True)
    entry.write_text('{"cniVersion": "1.0.0", "name": "netcomp", "plugins": [{"type": "netcomp"}]}\n')
    Path("/var/lib/netcomp/cache").mkdir(parents=True, exist_ok=True)
    run(
        "apt-get",
        "-o",
        "DPkg::Lock::Timeout=300",
        "remove",
        "-y",
        "-q",
        "netcomp",
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
    )
    assert not entry.exists()
    assert not Path("/usr/bin/netcomp").exists() and not Path("/usr/lib/cni/netcomp").exists()
    assert Path("/etc/netcomp/netcomp.yaml").exists()  # a conffile stays until purge
    run("dpkg", "--purge", "netcomp")
    for gone in ("/etc/netcomp", "/var/lib/netcomp", "/usr/lib/netcomp"):
        assert not Path(gone).exists(), gone
