"""This module keeps the policies' rules of the node's pods in force: inside an ADD, written while its delegates
make the interfaces (`ahead`; the rules name the interfaces, so they hold from the moment each one appears) and
waited for before it answers (`attached`: a pod is never reachable unprotected, and an ADD whose rules cannot be
written fails and is rolled back, its table taken away), and whenever the cluster's policies, namespaces or pods
change (`changed`, then `sync` on a thread of its own, which writes only the tables whose rules changed). A DEL
takes the table away (`detached`). What the cluster holds comes through a resolve.View (cluster/policywatch.py's);
the node's own pods' addresses come from their records, so a peer on this node counts from its ADD on, before its
network-status is written."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from ipaddress import ip_address
from typing import Any

from netcomp import faults
from netcomp.cni.codes import E_OTHER
from netcomp.errors import DelegateError, HostError, NetcompError
from netcomp.pods.naming import PodRef, display_name
from netcomp.pods.netstatus import Pods, network_status
from netcomp.policy import nft
from netcomp.policy.podrules import PodRules
from netcomp.policy.resolve import Address, Interface, LocalPod, NamedPorts, Peers, PodInfo, View, pod_rules, touched
from netcomp.records.files import Records
from netcomp.records.record import Attachment, Record

log = logging.getLogger("netcomp.policy")
RecordKey = tuple[str, str]  # a record's (container ID, ifname)
RETRY = 5.0  # seconds before a table that could not be written is tried again
JOBS = 32  # threads that write ADDs' rules ahead (more ADDs at once than that wait for one)


@dataclass(slots=True)
class _Early:
    """An ADD's rules being worked out and written while its delegates run: what they were made of."""

    generation: int  # of what the rules are made of, when they were begun
    peers: Peers | None  # the last sync's, if nothing changed since
    job: Future[None] | None = None
    who: tuple[Mapping[str, str], NamedPorts | None] | None = None  # the pod's labels and named ports
    ifaces: tuple[Interface, ...] = ()
    rules: PodRules | None = None
    done: threading.Event = field(default_factory=threading.Event)  # the ADD's interfaces are made, or it failed


