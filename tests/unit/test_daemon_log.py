"""What the daemon logs of the files a compile changed: each one by name when there are few, a line of counts when
there are many (a cold start with 10,000 networks wrote 10,000 lines to the journal), each at debug level then."""

from __future__ import annotations

import logging

import pytest

from netcomp.compiler.output import Change
from netcomp.daemon.compiles import LOG_EACH_FILE
from netcomp.daemon.compiles import log_changes as _log_changes


def changes(n: int, kind: str = "add") -> list[Change]:
    return [Change(kind, f"net{i}.conflist", None, b"{}") for i in range(n)]  # type: ignore[arg-type]


def test_a_few_changes_are_named_one_by_one(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "netcomp.daemon")
    _log_changes([*changes(2), Change("remove", "old.conflist", b"{}", None)], "/run/netcomp/networks")
    assert [r.getMessage() for r in caplog.records] == [
        "wrote /run/netcomp/networks/net0.conflist",
        "wrote /run/netcomp/networks/net1.conflist",
        "removed /run/netcomp/networks/old.conflist",
    ]


def test_many_changes_are_counted_and_named_at_debug_level(caplog: pytest.LogCaptureFixture) -> None:
    many = [*changes(LOG_EACH_FILE), *changes(3, "change"), Change("remove", "old.conflist", b"{}", None)]
    caplog.set_level(logging.INFO, "netcomp.daemon")
    _log_changes(many, "/out")
    assert [r.getMessage() for r in caplog.records] == [
        f"compiled networks in /out: wrote {LOG_EACH_FILE}, updated 3, removed 1 (each file at debug level)"
    ]
    caplog.clear()
    caplog.set_level(logging.DEBUG, "netcomp.daemon")
    _log_changes(many, "/out")
    assert len(caplog.records) == len(many) + 1
    assert caplog.records[0].levelno == logging.DEBUG and caplog.records[-1].levelno == logging.INFO
