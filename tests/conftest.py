"""Fixtures every kind of test may ask for: a directory of stand-in plugins (tests/lab/standins.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.lab.standins import make_plugin_dir


@pytest.fixture
def plugin_dir(tmp_path: Path) -> Path:
    return make_plugin_dir(tmp_path / "cni-bin")
