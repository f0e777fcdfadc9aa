"""The daemon's wait for a quiet moment (server.Server.wait_quiet), which holds the cluster's writes back while
CNI requests need the CPU: a request in flight keeps it waiting until its limit; once none has been served for
`settle` seconds it returns at once. On a real daemon in process (tests/lab/minidaemon.py), its own counters."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests.lab.minidaemon import mini_daemon


def test_a_request_in_flight_holds_the_wait_and_its_end_releases_it(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    with mini_daemon(tmp_path, tmp_path_factory.mktemp("s", numbered=True)) as d:
        server = d.daemon.server
        assert server is not None
        assert server.wait_quiet(0.0, 1.0) is True
        assert server.enter()
        try:
            assert server.wait_quiet(0.01, 0.2) is False  # in flight for all of its 0.2 s limit
        finally:
            server.leave()
        # A request in flight when the wait begins: the wait returns only once it ended and `settle` has passed
        # since (a lower bound wait_quiet cannot beat, whatever the machine's speed).
        done = threading.Event()
        got: list[bool] = []
        assert server.enter()

        def waiter() -> None:
            got.append(server.wait_quiet(0.05, 10.0))
            done.set()

        t = threading.Thread(target=waiter)
        t.start()
        left = time.monotonic()
        server.leave()
        assert done.wait(10.0) and got == [True]
        assert time.monotonic() - left >= 0.05
        t.join()


def test_requests_starting_and_ending_do_not_wake_a_quiet_waiter(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A waiter looks again once per `settle` at most: a hundred requests' starts and ends within its settle
    do not each put its thread on the CPU beside them (the cluster's writers wait so while a DEL follows its
    ADD). Its sleeps are counted."""
    with mini_daemon(tmp_path, tmp_path_factory.mktemp("s", numbered=True)) as d:
        server = d.daemon.server
        assert server is not None
        sleeps: list[float] = []
        real = server._never.wait

        def counted(timeout: float | None = None) -> bool:
            sleeps.append(timeout or 0.0)
            return real(timeout)

        server._never.wait = counted  # type: ignore[method-assign]
        got: list[bool] = []
        assert server.enter()
        t = threading.Thread(target=lambda: got.append(server.wait_quiet(0.5, 30.0)))
        t.start()
        for _ in range(100):
            server.leave()
            assert server.enter()
        server.leave()
        t.join(30.0)
        assert got == [True]
        # From the first busy look to the quiet one: one sleep per settle elapsed, not one per request.
        assert 1 <= len(sleeps) <= 4, sleeps
