"""The installed daemon (/usr/bin/netcomp from the package, its private environment) in the same scenarios as
tests/integration/test_systemd_interface.py: the notify sequence across a broken edit, a fix, a reload and a stop, and
socket activation through systemd-socket-activate."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration import test_systemd_interface as svc
from tests.integration.test_systemd_interface import node  # noqa: F401  (the fixture)

pytestmark = pytest.mark.root


@pytest.fixture
def installed_netcomp(installed: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(svc, "NETCOMP", "/usr/bin/netcomp")


def test_installed_notify_sequence(installed_netcomp: None, node: dict[str, Path]) -> None:  # noqa: F811
    svc.test_notify_sequence_watching_degraded_and_recovery(node)


def test_installed_under_systemd_socket_activate(installed_netcomp: None, node: dict[str, Path]) -> None:  # noqa: F811
    svc.test_under_systemd_socket_activate(node)
