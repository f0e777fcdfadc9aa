"""Declares every libc function netcomp calls through ctypes once, and checks each call: OSError with its errno
(the spawn family returns its error number: cni/spawn.py checks it). A function this libc lacks is None. With
Python 3.12 as the floor, setns() and unshare() give way to os.setns and os.unshare."""

from __future__ import annotations

import ctypes
import errno
import functools
import os
from typing import Any

_int, _uint, _short, _ptr, _str = ctypes.c_int, ctypes.c_uint, ctypes.c_short, ctypes.c_void_p, ctypes.c_char_p
_ulong = ctypes.c_ulong
_argv = ctypes.POINTER(ctypes.c_char_p)
# name: (result type, argument types)
PROTOTYPES: dict[str, tuple[Any, list[Any]]] = {
    "setns": (_int, [_int, _int]),
    "unshare": (_int, [_int]),
    "prctl": (_int, [_int, _ulong, _ulong, _ulong, _ulong]),
    "malloc_trim": (_int, [ctypes.c_size_t]),
    "name_to_handle_at": (_int, [_int, _str, _ptr, _ptr, _int]),
    "open_by_handle_at": (_int, [_int, _ptr, _int]),
    "posix_spawn": (_int, [ctypes.POINTER(_int), _str, _ptr, _ptr, _argv, _argv]),
    "posix_spawn_file_actions_init": (_int, [_ptr]),
    "posix_spawn_file_actions_destroy": (_int, [_ptr]),
    "posix_spawn_file_actions_adddup2": (_int, [_ptr, _int, _int]),
    "posix_spawn_file_actions_addclose": (_int, [_ptr, _int]),
    "posix_spawn_file_actions_addopen": (_int, [_ptr, _int, _str, _int, _uint]),
    "posix_spawnattr_init": (_int, [_ptr]),
    "posix_spawnattr_destroy": (_int, [_ptr]),
    "posix_spawnattr_setflags": (_int, [_ptr, _short]),
    "posix_spawnattr_setpgroup": (_int, [_ptr, _int]),
    "posix_spawnattr_setsigdefault": (_int, [_ptr, _ptr]),
    "posix_spawnattr_setsigmask": (_int, [_ptr, _ptr]),
    "sigemptyset": (_int, [_ptr]),
    "sigaddset": (_int, [_ptr, _int]),
}
SPAWN = [name for name in PROTOTYPES if name.startswith(("posix_spawn", "sig"))]


@functools.cache
def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:  # no C library to load this way
        return None


@functools.cache
def function(name: str) -> Any:
    """libc's `name` with its declared types (PROTOTYPES), or None where this libc has no such function."""
    fn = getattr(_libc(), name, None)  # None too where there is no C library
    if fn is not None:
        fn.restype, fn.argtypes = PROTOTYPES[name]
    return fn


def has(*names: str) -> bool:
    return all(function(n) is not None for n in names)


def _errno_call(name: str, *args: Any) -> int:
    """A call that returns -1 and sets errno on failure: its result, or OSError as os's functions raise it."""
    fn = function(name)
    if fn is None:
        raise OSError(errno.ENOSYS, f"{name} is not in this C library")
    ret = int(fn(*args))
    if ret == -1:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return ret


def setns(fd: int, nstype: int) -> None:
    """setns(2): the calling thread joins the namespace fd is on (os.setns from Python 3.12)."""
    _errno_call("setns", fd, nstype)


def unshare(flags: int) -> None:
    """unshare(2) (os.unshare from Python 3.12)."""
    _errno_call("unshare", flags)


def set_pdeathsig(signum: int) -> None:
    """prctl(PR_SET_PDEATHSIG, signum): the calling thread's process gets signum when its parent thread dies."""
    _errno_call("prctl", 1, signum, 0, 0, 0)  # PR_SET_PDEATHSIG, linux/prctl.h


def malloc_trim() -> bool:
    """glibc's malloc_trim(3): the C heap's free pages back to the system. False, nothing done, without glibc."""
    fn = function("malloc_trim")
    return bool(fn(0)) if fn is not None else False


def name_to_handle_at(dirfd: int, path: bytes, handle: Any, mount_id: Any, flags: int) -> None:
    """name_to_handle_at(2); `handle` and `mount_id` by reference (ctypes.byref)."""
    _errno_call("name_to_handle_at", dirfd, path, handle, mount_id, flags)


def open_by_handle_at(mount_fd: int, handle: Any, flags: int) -> int:
    """open_by_handle_at(2): a new descriptor; `handle` by reference."""
    return _errno_call("open_by_handle_at", mount_fd, handle, flags)
