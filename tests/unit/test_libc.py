"""netcomp/libc.py: the one module that loads the C library, every function it calls declared there, each call's
failure an OSError with its errno."""

from __future__ import annotations

import ctypes
import errno
import re

import pytest

from netcomp import libc
from tests.lab.checkout import PACKAGE


def test_only_libc_py_loads_a_c_library() -> None:
    """And libnftables, loaded by policy/nft.py alone, its one user."""
    loads = re.compile(r"CDLL\(|ctypes\.cdll|LoadLibrary|PyDLL\(")
    found = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if loads.search(p.read_text()))
    assert found == ["libc.py", "policy/nft.py"]


def test_every_function_declared_is_in_this_libc() -> None:
    """glibc here: each with its declared result and argument types."""
    for name, (restype, argtypes) in libc.PROTOTYPES.items():
        fn = libc.function(name)
        assert fn is not None, name
        assert (fn.restype, fn.argtypes) == (restype, argtypes), name


def test_a_failed_call_is_an_oserror_with_its_errno() -> None:
    with pytest.raises(OSError) as e:
        libc.setns(-1, 0x40000000)
    assert e.value.errno == errno.EBADF
    with pytest.raises(OSError) as e:
        libc.unshare(-1)  # no such flags
    assert e.value.errno == errno.EINVAL
    with pytest.raises(OSError) as e:
        libc.open_by_handle_at(-1, ctypes.byref(ctypes.create_string_buffer(72)), 0)
    assert e.value.errno in (errno.EBADF, errno.EPERM, errno.EINVAL)


def test_a_function_this_libc_lacks_is_enosys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(libc, "function", lambda name: None)
    with pytest.raises(OSError) as e:
        libc.setns(0, 0)
    assert e.value.errno == errno.ENOSYS
    assert libc.malloc_trim() is False  # nothing to do where there is no malloc_trim
