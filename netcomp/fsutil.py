"""Writing files so that a reader never sees a half-written one.

Temp files are named `.<name>.netcomp-tmp` in the target's directory: same filesystem, so `os.replace` is atomic,
and an ending no runtime loads (not .conf, .conflist or .json). Multus wrote its config in place and users found it
empty; libcni and netplan write-then-rename, as we do.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

TMP_SUFFIX = ".netcomp-tmp"


def _tmp_for(path: Path) -> Path:
    return path.with_name(f".{path.name}{TMP_SUFFIX}")


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_tmp(path: Path, data: bytes, *, mode: int = 0o644, durable: bool = True) -> Path:
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


def publish(tmp: Path, path: Path) -> None:
    """The second half: the temp file replaces path in one step (readers see old or new, never a mix)."""
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write(path: Path, data: bytes, *, mode: int = 0o644, sync_dir: bool = True, durable: bool = True) -> None:
    """Write data to path atomically: temp file, fsync, rename, then (optionally) fsync the directory.

    Batch writers pass sync_dir=False and call fsync_dir once at the end. durable=False skips both fsyncs: the
    file is still replaced atomically (a crash of the writer never leaves it half written), but a power loss may
    lose the last writes."""
    publish(write_tmp(path, data, mode=mode, durable=durable), path)
    if sync_dir and durable:
        fsync_dir(path.parent)


# A file modified this recently may be modified again within the same filesystem timestamp tick (coarse clocks,
# and some filesystems keep 1-2 s): its stat then cannot tell the two versions apart. Such a file is "racily
# clean" (git's term) and its content must be compared as well.
RACY_NS = 3_000_000_000


def is_racy(st: os.stat_result, now_ns: int) -> bool:
    return max(st.st_mtime_ns, st.st_ctime_ns) >= now_ns - RACY_NS


def remove_stale_tmp(directory: Path) -> None:
    """Remove temp files a crash left behind (they are never loaded, but they are clutter)."""
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(directory):
            if entry.name.startswith(".") and entry.name.endswith(TMP_SUFFIX):
                with contextlib.suppress(OSError):  # gone meanwhile, or not a file: clutter, never an error
                    os.unlink(entry.path)
