"""Finishing what an earlier ADD left undone: at start-up, before serving (`recover`: what a daemon that died
mid-ADD left), and every few minutes (`retry_unfinished`: rollbacks whose DEL failed, which a runtime may never
DEL again). Both undo: an attachment never reported as done is DELeted, never guessed to be complete."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import NamedTuple

from netcomp.delegate.delegator import Delegator
from netcomp.errors import DelegateError, HostError
from netcomp.host import netns as nsutil
from netcomp.records.record import Record

log = logging.getLogger("netcomp.delegate")


class Recovered(NamedTuple):
    undone: int  # attachments
    failed: int  # attachments still to undo
    records: list[Record]  # every readable record as it is after the undo, for what else starts from them


def recover(d: Delegator, records: list[Record] | None = None) -> Recovered:
    """At start-up, before serving: undo what ADDs left in progress when the daemon died (and retry
    rollbacks that failed). `records`: every record (Records.entries), read by the caller once for all of
    start-up, or here when not given."""
    d.cache.remove_temp_files()  # never read as records: Records.scan skips hidden names
    if records is None:
        records = d.cache.entries()
    entries = [e for e in records if e.unfinished]
    undone, failed = _undo_all(d, entries, "recovery")
    if entries:
        records = _read_again(d, records, entries)
    if d.devices is not None:
        _sweep(d, records)
    if entries:
        log.warning(
            "recovered %d containers an earlier daemon left mid-ADD: %d attachments undone, %d still failing",
            len(entries),
            undone,
            failed,
        )
    return Recovered(undone, failed, records)


def _sweep(d: Delegator, records: list[Record]) -> None:
    """The device-info copies no record names removed (Devices.sweep), unless a record cannot be read: which
    copies it names cannot be known then, and a copy removed would be missing when the record is restored. The
    entries' files are counted (Records.count: nothing is read again); those not among `records` are unreadable."""
    assert d.devices is not None
    unreadable = d.cache.count() - len(records)
    if unreadable > 0:
        log.warning("device-info copies no record names are not looked for: %d attachment cache entries cannot be "
                    "read, and a copy may be one of theirs (they are named in the log above)", unreadable)  # fmt: skip
        return
    d.devices.sweep(records, d.networks())


def _read_again(d: Delegator, records: list[Record], changed: list[Record]) -> list[Record]:
    """records with the `changed` ones read again, one file each (an entry the undo emptied is gone, one that
    cannot be read now is logged and left out, as Records.entries does)."""
    now: dict[tuple[str, str], Record | None] = {}
    for e in changed:
        with d.locks.hold(e.container_id):  # every load holds the container's lock
            try:
                now[(e.container_id, e.ifname)] = d.cache.load(e.container_id, e.ifname)
            except HostError as err:
                log.warning("%s, skipped", err)
                now[(e.container_id, e.ifname)] = None
    out = [now.get((e.container_id, e.ifname), e) for e in records]
    return [e for e in out if e is not None]


def retry_unfinished(d: Delegator) -> tuple[int, int]:
    """Try again to DEL what rollbacks could not (called every few minutes): a runtime may never DEL a
    container whose ADD failed (containerd gives up on the sandbox), and what is recorded must still go. What
    failed for a reason no retry changes (Attachment.permanent) is not tried again: it stays, shown by `netcomp
    attachments`, until a DEL finds nothing of it left."""
    entries = []
    for cid, ifname in list(d.unfinished):
        with contextlib.suppress(HostError), d.locks.hold(cid):  # every load holds the container's lock
            e = d.cache.load(cid, ifname)
            if e is not None and any(not a.permanent for a in e.unfinished):
                entries.append(e)
            elif e is None:  # gone other than through Delegator.save (removed by hand)
                d.unfinished.pop((cid, ifname), None)
                d.undone((cid, ifname), False)
    return _undo_all(d, entries, "retry")


def _undo_all(d: Delegator, entries: list[Record], why: str) -> tuple[int, int]:
    def one(e: Record) -> tuple[int, int]:
        with d.locks.hold(e.container_id):
            fresh = d.cache.load(e.container_id, e.ifname)  # a request may have changed it meanwhile
            if fresh is None or not fresh.unfinished:
                return 0, 0
            todo = fresh.unfinished
            with nsutil.recorded(fresh, fresh.netns, pin=True) as target:
                errors = d.detach(fresh, todo, target.path, why=why)
                if not errors:
                    d.sweep(fresh, target, todo)
            return len(todo) - len(errors), len(errors)

    undone = failed = 0
    for u, f in d.pool.map(lambda e: _guarded(d, one, e), entries):
        undone, failed = undone + u, failed + f
    return undone, failed


def _guarded(d: Delegator, fn: Callable[[Record], tuple[int, int]], e: Record) -> tuple[int, int]:
    """fn(e); an undo that could not even start (its namespace cannot be looked for, the record cannot be read)
    is logged and left for `retry_unfinished`, as a failed DEL is: a record left `adding` by a start-up whose
    undo raised would otherwise wait for the runtime's DEL, which may never come."""
    try:
        return fn(e)
    except (HostError, DelegateError) as err:
        log.error("cannot undo what container %s left unfinished: %s", e.container_id, err)
        if not getattr(err, "permanent", False):
            with contextlib.suppress(HostError), d.locks.hold(e.container_id):  # as every load, and as save counts
                now = d.cache.load(e.container_id, e.ifname)  # a DEL may have removed it meanwhile
                if now is not None and any(not a.permanent for a in now.unfinished):
                    d.unfinished.setdefault((e.container_id, e.ifname), len(now.unfinished))
        return 0, len(e.unfinished)
