"""host/rtnl.py lists links (names and aliases) with one rtnetlink dump, as pyroute2 does (the daemon no longer
imports pyroute2 to ask which host links it made)."""

from __future__ import annotations

import socket

import pytest

from netcomp.host import rtnl


def test_links_are_the_kernels() -> None:
    names = [name for name, _ in rtnl.links()]
    assert sorted(names) == sorted(name for _, name in socket.if_nameindex())


def test_same_names_and_aliases_as_pyroute2() -> None:
    pyroute2 = pytest.importorskip("pyroute2")
    with pyroute2.IPRoute() as ipr:
        theirs = sorted((m.get_attr("IFLA_IFNAME"), m.get_attr("IFLA_IFALIAS")) for m in ipr.get_links())
    assert sorted(rtnl.links()) == theirs


def test_malformed_attributes_are_an_error() -> None:
    data = memoryview(bytes([8, 0, 3, 0, 0x6C, 0x6F, 0, 0, 200, 0, 20, 0]))  # IFLA_IFNAME "lo", then a lie
    with pytest.raises(OSError):
        list(rtnl._attrs(data, 0, len(data)))
    assert [(k, bytes(v)) for k, v in rtnl._attrs(data, 0, 8)] == [(3, b"lo\0\0")]


def test_an_interrupted_dump_is_taken_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel marks a dump during which links changed (NLM_F_DUMP_INTR): it may miss a link, so it is taken
    again; one never whole is an error, not a short list. (The kernel's flag cannot be provoked on demand here:
    the single dump is replaced.)"""
    answers = [([("a", None)], True), ([("a", None), ("b", None)], False)]
    monkeypatch.setattr(rtnl, "_dump_once", lambda: answers.pop(0))
    assert rtnl.links() == [("a", None), ("b", None)]
    monkeypatch.setattr(rtnl, "_dump_once", lambda: ([], True))
    with pytest.raises(OSError, match="interrupted 3 times"):
        rtnl.links()
