"""Writing files so that a reader never sees a half-written one.

Temp files are named `.<name>.netcomp-tmp` in the target's directory: same filesystem, so `os.replace` is atomic,
and an ending no runtime loads (not .conf, .conflist or .json). Multus wrote its config in place and users found it
empty; libcni and netplan write-then-rename, as we do.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import queue
import threading
from pathlib import Path
from typing import TypeVar

log = logging.getLogger("netcomp.fsutil")
TMP_SUFFIX = ".netcomp-tmp"
# A file discard() took out of its directory's view, waiting for its storage to be freed.
GONE_SUFFIX = ".netcomp-gone"


# Paths as the caller gives them: str on the path of every CNI request (pathlib's arithmetic cost more there than
# the syscalls, issue 14), Path elsewhere.
P = TypeVar("P", str, Path)


def _beside(path: str, suffix: str) -> str:
    """A hidden name beside path: the same directory (so a rename is atomic), an ending no runtime loads."""
    d, name = os.path.split(path)
    return os.path.join(d, f".{name}{suffix}")


def _tmp_for(path: P) -> P:
    tmp = _beside(os.fspath(path), TMP_SUFFIX)
    return tmp if isinstance(path, str) else Path(tmp)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_tmp(path: P, data: bytes, *, mode: int = 0o644, durable: bool = True) -> P:
    """The first half of an atomic write: data in path's temp file, on disk (fsync). Nothing is visible under
    path until publish(). On failure the temp file is removed."""
    tmp = _tmp_for(path)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fchmod(fd, mode)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return tmp


def publish(tmp: str | Path, path: str | Path) -> None:
    """The second half: the temp file replaces path in one step (readers see old or new, never a mix)."""
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write(
    path: str | Path, data: bytes, *, mode: int = 0o644, sync_dir: bool = True, durable: bool = True
) -> None:
    """Write data to path atomically: temp file, fsync, rename, then (optionally) fsync the directory.

    Batch writers pass sync_dir=False and call fsync_dir once at the end. durable=False skips both fsyncs: the
    file is still replaced atomically (a crash of the writer never leaves it half written), but a power loss may
    lose the last writes."""
    publish(write_tmp(os.fspath(path), data, mode=mode, durable=durable), path)
    if sync_dir and durable:
        fsync_dir(Path(path).parent)


# A file modified this recently may be modified again within the same filesystem timestamp tick (coarse clocks,
# and some filesystems keep 1-2 s): its stat then cannot tell the two versions apart. Such a file is "racily
# clean" (git's term) and its content must be compared as well.
RACY_NS = 3_000_000_000


def is_racy(st: os.stat_result, now_ns: int) -> bool:
    return max(st.st_mtime_ns, st.st_ctime_ns) >= now_ns - RACY_NS


def remove_stale_tmp(directory: Path) -> None:
    """Remove temp files and discarded ones a crash left behind (they are never loaded, but they are clutter)."""
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(directory):
            if entry.name.startswith(".") and entry.name.endswith((TMP_SUFFIX, GONE_SUFFIX)):
                with contextlib.suppress(OSError):  # gone meanwhile, or not a file: clutter, never an error
                    os.unlink(entry.path)


def discard(path: str | Path) -> bool:
    """Remove path as every reader of its directory sees it, at once: it is renamed to a hidden name (atomic; a
    crash leaves it there for remove_stale_tmp), and a thread of its own unlinks it. False when there was no
    such file.

    Why not unlink here: on ext4, unlinking a file whose blocks are on disk (one that lived past the kernel's
    writeback, or one renamed over another, which is written out at once: auto_da_alloc) frees its blocks in the
    unlink, 0.35-0.5 ms here, mostly waiting, on the path of a DEL; the rename costs 0.05 ms."""
    trash = _beside(os.fspath(path), f".{os.getpid()}-{next(_serial)}{GONE_SUFFIX}")
    try:
        os.rename(path, trash)
    except FileNotFoundError:
        return False
    _JANITOR.put(trash)
    return True


def settle(timeout: float) -> bool:
    """Until every file discard() took is unlinked, or timeout (False)."""
    return _JANITOR.settle(timeout)


class _Janitor:
    """Unlinks what discard() renamed, on a thread of its own, started when first needed."""

    _lock: threading.Lock
    _idle: threading.Condition
    _queue: queue.SimpleQueue[str]
    _pending: int
    _thread: threading.Thread | None

    def __init__(self) -> None:
        self.reset()

    def put(self, path: str) -> None:
        with self._lock:
            if self._thread is None:
                thread = threading.Thread(target=self._run, name="janitor", daemon=True)
                try:
                    thread.start()
                except RuntimeError:  # no thread to be had: the caller waits for the unlink instead
                    _unlink(path)
                    return
                self._thread = thread
            self._pending += 1
        self._queue.put(path)

    def _run(self) -> None:
        while True:
            path = self._queue.get()
            _unlink(path)
            with self._lock:
                self._pending -= 1
                if not self._pending:
                    self._idle.notify_all()

    def settle(self, timeout: float) -> bool:
        with self._idle:
            return self._idle.wait_for(lambda: not self._pending, timeout)

    def reset(self) -> None:
        """Made anew; in a forked child too, where the parent's thread is not (its queue is the parent's)."""
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._queue = queue.SimpleQueue()
        self._pending = 0
        self._thread = None


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as e:  # left for the next start's sweep
        log.warning("cannot remove %s: %s", path, e.strerror)


_serial = itertools.count()
_JANITOR = _Janitor()
os.register_at_fork(after_in_child=_JANITOR.reset)