class Enforcer:
    """`view`: the cluster's policies, namespaces and pods; `local(pod)`: a pod of this node's labels and named
    ports (the node's pod watch, which reads a pod it has not seen; None when unknown); `pods`: where events go."""

    def __init__(
        self,
        view: View,
        records: Records,
        local: Callable[[PodRef], PodInfo | None],
        pods: Pods | None = None,
        *,
        timeout: float = 10.0,
        nft_path: str = nft.NFT,
        observe: Callable[[str, float], object] = lambda outcome, seconds: None,
        active: Callable[[], bool] = lambda: True,
        known: Callable[[float], bool] = lambda timeout: True,
    ) -> None:
        """`active`: whether the cluster has a policy at all (without one, an ADD does nothing here); `known(t)`:
        waits up to t seconds until whether policies exist is known (the first list of them). An ADD waits for
        it until `timeout` seconds after this start: a daemon just started answers none before it knows what
        selects the pod, and one whose API server is away does not hold every ADD for it."""
        self.view, self.records, self.local, self.pods, self.active = view, records, local, pods, active
        self.known, self._known_by = known, time.monotonic() + timeout
        self.timeout, self.nft_path, self.observe = timeout, nft_path, observe
        self._lock = threading.Lock()
        self._applied: dict[RecordKey, PodRules] = {}  # the table in force in each record's namespace
        self._own: dict[tuple[str, str], PodInfo] = {}  # the node's pods, as their records have them
        self._writing: dict[RecordKey, threading.Lock] = {}
        self._dirty = threading.Event()
        self._scope: set[str] | None = None  # the namespaces whose pods the next sync works out; None: every one
        self._came: set[str] = set()  # the namespaces where a node pod came, changed or went since the last sync
        self._records: dict[RecordKey, Record] | None = None  # the attached records as the events told; None: read them
        self._generation = 0  # of what the rules are made of: one more at each change
        self._peers: tuple[int, Peers] | None = None  # the last sync's, while nothing changed since
        self._statuses: dict[RecordKey, tuple[tuple[Attachment, ...], dict[str, tuple[Address, ...]]]] = {}
        self._ahead: dict[RecordKey, _Early] = {}  # ADDs under way whose rules are written while their delegates run
        self._jobs: ThreadPoolExecutor | None = None
        self._running = False  # run() has begun: every table written ahead since is this process's
        self._unsure: set[RecordKey] = set()  # records left mid-ADD by a killed daemon: a table written ahead may stay
        self._failed: set[RecordKey] = set()
        self._said: dict[RecordKey, str] = {}  # the last PolicyNotEnforced said of a record, not said again
        self._unknown_said = False

    # ------------------------------------------------------------------------------------------------ the ADD

    def ahead(self, entry: Record, new: list[Attachment]) -> None:
        """Before the delegates run: the rules the record's pod will have with `new` attached, worked out and put
        in force on a thread of their own while the delegates run (`attached` waits for them). They match the
        interfaces by name, so they hold from the moment each interface appears; a rollback takes them away
        again (`detached`). It waits as `attached` does until whether policies exist is known."""
        ref = _pod_ref(entry)
        if ref is None or not self._known() or not self.active() or not list(self.view.policies(ref.namespace)):
            return
        key = (entry.container_id, entry.ifname)
        atts = [a for a in entry.attachments if a.state == "attached" or any(a is n for n in new)]
        with self._lock:
            early = self._ahead[key] = _Early(self._generation, self._last_peers())
            if self._jobs is None:
                self._jobs = ThreadPoolExecutor(JOBS, thread_name_prefix="policy-ahead")
            early.job = self._jobs.submit(self._early, key, entry, ref, atts, early)

    def _early(self, key: RecordKey, entry: Record, ref: PodRef, atts: list[Attachment], early: _Early) -> None:
        early.who = self._who(ref, read=True)
        ifaces = _interfaces(atts, ahead=True)
        self.view.serve({i.shown for i in ifaces})  # its peers' addresses there are kept
        info = PodInfo(ref.namespace, ref.name, early.who[0], {}, early.who[1])
        if (peers := early.peers) is None:
            with self._lock:
                own = dict(self._own)
            peers = self._new_peers(own)
        early.ifaces, early.rules = ifaces, self._rules(key, ref, LocalPod(info, ifaces), peers)
        if self._write(key, entry, ref, early.rules, early):
            faults.point("after-policy-ahead")

    def attached(self, entry: Record, new: list[Attachment]) -> None:
        """Put the rules of the record's pod in force, `new` counted as attached: those written ahead when they
        are still right (nothing they are made of changed meanwhile, and each interface is a kernel netdev as
        assumed). DelegateError naming the policies when they cannot be: the ADD is rolled back."""
        ref = _pod_ref(entry)
        if ref is None:
            return
        key = (entry.container_id, entry.ifname)
        with self._lock:
            early = self._ahead.get(key)
        error: DelegateError | None = None
        if early is not None and early.job is not None:
            try:
                early.job.result()
            except DelegateError as e:
                error = e
        try:
            self._attached(key, entry, ref, new, early, error)
        finally:  # a peer of other pods' from now on: their sync starts once its own table is written
            self._finish(key)
            self._came_or_went(entry, ref)

    def _attached(
        self, key: RecordKey, entry: Record, ref: PodRef, new: list[Attachment], early: _Early | None,
        error: DelegateError | None,
    ) -> None:  # fmt: skip
        if early is None and not self._known() and not self._unknown_said:
            self._unknown_said = True
            log.warning("policy: the cluster's policies are not known yet: pods are attached without them meanwhile")
        selectable = early is not None or bool(list(self.view.policies(ref.namespace)))  # by its namespace's only
        if not self.active() and not selectable:
            return  # among the records the sync of a policy made later reads (the caller's _came_or_went)
        atts = [a for a in entry.attachments if a.state == "attached" or any(a is n for n in new)]
        addresses = self._addresses(key, atts)
        who = early.who if early is not None and early.who is not None else self._who(ref, read=selectable)
        info = PodInfo(ref.namespace, ref.name, who[0], addresses, who[1])
        ifaces = _interfaces(atts, ahead=False)
        with self._lock:
            self._own[(ref.namespace, ref.name)] = info
            if self._records is not None:
                self._records[key] = entry
            same = (early is not None and early.generation == self._generation and early.ifaces == ifaces
                    and (error is not None or (self._applied.get(key) or PodRules()) == early.rules))  # fmt: skip
            peers = self._last_peers() or self._new_peers(dict(self._own))
        if same and error is not None:
            raise error
        if same or not selectable:
            return
        self.view.serve({i.shown for i in ifaces})
        self._write(key, entry, ref, self._rules(key, ref, LocalPod(info, ifaces), peers))

    def _finish(self, key: RecordKey) -> None:
        """The ADD under way is done with (answered or rolled back): its rules written ahead are no longer
        written, and the library's context that wrote them is let go of (nft._run says why it was kept)."""
        with self._lock:
            early = self._ahead.pop(key, None)
        if early is not None:
            early.done.set()

    def _known(self) -> bool:
        """Whether policies exist is known, waiting for it until `timeout` seconds after this start."""
        return self.known(max(0.0, self._known_by - time.monotonic()))

    def _last_peers(self) -> Peers | None:
        """The last sync's peers while nothing changed since (the lock held)."""
        return self._peers[1] if self._peers is not None and self._peers[0] == self._generation else None

    def _new_peers(self, own: dict[tuple[str, str], PodInfo]) -> Peers:
        """A round's peers, which give the last sync's sets of addresses again where they are the same."""
        return Peers(self.view, own, self._peers[1] if self._peers is not None else None)

    def saved(self, entry: Record) -> None:
        """A record was written or removed (a DEL, an undo, a hot-plug's detach): with nothing left attached its
        table goes; otherwise its rules are worked out again."""
        if not entry.attachments:
            self.detached(entry)
            return
        key = (entry.container_id, entry.ifname)
        with self._lock:
            if not self._running:  # an undo at start that failed: a table a killed daemon wrote ahead may stay
                self._unsure.add(key)
            if not entry.attached and (self._records is None or key not in self._records):
                return  # an ADD's write-ahead changes no rule: `attached` tells of its interfaces
        self._finish(key)  # a hot-plug rolled back: its rules written ahead are not written now
        self._came_or_went(entry, _pod_ref(entry), itself=True)

    def detached(self, entry: Record) -> None:
        """The record's attachments are gone (a DEL, a rollback): its table too, if its namespace is still there.
        An undo of what a killed daemon left takes away the table it may have written ahead."""
        key, ref = (entry.container_id, entry.ifname), _pod_ref(entry)
        with self._write_lock(key):  # after a write ahead under way: it writes nothing once this has begun
            self._finish(key)
            with self._lock:
                had = self._applied.pop(key, None) is not None or not self._running or key in self._unsure
                for kept in (self._failed, self._unsure):
                    kept.discard(key)
                self._said.pop(key, None)
                if ref is not None:
                    self._own.pop((ref.namespace, ref.name), None)
                if self._records is not None:
                    self._records.pop(key, None)
                self._statuses.pop(key, None)
            if had and entry.netns and os.path.exists(entry.netns):
                try:
                    nft.remove(entry.netns, timeout=self.timeout, nft=self.nft_path)
                except (HostError, DelegateError) as e:
                    log.warning("policy: cannot remove the table of container %s: %s", entry.container_id, e)
        with self._lock:
            self._writing.pop(key, None)
        self._came_or_went(None, ref)  # its addresses are no one's peers

    # ------------------------------------------------------------------------------------------------ changes

    def changed(self, spaces: Iterable[str] | None = None) -> None:
        """Something the rules are made of changed (a policy, a namespace's labels, a pod's labels or addresses):
        the rules of the node's pods in `spaces` (None: in every namespace) are worked out again."""
        with self._lock:
            self._generation += 1
            if spaces is None:
                self._scope = None
            elif self._scope is not None:
                self._scope.update(spaces)
        self._dirty.set()

    def _came_or_went(self, entry: Record | None, ref: PodRef | None, *, itself: bool = False) -> None:
        """A node pod came, changed (`itself`: its own rules too) or went: the pods it can be a peer of are worked
        out again, by the sync (which works out which they are, off the ADD's path)."""
        with self._lock:
            self._generation += 1
            if entry is not None and self._records is not None:
                self._records[(entry.container_id, entry.ifname)] = entry
            if ref is None:
                self._scope = None
            else:
                self._came.add(ref.namespace)
                if itself and self._scope is not None:
                    self._scope.add(ref.namespace)
        self._dirty.set()

    def run(self, stop: threading.Event, settle: float = 0.05) -> None:
        """Sync whenever told of a change (changes within `settle` seconds are synced together), and every RETRY
        seconds while a table could not be written."""
        self._running = True
        self.changed()  # at start: what the kernel kept across a restart is made right
        while not stop.is_set():
            if not self._dirty.wait(RETRY if self._failed else 60.0) and not self._failed:
                continue
            stop.wait(settle)
            with self._lock:
                self._dirty.clear()
                scope, self._scope, came, self._came = self._scope, set(), self._came, set()
            for ns in came:  # the pods a node pod can be a peer of
                if scope is not None:
                    scope |= touched(self.view.every_policy(), ns, [self.view.namespace_labels(ns) or {}])
            try:
                self.sync(scope)
            except Exception as e:  # a bug: said, and every pod's rules are worked out again a while later
                log.error("policy: a sync of the rules failed (%s: %s); tried again in %.0f s", type(e).__name__, e,
                          RETRY)  # fmt: skip
                stop.wait(RETRY)
                self.changed()

    def sync(self, spaces: set[str] | None = None) -> int:
        """The attached records of the pods in `spaces` (None: every pod) and those whose table could not be
        written: their rules worked out anew (each rule's peers once), and their table written where the rules
        changed. Returns how many tables were written."""
        with self._lock:
            if not self.active() and not self._applied and not self._failed:
                return 0  # no policy, and no table to take away
            if spaces is not None and not spaces and not self._failed:
                return 0
        with self._lock:
            generation, records = self._generation, self._records
        if spaces is None or records is None:  # read whole: at start, and at each full sync
            records = {(e.container_id, e.ifname): e for e in self.records.entries()}
            with self._lock:
                self._records = records
        entries = [(e, ref) for e in list(records.values()) if (ref := _pod_ref(e)) is not None and e.attached]
        own: dict[tuple[str, str], PodInfo] = {}
        for e, ref in entries:
            labels, ports = self._who(ref, read=True, quiet=True)
            addresses = self._addresses((e.container_id, e.ifname), e.attached)
            own[(ref.namespace, ref.name)] = PodInfo(ref.namespace, ref.name, labels, addresses, ports)
        with self._lock:
            self._own = dict(own)  # the ADDs' and DELs' from now on; this round reads its own
            failed, ahead = set(self._failed), set(self._ahead)
        self.view.serve({shown for p in own.values() for shown in p.addresses})
        peers, written = self._new_peers(own), 0
        for e, ref in entries:
            key = (e.container_id, e.ifname)
            if key in ahead or (spaces is not None and ref.namespace not in spaces and key not in failed):
                continue  # an ADD under way writes its own rules, and tells when it is done
            try:
                pod = LocalPod(own[(ref.namespace, ref.name)], _interfaces(e.attached, ahead=False))
                written += self._write(key, e, ref, self._rules(key, ref, pod, peers))
            except DelegateError as err:
                log.error("policy: %s", err.msg)
        with self._lock:
            self._peers = (generation, peers)  # an ADD until the next change resolves its peers from these
        return written

    # ------------------------------------------------------------------------------------------------ one pod

    def _addresses(self, key: RecordKey, atts: list[Attachment]) -> dict[str, tuple[Address, ...]]:
        """A record's addresses by network (as network-status names it), worked out again only when its
        attachments change."""
        got = self._statuses.get(key)
        if got is None or len(got[0]) != len(atts) or any(a is not b for a, b in zip(got[0], atts, strict=True)):
            status = network_status(atts, "")
            got = self._statuses[key] = (tuple(atts), {s["name"]: tuple(map(ip_address, s["ips"])) for s in status})
        return got[1]

    def _who(self, ref: PodRef, *, read: bool, quiet: bool = False) -> tuple[Mapping[str, str], NamedPorts | None]:
        """The pod's labels as the cluster's view has them (the watch that tells of their edits), and, when
        `read`, its named ports and, where the view lacks it, its labels from the node's pod watch (which reads
        a pod it has not seen)."""
        viewed = self.view.pod(ref.namespace, ref.name)
        known = None
        try:
            known = self.local(ref) if read else None
        except (HostError, NetcompError) as e:  # the API server is away: its labels as last seen
            if not quiet:
                log.warning("policy: pod %s cannot be read (%s); its labels as last seen", ref, e)
        labels = viewed.labels if viewed is not None else known.labels if known is not None else {}
        return labels, known.ports if known is not None else None

    def _rules(self, key: RecordKey, ref: PodRef, pod: LocalPod, peers: Peers) -> PodRules:
        outcome = pod_rules(pod, peers)
        for iface, refs in outcome.unenforced:
            self._say(key, ref, iface, refs)
        return outcome.rules

    def _write(self, key: RecordKey, entry: Record, ref: PodRef, rules: PodRules, early: _Early | None = None) -> int:
        """The record's table as `rules` say, unless they are what is in force (a transaction that failed left
        the table as it was); with `early`, only while the ADD that wrote ahead is still under way."""
        with self._write_lock(key):
            with self._lock:
                if early is not None and self._ahead.get(key) is not early:
                    return 0  # rolled back meanwhile
                if (self._applied.get(key) or PodRules()) == rules:
                    self._failed.discard(key)
                    return 0
            started, hold = time.monotonic(), early.done if early is not None else None
            try:
                nft.apply(entry.netns, rules, timeout=self.timeout, nft=self.nft_path, hold=hold)
            except (HostError, DelegateError) as e:
                self.observe("failed", time.monotonic() - started)
                with self._lock:
                    self._failed.add(key)
                names = sorted({p for i in rules.interfaces for p in i.policies})
                raise DelegateError(
                    E_OTHER,
                    f"cannot put the rules of {', '.join(names) or 'no policy'} in force in pod {ref}: {e}",
                    "the pod's interfaces are not answered for without them",
                ) from None
            self.observe("written", time.monotonic() - started)
            with self._lock:
                self._failed.discard(key)
                if rules:
                    self._applied[key] = rules
                else:
                    self._applied.pop(key, None)
        return 1

    def _say(self, key: RecordKey, ref: PodRef, iface: Interface, refs: tuple[str, ...]) -> None:
        words = (
            f"{iface.ifname} ({iface.shown}) is not a kernel interface in the pod, so netcomp cannot filter it: "
            f"{', '.join(refs)} not enforced there"
        )
        with self._lock:
            if self._said.get(key) == words:
                return
            self._said[key] = words
        log.warning("policy: pod %s: %s", ref, words)
        if self.pods is not None:
            self.pods.event(ref, "Warning", "PolicyNotEnforced", words)

    def _write_lock(self, key: RecordKey) -> threading.Lock:
        with self._lock:
            return self._writing.setdefault(key, threading.Lock())

    # ------------------------------------------------------------------------------------------------ people

    def explain(self, container_id: str, ifname: str) -> dict[str, Any] | None:
        """The rules in force for a record: per interface, the policies and how many rules pass each way."""
        with self._lock:
            rules = self._applied.get((container_id, ifname))
            failed = (container_id, ifname) in self._failed
            said = self._said.get((container_id, ifname))
        if rules is None and not failed and not said:
            return None
        out: dict[str, Any] = {"table": f"inet {nft.TABLE}", "interfaces": []}
        for i in rules.interfaces if rules else ():
            out["interfaces"].append({
                "interface": i.ifname, "network": i.network, "policies": list(i.policies),
                "ingress": None if i.ingress is None else len(i.ingress),
                "egress": None if i.egress is None else len(i.egress),
            })  # fmt: skip
        if failed:
            out["failed"] = "the last write of the table failed; it is tried again"
        if said:
            out["notEnforced"] = said
        return out

    @property
    def tables(self) -> int:
        with self._lock:
            return len(self._applied)


def _pod_ref(entry: Record) -> PodRef | None:
    p = entry.pod
    if not p or not p.get("namespace") or not p.get("name"):
        return None
    return PodRef(p["namespace"], p["name"], p.get("uid") or "")


def _interfaces(atts: list[Attachment], *, ahead: bool) -> tuple[Interface, ...]:
    """The interfaces of the attachments; `ahead` (before their delegates ran): each taken as a kernel netdev."""
    return tuple(Interface(a.ifname, a.network, display_name(a.network, a.conflist), ahead or _is_netdev(a))
                 for a in atts)  # fmt: skip


def _is_netdev(a: Attachment) -> bool:
    """Whether the attachment's interface is a kernel netdev in the pod: its result names it with a sandbox, or
    names no interface at all (a plugin that says nothing of it made one by the name it was given)."""
    ifaces = (a.result or {}).get("interfaces") or []
    if not ifaces:
        return True
    return any(i.get("name") == a.ifname and i.get("sandbox") for i in ifaces if isinstance(i, dict))
