"""The installed daemon (/usr/bin/netcomp from the package, its private environment) in the same scenarios as
tests/integration/test_systemd_interface.py: the notify sequence across a broken edit, a fix, a reload and a stop, and
socket activation through systemd-socket-activate."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.lab.sdnotify import notify_sequence, socket_activate

pytestmark = pytest.mark.root
INSTALLED = "/usr/bin/netcomp"


def test_installed_notify_sequence(installed: None, daemon_root: dict[str, Path]) -> None:
    notify_sequence(daemon_root, INSTALLED)


def test_installed_under_systemd_socket_activate(installed: None, daemon_root: dict[str, Path]) -> None:
    socket_activate(daemon_root, INSTALLED)
