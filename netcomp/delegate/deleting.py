"""The one DEL path. A runtime's DEL, a hot-plug detach, an ADD's rollback, GC and recovery all end here, in
`Deleting.detach`, which DELs attachments side by side in the namespace their record identifies and keeps what
failed, with its error, for the runtime's retry. It is written so that the daemon may die at any instant and
lose nothing: the record goes only when every DEL succeeded (docs/reliability.md, "The write-ahead record" and
"Namespaces by identity"). Adding (adding.py) has the same shape and rolls back through this path."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, NamedTuple

from netcomp import faults
from netcomp.cni.codes import E_IO, E_OTHER, E_TRY_LATER
from netcomp.cni.invoke import Runner, RuntimeConf
from netcomp.delegate import poolclaims
from netcomp.delegate.hostres import HostResources
from netcomp.delegate.locks import KeyedLocks
from netcomp.delegate.request import Request
from netcomp.errors import DelegateError, HostError, NetcompError
from netcomp.host import container
from netcomp.host import netns as nsutil
from netcomp.ipam.store import AddressAllocator
from netcomp.pods.devices import Devices
from netcomp.records.files import Records
from netcomp.records.record import Attachment, Record

log = logging.getLogger("netcomp.delegate")


def side_by_side(pool: ThreadPoolExecutor, fn: Callable[..., Any], calls: list[tuple[Any, ...]]) -> list[Future[Any]]:
    """fn(*args) for each of `calls` side by side, in their order: all but the first handed to the pool, then the
    first run here, by the request's own thread, which would only wait otherwise (a lone one is no hand-off at
    all)."""
    rest = [pool.submit(fn, *args) for args in calls[1:]]
    if not calls:
        return []
    first: Future[Any] = Future()
    try:
        first.set_result(fn(*calls[0]))
    except Exception as e:
        first.set_exception(e)
    return [first, *rest]


def runtime_conf(entry: Record, a: Attachment, netns: str) -> RuntimeConf:
    return RuntimeConf(entry.container_id, netns, a.ifname, a.args, a.capability_args)


def as_delegate_error(e: Exception, network: str) -> DelegateError:
    if isinstance(e, DelegateError):
        return e
    if isinstance(e, HostError):
        return DelegateError(E_IO, str(e), network=network)
    return DelegateError(E_OTHER, f"{type(e).__name__}: {e}", network=network)  # a bug; the rest still happens


def why_unwritten(e: OSError | ValueError) -> str:
    """Why a record could not be written: the disk's error, or a result that cannot be written as JSON."""
    return (e.strerror or str(e)) if isinstance(e, OSError) else str(e)


class Recovered(NamedTuple):
    undone: int  # attachments
    failed: int  # attachments still to undo
    records: list[Record]  # every readable record as it is after the undo, for what else starts from them


