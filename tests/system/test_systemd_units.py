"""The shipped systemd units and config: they parse, they are hardened to the level we claim, and they agree
with the daemon's defaults."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from netcomp import paths
from netcomp.settings import Settings, load_settings
from tests.lab.checkout import NETCOMP, ROOT

PKG = ROOT / "packaging"
MAX_EXPOSURE = 3.0  # docs/packaging.md

needs_analyze = pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is missing")


@pytest.fixture
def units(tmp_path: Path) -> Path:
    """The units as shipped, with ExecStart pointing at this checkout's netcomp (verify wants it to exist)."""
    text = (PKG / "netcomp.service").read_text()
    assert "ExecStart=/usr/bin/netcomp daemon\n" in text
    (tmp_path / "netcomp.service").write_text(text.replace("/usr/bin/netcomp", NETCOMP))
    shutil.copy(PKG / "netcomp.socket", tmp_path / "netcomp.socket")
    return tmp_path


@needs_analyze
def test_units_verify_cleanly(units: Path) -> None:
    # systemd-analyze verify exits 0 even on parse errors: its stderr is the verdict.
    p = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(units / "netcomp.service"), str(units / "netcomp.socket")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert p.stderr == "" and p.returncode == 0


@needs_analyze
def test_security_exposure_is_at_most_the_documented_level(units: Path) -> None:
    p = subprocess.run(
        ["systemd-analyze", "security", "--offline=true", str(units / "netcomp.service")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    m = re.search(r"Overall exposure level for netcomp.service: ([0-9.]+)", p.stdout + p.stderr)
    assert m, p.stdout + p.stderr
    assert float(m.group(1)) <= MAX_EXPOSURE
    documented = (PKG.parent / "docs" / "packaging.md").read_text()
    assert f"exposure level {m.group(1)}" in documented


def test_units_agree_with_the_daemons_defaults() -> None:
    service = (PKG / "netcomp.service").read_text()
    socket_unit = (PKG / "netcomp.socket").read_text()
    assert f"ListenStream={paths.SOCKET}\n" in socket_unit
    assert "SocketMode=0600\n" in socket_unit and "DirectoryMode=0700\n" in socket_unit
    assert "Type=notify\n" in service and "WatchdogSec=" in service and "Restart=on-failure\n" in service
    rw = re.search(r"^ReadWritePaths=(.*)$", service, re.M)
    assert rw is not None
    writable = {p.lstrip("-") for p in rw.group(1).split()}
    for needed in ("/run/netcomp", "/var/lib/netcomp", "/var/lib/cni"):
        assert needed in writable
    tmpfiles = (PKG / "tmpfiles.conf").read_text()
    # Every ReadWritePaths entry without "-" must exist when the service starts: tmpfiles makes them.
    for d in (
        paths.OUTPUT_DIR,
        paths.CACHE_DIR,
        str(Path(paths.SOCKET).parent),
        "/etc/netcomp/networks.d",
        *(p for p in rw.group(1).split() if not p.startswith("-")),
    ):
        assert re.search(rf"^d {re.escape(d)} ", tmpfiles, re.M), d


def test_shipped_config_is_all_defaults_and_documents_every_key(tmp_path: Path) -> None:
    text = (PKG / "netcomp.yaml").read_text()
    assert load_settings(PKG / "netcomp.yaml") == Settings()
    for key in Settings.model_fields:
        assert f"#{key}:" in text, f"netcomp.yaml does not document {key}"
    uncommented = tmp_path / "netcomp.yaml"
    uncommented.write_text(
        "\n".join(
            line[1:] if line.startswith("#") and ":" in line and not line.startswith("# ") else line
            for line in text.splitlines()
        )
        + "\n"
    )
    # The values shown are the defaults, except nodeName's: the machine's hostname, shown as an example name.
    shown, default = load_settings(uncommented).model_dump(), Settings().model_dump()
    assert shown.pop("nodeName") == "node-1" and default.pop("nodeName")
    assert shown == default
