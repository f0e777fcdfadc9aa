"""This module is the one seam where a test run injects faults into the daemon; no class of the core carries a
test hook. The code calls `point(name)` at each named point; a daemon started with `NETCOMP_CRASH_AT=<point>[:<n>]`
in its environment arms it (`arm`), and SIGKILLs itself the n-th time (default: the first) it passes that point,
to show that a daemon dying exactly there loses nothing (POINTS; docs/reliability.md, "The chaos run"). Unarmed,
as on a node, a point does nothing. `NETCOMP_STALL_AT=compile` makes every compile after the first wait for ever,
as one reading a file that never answers would: the daemon must still stop on SIGTERM, and say it is not
ready. The seam is the process's: a second daemon made in one process (tests) arms it anew for both."""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Mapping

ENV = "NETCOMP_CRASH_AT"
POINTS = (
    "after-claim",
    "after-write-ahead",
    "between-delegates",
    "after-policy-ahead",
    "before-policy",
    "mid-outcome",
    "before-answer",
    "after-del",
    "after-block-claim",
    "mid-ask",
    "after-block-release",
    "mid-write-behind",
    "after-ipamclaim-recorded",
)
log = logging.getLogger("netcomp.daemon")


class Crash:
    """crash(point): SIGKILL when `point` is the one armed (`at`), the n-th time; nothing otherwise."""

    def __init__(self, at: str | None = None, spec: str = "", nth: int = 1) -> None:
        self.at, self._spec, self._left, self._lock = at, spec, nth, threading.Lock()

    def __call__(self, at: str) -> None:
        if at != self.at:
            return
        with self._lock:
            self._left -= 1
            if self._left != 0:
                return
        log.warning("%s=%s: killing the daemon at %s", ENV, self._spec, at)
        os.kill(os.getpid(), signal.SIGKILL)


STALL_ENV = "NETCOMP_STALL_AT"
STALL_POINTS = ("compile",)


def stall_from_env(environ: Mapping[str, str]) -> Callable[[str], None]:
    """stall(point): waits for ever when `point` is the one NETCOMP_STALL_AT names; nothing otherwise."""
    at = environ.get(STALL_ENV, "")
    if at and at not in STALL_POINTS:
        raise ValueError(f"{STALL_ENV}={at!r}: expected one of {', '.join(STALL_POINTS)}")

    def stall(point: str) -> None:
        if at and point == at:
            log.warning("%s=%s: this %s never finishes", STALL_ENV, at, point)
            threading.Event().wait()

    return stall


_armed = Crash()


def arm(environ: Mapping[str, str]) -> None:
    """Arm the point NETCOMP_CRASH_AT names (disarm all when unset); ValueError for a point that is not one."""
    global _armed
    spec = environ.get(ENV, "")
    point, _, nth = spec.partition(":")
    if spec and (point not in POINTS or (nth and not nth.isdigit())):
        raise ValueError(f"{ENV}={spec!r}: expected one of {', '.join(POINTS)}, optionally :N")
    _armed = Crash(point, spec, int(nth or 1)) if spec else Crash()


def point(name: str) -> None:
    """The daemon passes the point `name`: killed here when it is the one armed."""
    _armed(name)


def armed(name: str) -> bool:
    """Whether `name` is the point armed (one that must do something to be reached asks first: mid-outcome
    writes half a record)."""
    return _armed.at == name
