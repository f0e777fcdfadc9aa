"""Writing files so that a reader never sees a half-written one.

Temp files are named `.<name>.netcomp-tmp` in the target's directory: same filesystem, so `os.replace` is atomic,
and an ending no runtime loads (not .conf, .conflist or .json). Multus wrote its config in place and users found it
empty; libcni and netplan write-then-rename, as we do.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

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


def publish_over(tmp: Path, path: Path) -> None:
    """As publish(), for a file that is replaced often and removed soon after (the attachment cache): the two
    names are swapped (renameat2's RENAME_EXCHANGE) and the old version removed under the temp name. A rename
    over an existing file makes ext4 start writing the new one out at once (auto_da_alloc, its guard against
    empty files after a power cut, for writers that do not fsync), and removing that file while the write is
    under way waits for it: measured here, a save 0.14 ms against 0.09 and the removal a few ms later 0.37 ms
    against 0.10. Where the kernel or filesystem cannot swap, or there is nothing to replace, this is publish()."""
    try:
        _exchange(tmp, path)
    except OSError:  # ENOENT (nothing there yet), EINVAL/ENOSYS/EOPNOTSUPP (cannot swap here), ...
        publish(tmp, path)
        return
    with contextlib.suppress(OSError):  # the new version is in place; a leftover temp file is only clutter
        os.unlink(tmp)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100
_renameat2: Any = None


def _exchange(a: Path, b: Path) -> None:
    global _renameat2
    if _renameat2 is None:
        import ctypes  # only for this: the compiler's CLI does not pay its import

        _renameat2 = ctypes.CDLL(None, use_errno=True).renameat2, ctypes.get_errno
    call, errno_of = _renameat2
    if call(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) != 0:
        err = errno_of()
        raise OSError(err, os.strerror(err), str(a))


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
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)
