"""Shared by the system tests: the Debian package built once per session for each distribution (Debian 12 on this
machine, Debian 13 in the root scripts/trixie-root.sh makes), and installed for a test."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.lab.checkout import checkout_copy
from tests.lab.debpackage import CLEAN_PATH, TRIXIE_ROOT, Dist, run

# Stands while the tests have the package installed on this machine. A run killed in between (a CI timeout, the end
# of a session) leaves it half-configured, and dpkg then refuses every later apt run, the throw-away overlays of
# this root included ("dpkg was interrupted"); the next run finishes the job first (finish_killed_install).
HOST_INSTALL_MARK = Path("/var/cache/netcomp-test/host-install")


def finish_killed_install() -> None:
    """Purge what a killed run installed on this machine, and run the triggers it left pending (man-db's)."""
    if not HOST_INSTALL_MARK.exists():
        return
    run("dpkg", "--purge", "netcomp", check=False)
    run("dpkg", "--configure", "-a", check=False)
    audit = run("dpkg", "--audit", check=False).stdout
    assert not audit.strip(), f"this machine's dpkg is left unfinished after a killed test run:\n{audit}"
    HOST_INSTALL_MARK.unlink()


@pytest.fixture(scope="session")
def deb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built on this machine (Debian 12, Python 3.11)."""
    if os.geteuid() != 0 or shutil.which("dpkg-buildpackage") is None or shutil.which("dh") is None:
        pytest.skip("needs root and debhelper (make setup installs them)")
    finish_killed_install()
    work = tmp_path_factory.mktemp("deb")
    checkout_copy(work)
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


@pytest.fixture
def installed(deb: Path) -> Iterator[None]:
    if run("dpkg-query", "-W", "-f=${Status}", "netcomp", check=False).stdout.startswith("install ok"):
        pytest.skip("netcomp is installed on this machine; not touching it")
    cni_state = Path("/var/lib/cni")  # made by the package's tmpfiles; CNI's, so purge leaves it
    cni_state_existed = cni_state.exists()
    HOST_INSTALL_MARK.parent.mkdir(parents=True, exist_ok=True)
    HOST_INSTALL_MARK.write_text(f"{deb.name}\n")
    try:
        p = run(
            "apt-get",
            "-o",
            "DPkg::Lock::Timeout=300",
            "install",
            "-y",
            "-q",
            str(deb),
            check=False,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )
        assert p.returncode == 0, p.stdout + p.stderr
        yield
    finally:
        run("dpkg", "--purge", "netcomp", check=False)
        HOST_INSTALL_MARK.unlink(missing_ok=True)
        if not cni_state_existed:
            with contextlib.suppress(OSError):
                cni_state.rmdir()


@pytest.fixture(scope="session")
def trixie_root() -> Path:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    if not (TRIXIE_ROOT / ".netcomp-test-root").is_file():
        pytest.skip(f"no Debian 13 root in {TRIXIE_ROOT}: `make trixie-root` (as root) makes it")
    return TRIXIE_ROOT


@pytest.fixture(scope="session")
def trixie_deb(trixie_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built in a throw-away copy of the Debian 13 root (Python 3.13), with Debian 13's debhelper; pip reaches
    the package index as this machine's does (its pip.conf and CA bundle, bound in read-only)."""
    from tests.lab.nspawn import run_in

    work = tmp_path_factory.mktemp("deb-trixie")
    checkout_copy(work)
    binds = [(str(work), "/build", True)]
    binds += [(f, f, False) for f in ("/etc/pip.conf", "/etc/ssl/certs/ca-certificates.crt") if Path(f).is_file()]
    p = run_in(
        trixie_root,
        "dpkg-buildpackage",
        "-us",
        "-uc",
        "-b",
        binds=binds,
        chdir="/build/netcomp",
        env={"HOME": "/build", "LC_ALL": "C.UTF-8", "PIP_CERT": "/etc/ssl/certs/ca-certificates.crt"},
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    (pkg,) = work.glob("netcomp_*.deb")
    return pkg


@pytest.fixture(scope="session", params=["debian12", "debian13"])
def dist(request: pytest.FixtureRequest) -> Dist:
    if request.param == "debian12":
        return Dist("debian12", Path("/"), request.getfixturevalue("deb"))
    return Dist("debian13", request.getfixturevalue("trixie_root"), request.getfixturevalue("trixie_deb"))
