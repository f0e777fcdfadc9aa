"""A pool of threads for the server's work: started when needed (up to a limit), kept idle after. It is leaner
than concurrent.futures' ThreadPoolExecutor on every request's path: the work is a plain callable on a C queue (no
Future, no semaphore), and whoever submits it does not wait for it (the worker answers the client itself)."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

log = logging.getLogger("netcomp.server")


class Workers:
    def __init__(self, name: str, limit: int) -> None:
        self.name = name
        self.limit = limit
        self._queue: queue.SimpleQueue[Callable[[], object] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        # Workers with nothing to do, less the work queued that none has taken yet: below 0, work is waiting.
        self._spare = 0
        self._down = False

    def submit(self, work: Callable[[], object]) -> None:
        """Run work() on a worker: a spare one, or a new one while fewer than the limit run, or else the next to
        be free. Its exceptions are logged (a bug: work answers for itself). RuntimeError, and work() never
        runs, once shut down or when no worker runs and none can be started."""
        # One thread submits (the server's loop): the accounting below relies on it where a thread cannot be had.
        with self._lock:
            if self._down:
                raise RuntimeError(f"the {self.name} workers are shut down")
            self._spare -= 1
            start = self._spare < 0 and self._threads < self.limit
            if start:
                self._threads += 1
                self._spare += 1  # the new worker is this work's
        if start:
            try:
                threading.Thread(target=self._run, name=f"{self.name}_{self._threads}", daemon=True).start()
            except RuntimeError:  # no thread to be had now: the next worker to be free takes it, if any runs
                with self._lock:
                    self._threads -= 1
                    if not self._threads:
                        self._spare = 0
                        raise
                    self._spare -= 1
        self._queue.put(work)

    def _run(self) -> None:
        while True:
            work = self._queue.get()
            if work is None:
                return
            try:
                work()
            except Exception:
                log.exception("bug in a %s worker", self.name)
            del work  # a spare worker holds nothing of its last work
            with self._lock:
                self._spare += 1

    def shutdown(self) -> None:
        """Each worker ends once it is free (what is queued before this still runs)."""
        with self._lock:
            n = self._threads
            self._threads = self.limit  # no new ones
            self._down = True
        for _ in range(n):
            self._queue.put(None)
