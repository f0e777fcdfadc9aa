from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "packaging" / "examples"
UPDATE_GOLDEN = os.environ.get("NETCOMP_UPDATE_GOLDEN") == "1"
KNOWN_PLUGINS = ("macvlan", "ipvlan", "sriov", "bridge", "host-local", "static", "dhcp", "whereabouts")


def reap(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """Wait for a process told to stop; kill it if it has not within timeout."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def make_plugin_dir(path: Path, names: tuple[str, ...] = KNOWN_PLUGINS) -> Path:
    """Executable stand-ins for plugins: the compiler only checks that a plugin file exists and is executable."""
    path.mkdir(parents=True, exist_ok=True)
    for n in names:
        p = path / n
        p.write_text("#!/bin/sh\nexit 1\n")
        p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def plugin_dir(tmp_path: Path) -> Path:
    return make_plugin_dir(tmp_path / "cni-bin")
