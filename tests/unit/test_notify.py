"""The systemd notify protocol's sender (daemon/notify.py) against a real datagram socket nobody reads: what the
serving loop sends (STATUS, WATCHDOG) never blocks on a full queue, so a PID 1 slow to read cannot stop the
daemon serving; READY waits a bounded time."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from netcomp.daemon.notify import Notifier


def test_a_full_queue_drops_status_and_watchdog_instead_of_blocking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = str(tmp_path / "notify")
    systemd = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    systemd.bind(path)
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    monkeypatch.setenv("WATCHDOG_USEC", "1000")  # a tick feeds it every time
    n = Notifier()
    sent: list[bool] = []

    def serve() -> None:
        n.ready("ready")
        for i in range(2000):  # far past any queue's length: each would block if the send waited
            n.status(f"serving {i}")
            n.tick()
        sent.append(n.send("STATUS=last", wait=0))

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    t.join(120)  # a blocking send never returns: the test fails here rather than hanging
    assert not t.is_alive(), "a send blocked on the full notify queue"
    assert sent == [False]  # the queue is full: dropped, and said so
    got = systemd.recv(4096).decode()
    assert got.startswith("READY=1")
    while True:  # drained, the next status goes through again
        try:
            systemd.recv(4096, socket.MSG_DONTWAIT)
        except BlockingIOError:
            break
    n.status("after")
    assert systemd.recv(4096).decode() == "STATUS=after"
    systemd.close()
