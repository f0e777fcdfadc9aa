"""A daemon's compiles, around the pipeline's: those under way (so that one that never ends makes the daemon not
ready rather than hanging it), what each wrote, logged in a few lines however many files, and the files of kept
networks written again when the output dir lost them. The reload itself is the Daemon's (daemon.py)."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from netcomp.cni import spec as cnispec
from netcomp.daemon.state import Snapshot
from netcomp.errors import Diagnostic
from netcomp.fsutil import atomic_write

if TYPE_CHECKING:
    from netcomp.compiler.output import Change, Output

log = logging.getLogger("netcomp.daemon")

# Compiled files named one by one in the log up to this many per compile; beyond, a line of counts (a cold start
# with thousands of networks must not flood the journal), and every file at debug level.
LOG_EACH_FILE = 20


def log_changes(changes: Sequence[Change], out_dir: str) -> None:
    verbs = {"add": "wrote", "change": "updated", "remove": "removed"}
    each = logging.INFO if len(changes) <= LOG_EACH_FILE else logging.DEBUG
    if log.isEnabledFor(each):
        for ch in changes:
            log.log(each, "%s %s", verbs[ch.kind], os.path.join(out_dir, ch.filename))
    if each != logging.INFO:
        counts: Counter[str] = Counter(ch.kind for ch in changes)
        done = ", ".join(f"{verbs[k]} {counts[k]}" for k in verbs if counts[k])
        log.info("compiled networks in %s: %s (each file at debug level)", out_dir, done)


def write_kept(snap: Snapshot, out_dir: str, output: Output) -> None:
    """A kept network whose file is not in the output dir (a restart after a reboot emptied /run): written
    from the last good state, so the dir shows what is served; `output` then reads the dir again."""
    for name in snap.kept:
        path = Path(out_dir) / f"{name}.conflist"
        if not path.exists():
            try:
                atomic_write(path, cnispec.dumps(snap.networks[name]))
                output.forget()  # re-read on the next write
                log.info("wrote %s from the last good state", path)
            except OSError as e:
                log.error("cannot write %s: %s", path, e.strerror)


class Compiles:
    """The compiles under way (a reload waiting for another's lock included): when each began; the last one's
    failure that no input explains (a bug, memory); `stall`, the test hook for one that never ends."""

    def __init__(self, stall: Callable[[str], None]) -> None:
        self.stall = stall
        self.error: Diagnostic | None = None
        self._lock = threading.Lock()
        self._began: list[float] = []  # time.monotonic() of each

    def begin(self) -> float:
        began = time.monotonic()
        with self._lock:
            self._began.append(began)
        return began

    def end(self, began: float) -> None:
        with self._lock:
            self._began.remove(began)

    def oldest(self) -> float | None:
        with self._lock:
            return min(self._began, default=None)
