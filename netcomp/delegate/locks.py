"""One lock per container: requests for one container are serialized, different containers run in parallel."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class KeyedLocks:
    def __init__(self) -> None:
        self._mu = threading.Lock()
        self._locks: dict[str, tuple[threading.Lock, int]] = {}

    @contextmanager
    def hold(self, key: str, *, wait: bool = True) -> Iterator[bool]:
        """The key's lock, held for the block (True); with `wait` False, not held (False) when another holds it."""
        with self._mu:
            lock, users = self._locks.get(key, (threading.Lock(), 0))
            self._locks[key] = (lock, users + 1)
        try:
            held = lock.acquire(blocking=wait)
            try:
                yield held
            finally:
                if held:
                    lock.release()
        finally:
            with self._mu:
                lock, users = self._locks[key]
                if users == 1:
                    del self._locks[key]
                else:
                    self._locks[key] = (lock, users - 1)

    def __len__(self) -> int:
        return len(self._locks)