class Deleting:
    """DELs what records hold, and finishes what earlier ADDs left undone: at start-up, before serving (`recover`:
    what a daemon that died mid-ADD left), and every few minutes (`retry_unfinished`: rollbacks whose DEL failed,
    which a runtime may never DEL again). An attachment never reported as done is DELeted, never guessed complete.
    `link_names`: the interface names in a namespace (a path or an fd on it);
    `home_netns`: where a device a killed plugin left in a container goes back to; `undone`: told, with the
    container's lock held, of a record written with nothing left to undo or removed (its key, and whether the
    record is still there: cluster/podsync's edits put off until that undo is done)."""

    def __init__(
        self,
        records: Records,
        runner: Runner,
        pool: ThreadPoolExecutor,
        locks: KeyedLocks,
        host: HostResources,
        addresses: AddressAllocator | None,
        link_names: Callable[[str | int], set[str]],
        home_netns: str,
    ) -> None:
        self.records, self.runner, self.pool, self.locks, self.host = records, runner, pool, locks, host
        self.addresses, self.link_names, self.home_netns = addresses, link_names, home_netns
        self.undone: Callable[[tuple[str, str], bool], object] = lambda key, kept: None
        # Told of every record written or removed (policy.enforcer.Enforcer.saved: a pod's table follows it).
        self.saved: Callable[[Record], object] = lambda entry: None
        # (container, ifname) of records with attachments to undo, and how many: kept as records are written,
        # so that status and the periodic retry need not read every record.
        self.unfinished: dict[tuple[str, str], int] = {}

    def delete(self, req: Request) -> tuple[str, ...]:
        """A runtime's DEL: what the container's record holds detached and the record removed; the networks it
        named (on an error too: the error's `networks`, for the request's log line)."""
        entry = self.records.load(req.container_id, req.ifname)
        if entry is None:
            return ()  # nothing of ours (DEL is idempotent)
        networks = tuple(a.network for a in entry.attachments)
        try:
            with nsutil.recorded(entry, req.netns, entry.netns, pin=True) as target:
                if not target.found and entry.attached:
                    log.info(
                        "DEL of container %s: its network namespace is gone; freeing what its plugins hold outside it",
                        entry.container_id,
                    )
                unfinished = entry.unfinished
                self.detach(entry, list(entry.attachments), target.path, why="DEL", raise_errors=True)
                if unfinished:  # an ADD that never finished: what its killed plugins left goes too
                    self.sweep(entry, target, unfinished)
        except NetcompError as e:
            e.networks = networks
            raise
        return networks

    def save(self, entry: Record) -> None:
        """Write the record (OSError as Records raises it), or remove it when it holds nothing."""
        key = (entry.container_id, entry.ifname)
        if entry.attachments:
            self.records.save(entry)
        else:
            self.records.remove(*key)
        n = sum(1 for a in entry.attachments if a.state == "undo")
        if n:
            self.unfinished[key] = n
        else:
            self.unfinished.pop(key, None)
        if not entry.unfinished:  # every path that finishes an undo writes the record here
            self.undone(key, bool(entry.attachments))
        self.saved(entry)

    def detach(
        self, entry: Record, atts: list[Attachment], netns: str, *, why: str, raise_errors: bool = False
    ) -> list[DelegateError]:
        """DEL `atts` of the record in `netns` ("" when the namespace is gone), side by side (their networks are
        independent; each conflist's own plugins go in reverse). What was deleted leaves the record (the file
        goes when it is empty); what failed stays as `undo` with its error, logged."""

        futures = side_by_side(self.pool, self._delete_one, [(entry, a, netns, why) for a in atts])
        errors: list[DelegateError] = []
        done: list[Attachment] = []
        for a, fut in zip(atts, futures, strict=True):
            try:
                fut.result()
                done.append(a)
            except Exception as e:
                err = as_delegate_error(e, a.network)
                # A plugin's DEL of what its ADD never made may fail (host-device's "failed to find" the interface
                # it never moved): an attachment with no result was never made whole, and when its interface is
                # not in the namespace there is nothing of it to DEL.
                never_made = a.result is None
                if (err.permanent or never_made) and self._nothing_left(a, netns, why, entry.container_id, err):
                    done.append(a)
                    continue
                errors.append(err)
                a.state, a.error = "undo", err.full_msg + (f" ({err.details})" if err.details else "")
                a.permanent = err.permanent
                log.error(
                    "%s of container %s: DEL of network %s on %s failed, kept for a later DEL%s: %s",
                    why,
                    entry.container_id,
                    a.network,
                    a.ifname,
                    " (no retry can change this: it goes once its interface is gone)" if a.permanent else "",
                    a.error,
                )
        faults.point("after-del")
        entry.attachments = [a for a in entry.attachments if all(a is not d for d in done)]
        try:
            self.save(entry)
        except (OSError, ValueError) as e:
            # The record on disk still names everything this DEL tried: a later DEL tries it again.
            log.error("cannot record the DEL of container %s: %s", entry.container_id, why_unwritten(e))
        self.host.after_detach(done)
        if errors and raise_errors:
            # The error of the last network, as a DEL in reverse order would have met it first.
            raise errors[-1]
        return errors

    def _delete_one(self, entry: Record, a: Attachment, netns: str, why: str) -> None:
        self.runner.delete(a.conflist, runtime_conf(entry, a, netns), a.result)
        self._give_back(a, why, entry.container_id)  # only once its delegate has let go of them

    def _give_back(self, a: Attachment, why: str, cid: str) -> None:
        """What netcomp gave a detached attachment: its addresses, its device-info copy (the device itself is
        the kubelet's; a copy that cannot be removed is left to start-up's sweep)."""
        poolclaims.give_back(self.addresses, a)
        if a.device:
            try:
                Devices.remove_info(a)
            except HostError as e:
                log.error("%s of container %s: %s", why, cid, e)

    def _nothing_left(self, a: Attachment, netns: str, why: str, cid: str, err: DelegateError) -> bool:
        """After a DEL of `a` failed for a reason no retry changes (its plugin refuses the config's version, its
        arguments cannot be exec'd), or of an attachment its ADD never made whole: whether nothing of it is left,
        so that it can be forgotten rather than kept for ever. Nothing is left when its namespace is gone (`netns`
        "": recorded() found it nowhere) or has no interface of its name; what netcomp gave it (addresses, a
        device-info copy) is given back then."""
        try:
            left = bool(netns) and a.ifname in self.link_names(netns)
        except (HostError, DelegateError):
            return False
        if left:
            return False
        self._give_back(a, why, cid)
        log.warning(
            "%s of container %s: DEL of network %s on %s failed (%s); nothing of it is left in its namespace: "
            "forgotten",
            why,
            cid,
            a.network,
            a.ifname,
            err.full_msg,
        )
        return True

    def sweep(self, entry: Record, target: nsutil.Target, undone: list[Attachment]) -> None:
        """After an undo of `undone`: what the namespace has beyond what it had when the ADD began and what is
        still attached, and that a plugin killed half-way (a timeout, or the daemon killed with its delegates, as
        systemd's KillMode=mixed does) leaves (container.sweep: a temporary-named link, a device it was given),
        which its DEL does not find. Best-effort."""
        if entry.links_before is None or not target.found or not target.path or not undone:
            return
        try:
            strays = self.link_names(target.path) - set(entry.links_before) - {a.ifname for a in entry.attachments}
            strays.discard("lo")
            devices = {
                str(v)
                for a in undone
                for p in a.conflist.get("plugins") or []
                for k, v in p.items()
                if k in ("device", "deviceID", "pciBusID") and isinstance(v, str)
            }
            done = container.sweep(target.path, strays, self.home_netns, devices) if strays else []
            if done:
                log.warning(
                    "container %s: interfaces a killed plugin left in its namespace: %s",
                    entry.container_id,
                    "; ".join(done),
                )
        except (HostError, DelegateError) as e:
            log.error("container %s: cannot look for interfaces a killed plugin left: %s", entry.container_id, e)

    def undo(self, entry: Record, todo: list[Attachment], why: str) -> list[DelegateError]:
        """DEL `todo`, what an ADD left unfinished or a rollback left undone, in the record's namespace, then
        sweep what killed plugins left there; the DELs' errors."""
        with nsutil.recorded(entry, entry.netns, pin=True) as target:
            errors = self.detach(entry, todo, target.path, why=why)
            if not errors:
                self.sweep(entry, target, todo)
        return errors

    def undo_unfinished(self, entry: Record) -> None:
        """DEL what an ADD left unfinished (or a rollback left undone) before anything else is done to the
        container; DelegateError when some of it cannot be undone yet."""
        if not entry.unfinished:
            return
        errors = self.undo(entry, entry.unfinished, "undo of an unfinished ADD")
        if errors:
            raise DelegateError(
                E_TRY_LATER,
                f"container {entry.container_id} has attachments an earlier ADD left that cannot be undone yet: "
                f"{errors[-1].full_msg}",
                "DEL the container, or fix what the plugin reports",
            )

    def recover(
        self, records: list[Record] | None, devices: Devices | None, networks: Mapping[str, dict[str, Any]]
    ) -> Recovered:
        """At start-up, before serving: undo what ADDs left in progress when the daemon died (and retry
        rollbacks that failed). `records`: every record (Records.entries), read by the caller once for all of
        start-up, or here when None; `devices`, with the compiled `networks`, sweeps device-info copies."""
        self.records.remove_temp_files()  # never read as records: Records.scan skips hidden names
        if records is None:
            records = self.records.entries()
        entries = [e for e in records if e.unfinished]
        undone, failed = self._undo_all(entries, "recovery")
        if entries:
            records = self._read_again(records, entries)
        if devices is not None:
            unreadable = self.records.count() - len(records)  # files counted, nothing read again
            if unreadable > 0:  # which copies an unreadable record names cannot be known: none is removed
                log.warning("device-info copies no record names are not looked for: %d attachment cache entries "
                            "cannot be read, and a copy may be one of theirs (they are named in the log above)",
                            unreadable)  # fmt: skip
            else:
                devices.sweep(records, networks)
        if entries:
            log.warning(
                "recovered %d containers an earlier daemon left mid-ADD: %d attachments undone, %d still failing",
                len(entries),
                undone,
                failed,
            )
        return Recovered(undone, failed, records)

    def _read_again(self, records: list[Record], changed: list[Record]) -> list[Record]:
        """records with the `changed` ones read again, one file each (a record the undo emptied is gone, one that
        cannot be read now is logged and left out, as Records.entries does)."""
        now: dict[tuple[str, str], Record | None] = {}
        for e in changed:
            with self.locks.hold(e.container_id):  # every load holds the container's lock
                try:
                    now[(e.container_id, e.ifname)] = self.records.load(e.container_id, e.ifname)
                except HostError as err:
                    log.warning("%s, skipped", err)
                    now[(e.container_id, e.ifname)] = None
        out = [now.get((e.container_id, e.ifname), e) for e in records]
        return [e for e in out if e is not None]

    def retry_unfinished(self) -> tuple[int, int]:
        """Try again to DEL what rollbacks could not (called every few minutes): a runtime may never DEL a
        container whose ADD failed (containerd gives up on the sandbox), and what is recorded must still go.
        What failed for a reason no retry changes (Attachment.permanent) is not tried again: it stays, shown by
        `netcomp attachments`, until a DEL finds nothing of it left."""
        entries = []
        for cid, ifname in list(self.unfinished):
            with contextlib.suppress(HostError), self.locks.hold(cid):  # every load holds the container's lock
                e = self.records.load(cid, ifname)
                if e is not None and any(not a.permanent for a in e.unfinished):
                    entries.append(e)
                elif e is None:  # gone other than through save (removed by hand)
                    self.unfinished.pop((cid, ifname), None)
                    self.undone((cid, ifname), False)
        return self._undo_all(entries, "retry")

    def _undo_all(self, entries: list[Record], why: str) -> tuple[int, int]:
        def one(e: Record) -> tuple[int, int]:
            with self.locks.hold(e.container_id):
                fresh = self.records.load(e.container_id, e.ifname)  # a request may have changed it meanwhile
                if fresh is None or not fresh.unfinished:
                    return 0, 0
                todo = fresh.unfinished
                errors = self.undo(fresh, todo, why)
                return len(todo) - len(errors), len(errors)

        undone = failed = 0
        for u, f in self.pool.map(lambda e: self._guarded(one, e), entries):
            undone, failed = undone + u, failed + f
        return undone, failed

    def _guarded(self, fn: Callable[[Record], tuple[int, int]], e: Record) -> tuple[int, int]:
        """fn(e); an undo that could not even start (its namespace cannot be looked for, the record cannot be
        read) is logged and left for `retry_unfinished`, as a failed DEL is: a record left `adding` by a start-up
        whose undo raised would otherwise wait for the runtime's DEL, which may never come."""
        try:
            return fn(e)
        except (HostError, DelegateError) as err:
            log.error("cannot undo what container %s left unfinished: %s", e.container_id, err)
            if not getattr(err, "permanent", False):
                with contextlib.suppress(HostError), self.locks.hold(e.container_id):  # as every load and save
                    now = self.records.load(e.container_id, e.ifname)  # a DEL may have removed it meanwhile
                    if now is not None and any(not a.permanent for a in now.unfinished):
                        self.unfinished.setdefault((e.container_id, e.ifname), len(now.unfinished))
            return 0, len(e.unfinished)
