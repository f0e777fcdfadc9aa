"""The package on each distribution it is built for: Debian 12 (this machine, Python 3.11) and Debian 13 (the root
scripts/trixie-root.sh makes, Python 3.13). Built with that release's own tools, lintian of that release finds
no error and no warning that debian/netcomp.lintian-overrides does not justify, and the package depends on
exactly the Python minor version it was built with: apt refuses a python3 of another minor while netcomp is
installed (the node upgraded from bookworm to trixie that kept a netcomp bound to 3.11), and upgrades netcomp with
python3 when the netcomp built for the new minor is offered too.

Everything runs in throw-away overlays of the roots (nspawn.run_in), never on this machine's dpkg database."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.lab.debpackage import CLEAN_PATH, Dist, run
from tests.lab.nspawn import run_in

pytestmark = pytest.mark.root

APT_ENV = {"PATH": CLEAN_PATH, "LC_ALL": "C.UTF-8", "DEBIAN_FRONTEND": "noninteractive"}


def debs_dir(tmp_path: Path, *debs: Path) -> Path:
    """The .debs a test hands to a root, in one dir bound in at /debs."""
    d = tmp_path / "debs"
    d.mkdir(exist_ok=True)
    for deb in debs:
        shutil.copy(deb, d / deb.name)
    return d


def dummy_python3(tmp_path: Path, minor: str) -> Path:
    """A stand-in for Debian's `python3` package of another minor version: control data only, built with
    dpkg-deb. It is only ever offered to apt in a throw-away root."""
    src = tmp_path / f"python3-{minor}"
    (src / "DEBIAN").mkdir(parents=True)
    arch = run("dpkg", "--print-architecture").stdout.strip()
    (src / "DEBIAN" / "control").write_text(
        f"Package: python3\nVersion: {minor}.0-99\nArchitecture: {arch}\nMulti-Arch: allowed\n"
        "Maintainer: netcomp tests <netcomp@example.org>\n"
        f"Description: stand-in for python3 {minor} in netcomp's tests\n"
    )
    out = tmp_path / f"python3_{minor}.0-99_{arch}.deb"
    run("dpkg-deb", "--root-owner-group", "--build", str(src), str(out))
    return out


def sections(text: str) -> dict[str, str]:
    """Output of a script that prints `== NAME` before each part."""
    parts: dict[str, str] = {}
    name = ""
    for line in text.splitlines():
        if line.startswith("== "):
            name = line[3:].strip()
            parts[name] = ""
        elif name:
            parts[name] += line + "\n"
    return parts


def test_lintian_finds_no_error_and_no_unjustified_warning(dist: Dist, tmp_path: Path) -> None:
    debs = debs_dir(tmp_path, dist.deb)
    p = run_in(
        dist.root,
        "lintian",
        "--tag-display-limit",
        "0",
        f"/debs/{dist.deb.name}",
        binds=[(str(debs), "/debs", False)],
        env={"LC_ALL": "C.UTF-8", "HOME": "/tmp"},
        timeout=600,
    )
    # (Not --show-overrides: lintian 2.116 then exits 2 for the overridden errors.)
    assert [t for t in p.stdout.splitlines() if t.startswith(("E:", "W:"))] == [], p.stdout
    assert p.returncode == 0, p.stdout + p.stderr


def test_package_depends_on_the_python_minor_it_was_built_with(dist: Dist, tmp_path: Path) -> None:
    major, minor = (int(x) for x in dist.python.split("."))
    fields = run("dpkg-deb", "--field", str(dist.deb), "Version", "Depends").stdout
    assert f"Version: 0.1.0+py{dist.python}\n" in fields
    assert f"python3 (>= {dist.python}~), python3 (<< {major}.{minor + 1})" in fields

    # Two minors on: bookworm's 3.11 -> trixie's 3.13.
    other = dummy_python3(tmp_path, f"{major}.{minor + 2}")
    debs = debs_dir(tmp_path, dist.deb, other)
    script = f"""
        apt-get install -y -q /debs/{dist.deb.name} >/dev/null || exit 10
        /usr/bin/netcomp --version || exit 11
        echo "== plan"; apt-get -s install /debs/{other.name} 2>&1
        echo "== install"; apt-get install -y -q --no-remove /debs/{other.name} 2>&1; echo "exit $?"
        echo "== after"; dpkg-query -W -f '${{Package}} ${{Version}} ${{db:Status-Abbrev}}\\n' python3 netcomp
    """
    p = run_in(dist.root, "sh", "-c", script, binds=[(str(debs), "/debs", True)], env=APT_ENV)
    assert p.returncode == 0, p.stdout + p.stderr
    out = sections(p.stdout)
    # apt takes the other python3 only by removing netcomp; told not to remove anything, it refuses.
    assert f"Remv netcomp [0.1.0+py{dist.python}]" in out["plan"], out["plan"]
    assert "Packages need to be removed but remove is disabled" in out["install"], out["install"]
    assert out["install"].rstrip().endswith("exit 100"), out["install"]
    after = dict(line.split(" ", 1) for line in out["after"].splitlines())
    assert after["netcomp"] == f"0.1.0+py{dist.python} ii "
    assert after["python3"].split()[0].startswith(f"{dist.python}.") and after["python3"].endswith("ii ")


def test_apt_upgrades_netcomp_with_python3(deb: Path, trixie_root: Path, trixie_deb: Path, tmp_path: Path) -> None:
    """On Debian 12 with the package built there installed: offered Debian 13's python3 and the netcomp built
    for it, apt's plan upgrades netcomp with python3 instead of removing it."""
    old = Dist("debian12", Path("/"), deb).python
    new = Dist("debian13", trixie_root, trixie_deb).python
    other = dummy_python3(tmp_path, new)
    debs = debs_dir(tmp_path, deb, trixie_deb, other)
    script = f"""
        apt-get install -y -q /debs/{deb.name} >/dev/null || exit 10
        apt-get -s install /debs/{other.name} /debs/{trixie_deb.name} 2>&1
    """
    p = run_in(Path("/"), "sh", "-c", script, binds=[(str(debs), "/debs", True)], env=APT_ENV)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"Inst netcomp [0.1.0+py{old}] (0.1.0+py{new} " in p.stdout, p.stdout
    assert "Remv netcomp" not in p.stdout, p.stdout
