"""Fixtures every kind of test may ask for: a directory of stand-in plugins (tests/lab/standins.py), and a root
for `netcomp daemon --root` with two networks (tests/lab/sdnotify.py), for the integration tests of the daemon
under systemd's protocols and the system tests of the installed one."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.lab.sdnotify import make_root
from tests.lab.standins import make_plugin_dir


@pytest.fixture
def plugin_dir(tmp_path: Path) -> Path:
    return make_plugin_dir(tmp_path / "cni-bin")


@pytest.fixture
def daemon_root(tmp_path: Path) -> dict[str, Path]:
    """Skipped unless root, with the Debian CNI plugins."""
    return make_root(tmp_path)
