"""Waiting for what another process does on its own schedule (a daemon, the kubelet, the API server): its state
polled with a deadline, never a sleep that guesses how long it takes."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def until(check: Callable[[], Any], what: Any, timeout: float = 60, every: float = 0.1) -> Any:
    """check()'s first true value, polled every `every` seconds; AssertionError after `timeout` seconds, its
    message `what` (called when callable: the state and the logs as they are then)."""
    deadline = time.monotonic() + timeout
    while not (got := check()):
        if time.monotonic() > deadline:
            raise AssertionError(what() if callable(what) else what)
        time.sleep(every)
    return got
