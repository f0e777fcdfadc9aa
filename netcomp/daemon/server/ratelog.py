"""Log lines that a peer or a fault could repeat without end, said at most once per period: the first at once,
then, once the period has passed, the next one with how many were not said meanwhile."""

from __future__ import annotations

import logging
import threading
import time


class RateLimited:
    def __init__(self, log: logging.Logger, period: float, level: int = logging.WARNING) -> None:
        self.log, self.period, self.level = log, period, level
        self._lock = threading.Lock()
        self._last = -period
        self._unsaid = 0

    def __call__(self, msg: str, *args: object) -> bool:
        """Log msg % args now, unless a line was logged less than `period` ago (then it is only counted).
        Whether it was logged."""
        now = time.monotonic()
        with self._lock:
            if now - self._last < self.period:
                self._unsaid += 1
                return False
            unsaid, self._unsaid, self._last = self._unsaid, 0, now
        more = f" ({unsaid} more since the last such line)" if unsaid else ""
        self.log.log(self.level, msg + "%s", *args, more)
        return True
