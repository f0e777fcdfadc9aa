"""Shared by the system tests: the Debian package built once per session, and installed for a test."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLEAN_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"  # pyenv's python on PATH must not reach the build (INFRA)


def run(*argv: str, check: bool = True, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=900, check=check, **kw)  # type: ignore[call-overload]


@pytest.fixture(scope="session")
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
