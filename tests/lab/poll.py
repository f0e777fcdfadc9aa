"""Waiting for what another process does on its own schedule (a daemon, the kubelet, the API server): its state
polled with a deadline, never a sleep that guesses how long it takes. `until` fails the test when the deadline
passes; `within` returns what it saw last, for a caller that goes on either way (a teardown)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def within(check: Callable[[], Any], timeout: float, every: float = 0.1) -> Any:
    """check()'s first true value, polled every `every` seconds; its last value once `timeout` seconds passed."""
    deadline = time.monotonic() + timeout
    while not (got := check()) and time.monotonic() < deadline:
        time.sleep(every)
    return got


def until(check: Callable[[], Any], what: Any, timeout: float = 60, every: float = 0.1) -> Any:
    """check()'s first true value, polled every `every` seconds; AssertionError after `timeout` seconds, its
    message `what` (called when callable: the state and the logs as they are then)."""
    if got := within(check, timeout, every):
        return got
    raise AssertionError(what() if callable(what) else what)
