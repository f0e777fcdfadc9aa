"""Giving the C heap's free pages back to the system."""

from __future__ import annotations

import ctypes
import functools


def give_back() -> None:
    """Return the free pages of the C heap to the system (glibc's malloc_trim(3)): a peak (a compile, a list of
    many objects parsed) is freed into the heap, and without this the daemon's resident size stays at the peak.
    Nothing elsewhere than glibc."""
    trim = getattr(_libc(), "malloc_trim", None)
    if trim is not None:
        trim(0)


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None)
