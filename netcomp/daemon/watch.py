"""Watching intent, static and template dirs with inotify (inotify-simple). A dir that does not exist yet is
watched through its nearest existing ancestor; a burst of events is collected until QUIET seconds pass without
one (at most LONGEST), then the callback gets every path that changed."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable

from inotify_simple import INotify, flags

log = logging.getLogger("netcomp.watch")
MASK = flags.CREATE | flags.DELETE | flags.CLOSE_WRITE | flags.MOVED_TO | flags.MOVED_FROM | flags.ATTRIB
MASK |= flags.DELETE_SELF | flags.MOVE_SELF  # the watched dir itself removed or renamed
QUIET, LONGEST = 0.1, 1.0  # seconds: a burst ends after QUIET without an event, or after LONGEST in all


class Watcher:
    def __init__(self, dirs: Iterable[str], on_change: Callable[[set[str] | None], object]) -> None:
        self.dirs = [os.path.abspath(d) for d in dirs]
        # Called with the paths that changed, or None when the kernel's event queue overflowed (events were lost:
        # everything is to be looked at again).
        self.on_change = on_change
        self._overflowed = False
        self.ino = INotify()
        self.wds: dict[int, str] = {}
        self.sync()

    def _target(self, d: str) -> str:
        while not os.path.isdir(d) and d != "/":
            d = os.path.dirname(d)
        return d

    def sync(self) -> None:
        """Watch each dir, or its nearest existing ancestor; forget watches whose dir is gone."""
        want = {self._target(d) for d in self.dirs}
        have = set(self.wds.values())
        for wd, path in list(self.wds.items()):
            if path not in want or not os.path.isdir(path):
                with contextlib.suppress(OSError):  # the kernel dropped it already (dir deleted)
                    self.ino.rm_watch(wd)
                del self.wds[wd]
                have.discard(path)
        for d in sorted(want - have):
            try:
                self.wds[self.ino.add_watch(d, MASK)] = d
            except OSError as e:
                log.warning("cannot watch %s: %s", d, e.strerror)

    def _collect(self, timeout_ms: int) -> set[str]:
        out = set()
        for ev in self.ino.read(timeout=timeout_ms):
            if ev.mask & flags.Q_OVERFLOW:
                self._overflowed = True
                out.add("")  # something happened; what is lost
                continue
            base = self.wds.get(ev.wd)
            if base is None:
                continue
            if not ev.name and ev.mask & flags.ATTRIB and base not in self.dirs:
                # An ancestor's own metadata (the daemon chmods /run/netcomp as it binds its socket there): nothing
                # under it appeared or went away, and a recompile for it would make every start compile twice.
                continue
            out.add(os.path.join(base, ev.name) if ev.name else base)
        return out

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            changed = self._collect(500)
            if not changed:
                continue
            first = time.monotonic()
            while time.monotonic() - first < LONGEST:
                more = self._collect(int(QUIET * 1000))
                if not more:
                    break
                changed |= more
            for paths in self.batch(changed):
                try:
                    self.on_change(paths)
                except Exception:
                    log.exception("recompiling after a change failed")

    def batch(self, changed: set[str]) -> list[set[str] | None]:
        """What to tell on_change of the events collected (and the watches made anew for dirs that appeared):
        nothing, the paths that matter, or None after an overflow."""
        watched = set(self.wds.values())
        self.sync()
        if self._overflowed:
            # More events came than the kernel's queue holds (fs.inotify.max_queued_events): some are lost.
            self._overflowed = False
            log.warning("inotify's event queue overflowed: compiling everything again")
            return [None]
        # A dir on the way to one that does not exist (the daemon makes /run/netcomp for its socket) matters only
        # when a watched dir under it was there before or is there now: only then can inputs have come or gone.
        present = {d for d in self.dirs if d in watched or os.path.exists(d)}  # a layer may be a plain file
        inside = {p for p in changed if any(p == d or p.startswith(d + "/") for d in self.dirs)}
        above = {p for p in changed if any(d.startswith(p + "/") for d in present)}
        return [inside | above] if inside or above else []
