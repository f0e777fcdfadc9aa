"""The Debian package, built with Debian's own tooling and installed for real: files and modes, lintian, the
installed command and shim working, and remove/purge leaving nothing behind that would hurt a node.

Installs on this machine (as root) and purges in `finally`; refuses to run where netcomp is already installed,
so that it never touches an operator's real installation."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLEAN_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"  # pyenv's python on PATH must not reach the build (INFRA)
pytestmark = pytest.mark.root


def run(*argv: str, check: bool = True, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=900, check=check, **kw)  # type: ignore[call-overload]


@pytest.fixture(scope="module")
def deb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if os.geteuid() != 0 or shutil.which("dpkg-buildpackage") is None or shutil.which("dh") is None:
        pytest.skip("needs root and debhelper (make setup installs them)")
    work = tmp_path_factory.mktemp("deb")
    # The working tree as it is (tests also run before a commit), without caches and build output.
    junk = shutil.ignore_patterns(".git", ".venv", "__pycache__", ".*_cache", ".hypothesis", "*.egg-info", "build")
    shutil.copytree(ROOT, work / "netcomp", symlinks=True, ignore=junk)
    shutil.rmtree(work / "netcomp" / "debian" / "netcomp", ignore_errors=True)
    p = run(
        "dpkg-buildpackage",
        "-us",
        "-uc",
        "-b",
        cwd=work / "netcomp",
        check=False,
        env={"PATH": CLEAN_PATH, "HOME": str(work), "LC_ALL": "C.UTF-8"},
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    (pkg,) = work.glob("netcomp_*.deb")
    return pkg


def test_lintian_reports_no_errors(deb: Path) -> None:
    if shutil.which("lintian") is None:
        pytest.skip("lintian is not installed")
    p = run("lintian", "--no-tag-display-limit", str(deb), check=False, env={"PATH": CLEAN_PATH, "HOME": "/tmp"})
    errors = [line for line in p.stdout.splitlines() if line.startswith("E:")]
    assert errors == [], p.stdout


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
        "/usr/share/doc/netcomp/examples/networks.d/10-storage.yaml": "-rw-r--r--",
    }
    for path, mode in want.items():
        assert modes.get(path) == mode, (path, modes.get(path))
    assert not any("__pycache__" in p or "/opt/" in p for p in modes)
    conffiles = run("dpkg-deb", "-I", str(deb), "conffiles").stdout.split()
    assert "/etc/netcomp/netcomp.yaml" in conffiles


@pytest.fixture
def installed(deb: Path) -> Iterator[None]:
    if run("dpkg-query", "-W", "-f=${Status}", "netcomp", check=False).stdout.startswith("install ok"):
        pytest.skip("netcomp is installed on this machine; not touching it")
    p = run(
        "apt-get", "install", "-y", "-q", str(deb), check=False, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    )
    assert p.returncode == 0, p.stdout + p.stderr
    try:
        yield
    finally:
        run("dpkg", "--purge", "netcomp", check=False)


def test_install_use_remove_purge(installed: None) -> None:
    assert run("/usr/bin/netcomp", "--version").stdout.strip() == "netcomp 0.1.0"
    ex = "/usr/share/doc/netcomp/examples"
    p = run("/usr/bin/netcomp", "validate", f"{ex}/networks.d", "--static-dir", f"{ex}/static.d", check=False)
    assert p.returncode == 0, p.stderr
    p = run("/usr/lib/cni/netcomp", env={"CNI_COMMAND": "VERSION"})
    assert json.loads(p.stdout)["cniVersion"] == "1.0.0"
    st = os.stat("/usr/lib/cni/netcomp")
    assert stat.S_IMODE(st.st_mode) == 0o755 and st.st_uid == 0
    # The daemon would write the runtime's entry; removing the package must take it out.
    entry = Path("/etc/cni/net.d/00-netcomp.conflist")
    entry.parent.mkdir(parents=True, exist_ok=True)
    entry.write_text('{"cniVersion": "1.0.0", "name": "netcomp", "plugins": [{"type": "netcomp"}]}\n')
    Path("/var/lib/netcomp/cache").mkdir(parents=True, exist_ok=True)
    run("apt-get", "remove", "-y", "-q", "netcomp", env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    assert not entry.exists()
    assert not Path("/usr/bin/netcomp").exists() and not Path("/usr/lib/cni/netcomp").exists()
    assert Path("/etc/netcomp/netcomp.yaml").exists()  # a conffile stays until purge
    run("dpkg", "--purge", "netcomp")
    for gone in ("/etc/netcomp", "/var/lib/netcomp", "/usr/lib/netcomp"):
        assert not Path(gone).exists(), gone
