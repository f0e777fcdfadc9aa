"""A test hook for the chaos suite (tests/chaos/): `NETCOMP_CRASH_AT=<point>[:<n>]` in the daemon's environment
makes it SIGKILL itself the n-th time (default: the first) it passes the named point, to show that a daemon
dying exactly there loses nothing. Points: `after-claim` (addresses claimed, nothing recorded yet),
`after-write-ahead` (an ADD's record is on disk, no delegate ran),
`between-delegates` (one network of an ADD finished, others may still run), `before-answer` (the ADD is recorded
as attached, the runtime not yet told), `after-del` (a DEL's delegates ran, the record not yet updated). Unset on
a node, where a point costs one call that does nothing."""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Mapping

ENV = "NETCOMP_CRASH_AT"
POINTS = ("after-claim", "after-write-ahead", "between-delegates", "before-answer", "after-del")
log = logging.getLogger("netcomp.daemon")


def from_env(environ: Mapping[str, str]) -> Callable[[str], None]:
    spec = environ.get(ENV, "")
    if not spec:
        return lambda point: None
    point, _, nth = spec.partition(":")
    if point not in POINTS or (nth and not nth.isdigit()):
        raise ValueError(f"{ENV}={spec!r}: expected one of {', '.join(POINTS)}, optionally :N")
    left = [int(nth or 1)]
    lock = threading.Lock()

    def crash(at: str) -> None:
        if at != point:
            return
        with lock:
            left[0] -= 1
            if left[0] != 0:
                return
        log.warning("%s=%s: killing the daemon at %s", ENV, spec, at)
        os.kill(os.getpid(), signal.SIGKILL)

    return crash
