"""This module offers `os.posix_spawn`'s interface with the GIL released: libc's posix_spawn(3) called through
ctypes. CPython's own holds the GIL until the child has exec'd (glibc spawns with CLONE_VFORK), so no other thread
of the daemon runs meanwhile (CPython 3.12 releases it for subprocess's vfork: gh-104372). Every argument libc
reads is built here and kept alive until it returns. Where libc lacks it, `os.posix_spawn` is used."""

from __future__ import annotations

import ctypes
import functools
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from netcomp import libc

# glibc's and musl's values (spawn.h).
SETPGROUP, SETSIGDEF, SETSIGMASK = 0x02, 0x04, 0x08
# Room for each of libc's opaque structs: glibc's are 80 bytes (file actions), 336 (attributes), 128 (sigset_t).
_OPAQUE = 1024


class _Calls:
    """The spawn family's functions, as netcomp.libc declares them (each call's result checked here: _check),
    looked up once: a spawn calls a dozen of them."""

    def __init__(self) -> None:
        for name in libc.SPAWN:
            setattr(self, name, libc.function(name))

    def __getattr__(self, name: str) -> Any:  # what __init__ set is found before this is asked
        raise AttributeError(name)


# None where libc lacks any of them: os.posix_spawn then.
_LIBC: _Calls | None = _Calls() if libc.has(*libc.SPAWN) else None
AVAILABLE = _LIBC is not None


def _check(err: int, what: str) -> None:
    if err != 0:
        raise OSError(err, f"{what}: {os.strerror(err)}")


@functools.lru_cache(maxsize=8)  # libc copies a set into the attributes: one built per set of signals serves all
def _sigset(calls: _Calls, signals: tuple[int, ...]) -> ctypes.Array[ctypes.c_char]:
    s = ctypes.create_string_buffer(_OPAQUE)
    calls.sigemptyset(s)
    for sig in signals:
        if calls.sigaddset(s, sig) != 0:
            raise ValueError(f"signal number out of range: {sig}")
    return s


def _strings(items: Iterable[bytes]) -> ctypes.Array[ctypes.c_char_p]:
    values: list[bytes | None] = [*items, None]
    return (ctypes.c_char_p * len(values))(*values)


# os.fsencode's codec, called directly: the environment is a few dozen strings on every spawn.
_FS = (sys.getfilesystemencoding(), sys.getfilesystemencodeerrors())


def _c_strings(argv: Sequence[str], env: Mapping[str, str]) -> tuple[list[bytes], list[bytes]]:
    """argv and env as os.posix_spawn takes them: ValueError for a NUL byte, which C would cut a string at, and
    for an environment name that is empty or holds '=' (it would set another variable)."""
    args = [a.encode(*_FS) for a in argv]
    envp = [k.encode(*_FS) + b"=" + v.encode(*_FS) for k, v in env.items()]
    if "" in env or any("=" in k for k in env):
        raise ValueError("illegal environment variable name")
    if b"\0" in b"".join(args) or b"\0" in b"".join(envp):
        raise ValueError("embedded null byte")
    return args, envp


def posix_spawn(
    path: str,
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    file_actions: Sequence[tuple[Any, ...]] = (),
    setpgroup: int | None = None,
    setsigmask: Iterable[int] | None = None,
    setsigdef: Iterable[int] = (),
) -> int:
    """`os.posix_spawn` with the GIL released while libc spawns; the child's pid. OSError as os.posix_spawn raises
    it (the exec's own failure included: glibc reports it from the child); ValueError for a string C cannot take
    (a NUL byte in it, or an environment name with '=')."""
    if _LIBC is None:
        kw: dict[str, Any] = {"setsigdef": tuple(setsigdef)}
        if setpgroup is not None:
            kw["setpgroup"] = setpgroup
        if setsigmask is not None:
            kw["setsigmask"] = tuple(setsigmask)
        return os.posix_spawn(path, list(argv), dict(env), file_actions=list(file_actions), **kw)
    calls = _LIBC
    fa = ctypes.create_string_buffer(_OPAQUE)
    attr = ctypes.create_string_buffer(_OPAQUE)
    _check(calls.posix_spawn_file_actions_init(fa), "posix_spawn_file_actions_init")
    try:
        _check(calls.posix_spawnattr_init(attr), "posix_spawnattr_init")
        try:
            keep: list[object] = []  # what libc was given a pointer to, alive until the spawn is done
            for action in file_actions:
                kind = action[0]
                if kind == os.POSIX_SPAWN_DUP2:
                    err = calls.posix_spawn_file_actions_adddup2(fa, action[1], action[2])
                elif kind == os.POSIX_SPAWN_CLOSE:
                    err = calls.posix_spawn_file_actions_addclose(fa, action[1])
                elif kind == os.POSIX_SPAWN_OPEN:
                    name = os.fsencode(action[2])
                    keep.append(name)
                    err = calls.posix_spawn_file_actions_addopen(fa, action[1], name, action[3], action[4])
                else:
                    raise ValueError(f"unknown file action {kind!r}")
                _check(err, "posix_spawn file action")
            flags = 0
            if setpgroup is not None:
                flags |= SETPGROUP
                _check(calls.posix_spawnattr_setpgroup(attr, setpgroup), "posix_spawnattr_setpgroup")
            sigdef = tuple(int(sig) for sig in setsigdef)
            if sigdef:
                flags |= SETSIGDEF
                default = _sigset(calls, sigdef)
                keep.append(default)
                _check(calls.posix_spawnattr_setsigdefault(attr, default), "posix_spawnattr_setsigdefault")
            if setsigmask is not None:
                flags |= SETSIGMASK
                mask = _sigset(calls, tuple(int(sig) for sig in setsigmask))
                keep.append(mask)
                _check(calls.posix_spawnattr_setsigmask(attr, mask), "posix_spawnattr_setsigmask")
            _check(calls.posix_spawnattr_setflags(attr, flags), "posix_spawnattr_setflags")
            args, envp = (_strings(c) for c in _c_strings(argv, env))
            pid = ctypes.c_int(0)
            err = calls.posix_spawn(ctypes.byref(pid), os.fsencode(path), fa, attr, args, envp)
            if err != 0:
                raise OSError(err, os.strerror(err), path)
            return pid.value
        finally:
            calls.posix_spawnattr_destroy(attr)
    finally:
        calls.posix_spawn_file_actions_destroy(fa)
