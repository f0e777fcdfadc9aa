"""Reads files within a bound (`read_bounded`, for every file netcomp reads), and writes them so that a reader
never sees a half-written one: a temp file `.<name>.netcomp-tmp` in the same directory (so `os.replace` is atomic,
and no runtime loads it), then a rename."""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import os
import queue
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

log = logging.getLogger("netcomp.fsutil")
TMP_SUFFIX = ".netcomp-tmp"
# How netcomp opens a file of its own to write: a FIFO or a symlink planted at the name fails (ENXIO, ELOOP)
# instead of blocking, or writing through the link.
WRITE_FLAGS = os.O_WRONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOFOLLOW
# A file discard() took out of its directory's view, waiting for its storage to be freed.
GONE_SUFFIX = ".netcomp-gone"
# Paths as the caller gives them: str on the path of every CNI request (pathlib costs more there than the
# syscalls), Path elsewhere.
P = TypeVar("P", str, Path)

_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a directory",
    stat.S_IFLNK: "a symbolic link",
}


def size_text(n: int) -> str:
    """A limit as people write it: 16 MiB, 64 KiB, 300 bytes."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"


def read_bounded(path: str | os.PathLike[str], limit: int, *, follow: bool = True) -> bytes:
    """The bytes of the regular file at path, at most `limit` of them, symlinks followed only with `follow`. An
    OSError otherwise, whose strerror a diagnostic can quote after the file's name (`not a regular file: a FIFO`).
    The path is opened only if its stat says it is a regular file (opening a FIFO blocks; opening some devices
    starts something, a watchdog), with O_NONBLOCK all the same (in case it was swapped since), and checked again
    with fstat. Procfs files say size 0 and are read up to the limit."""
    try:
        st = os.stat(path, follow_symlinks=follow)
    except OSError as e:
        raise OSError(e.errno, e.strerror, os.fspath(path)) from None
    _regular(st, path)
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ELOOP and not follow:  # swapped for a symlink since the stat
            raise OSError(errno.ELOOP, "not a regular file: a symbolic link", os.fspath(path)) from None
        raise
    try:
        st = os.fstat(fd)
        _regular(st, path)
        if st.st_size > limit:
            raise _too_large(path, limit)
        chunks: list[bytes] = []
        got = 0
        while True:
            block = os.read(fd, min(limit + 1 - got, max(st.st_size + 1, 1 << 16)))
            if not block:
                return b"".join(chunks)
            chunks.append(block)
            got += len(block)
            if got > limit:  # it grew since fstat, or procfs (size 0) holds more
                raise _too_large(path, limit)
    finally:
        os.close(fd)


def _regular(st: os.stat_result, path: str | os.PathLike[str]) -> None:
    if not stat.S_ISREG(st.st_mode):
        kind = _KINDS.get(stat.S_IFMT(st.st_mode), "not a file")
        raise OSError(errno.EINVAL, f"not a regular file: {kind}", os.fspath(path))


def _too_large(path: str | os.PathLike[str], limit: int) -> OSError:
    return OSError(errno.EFBIG, f"larger than {size_text(limit)}, the most netcomp reads of it", os.fspath(path))


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
        fd = os.open(tmp, WRITE_FLAGS | os.O_CREAT | os.O_TRUNC, mode)
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
    """Write data to path atomically: temp file, fsync, rename, then (with sync_dir) fsync the directory.
    durable=False skips both fsyncs: the file is still replaced atomically, but a power loss may lose it."""
    publish(write_tmp(os.fspath(path), data, mode=mode, durable=durable), path)
    if sync_dir and durable:
        fsync_dir(Path(path).parent)


# A file modified this recently may change again within the same timestamp tick, unseen by its stat: it is
# "racily clean" (git's term), and its content must be compared as well.
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
    crash leaves it for remove_stale_tmp), and a thread of its own unlinks it. False when there was no such file.
    Not unlinked here: on ext4, unlinking a file whose blocks are on disk frees them in the unlink, mostly
    waiting, on the path of a DEL (docs/benchmarks.md)."""
    trash = _beside(os.fspath(path), f".{os.getpid()}-{next(_serial)}{GONE_SUFFIX}")
    try:
        os.rename(path, trash)
    except FileNotFoundError:
        return False
    held: list[str] | None = getattr(_held, "paths", None)
    if held is None:
        _JANITOR.put(trash)
    else:
        held.append(trash)
    return True


_held = threading.local()


@contextlib.contextmanager
def unlinks_after() -> Iterator[None]:
    """What discard() takes in this thread meanwhile goes to the janitor when the block ends, not at once: a
    serving thread wraps a request and the writing of its answer in it, so that the janitor's wake-up (a thread
    that takes the GIL) comes after the answer, not before it."""
    held: list[str] = []
    outer, _held.paths = getattr(_held, "paths", None), held
    try:
        yield
    finally:
        _held.paths = outer
        if outer is not None:  # a block inside another: its files go when the outer one ends
            outer.extend(held)
        else:
            for trash in held:
                _JANITOR.put(trash)


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
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    except OSError as e:  # left for the next start's sweep
        log.warning("cannot remove %s: %s", path, e.strerror)


_serial = itertools.count()
_JANITOR = _Janitor()
os.register_at_fork(after_in_child=_JANITOR.reset)
