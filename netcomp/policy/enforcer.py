"""This module keeps the policies' rules of the node's pods in force: inside an ADD, after its interfaces are made
and before it answers (`attached`: a pod is never reachable unprotected, and an ADD whose rules cannot be written
fails and is rolled back), and whenever the cluster's policies, namespaces or pods change (`changed`, then `sync`
on a thread of its own, which writes only the tables whose rules changed). A DEL takes the table away
(`detached`). What the cluster holds comes through a resolve.View (cluster/policywatch.py's); the node's own
pods' addresses come from their records, so a peer on this node counts from its ADD on, before its
network-status is written."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from ipaddress import ip_address
from typing import Any

from netcomp.cni.codes import E_OTHER
from netcomp.errors import DelegateError, HostError, NetcompError
from netcomp.pods.naming import PodRef
from netcomp.pods.netstatus import Pods, network_status
from netcomp.policy import nft
from netcomp.policy.podrules import PodRules
from netcomp.policy.resolve import Interface, LocalPod, Peers, PodInfo, View, pod_rules, touched
from netcomp.records.files import Records
from netcomp.records.record import Attachment, Record

log = logging.getLogger("netcomp.policy")
Key = tuple[str, str]  # a record's (container ID, ifname)
RETRY = 5.0  # seconds before a table that could not be written is tried again


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
        self._applied: dict[Key, PodRules] = {}  # the table in force in each record's namespace
        self._own: dict[tuple[str, str], PodInfo] = {}  # the node's pods, as their records have them
        self._writing: dict[Key, threading.Lock] = {}
        self._dirty = threading.Event()
        self._scope: set[str] | None = None  # the namespaces whose pods the next sync works out; None: every one
        self._came: set[str] = set()  # the namespaces where a node pod came, changed or went since the last sync
        self._records: dict[Key, Record] | None = None  # the attached records as the events told; None: read them
        self._generation = 0  # of what the rules are made of: one more at each change
        self._peers: tuple[int, Peers] | None = None  # the last sync's, while nothing changed since
        self._statuses: dict[Key, tuple[tuple[Attachment, ...], list[dict[str, Any]]]] = {}  # while the same
        self._failed: set[Key] = set()
        self._said: dict[Key, str] = {}  # the last PolicyNotEnforced said of a record, not said again
        self._unknown_said = False

    # ------------------------------------------------------------------------------------------------ the ADD

    def attached(self, entry: Record, new: list[Attachment]) -> None:
        """Put the rules of the record's pod in force, `new` counted as attached. DelegateError naming the policies
        when they cannot be: the ADD is rolled back."""
        ref = _pod_ref(entry)
        if ref is None:
            return
        if not self.known(max(0.0, self._known_by - time.monotonic())) and not self._unknown_said:
            self._unknown_said = True
            log.warning("policy: the cluster's policies are not known yet: pods are attached without them meanwhile")
        if not self.active():
            self._came_or_went(entry, ref)  # among the records the sync of a policy made later reads
            return
        atts = [a for a in entry.attachments if a.state == "attached" or any(a is n for n in new)]
        selectable = bool(list(self.view.policies(ref.namespace)))  # only its namespace's policies select it
        status = network_status(atts, "")
        info = self._info(ref, status, read=selectable)
        key = (entry.container_id, entry.ifname)
        with self._lock:
            self._own[(ref.namespace, ref.name)] = info
            if self._records is not None:
                self._records[key] = entry
            last = self._peers if self._peers is not None and self._peers[0] == self._generation else None
            peers = last[1] if last is not None else Peers(self.view, dict(self._own))
        try:
            if selectable:
                self.view.serve({s["name"] for s in status})  # its peers' addresses there are kept
                self._put(key, entry, ref, info, atts, status, peers, adding=True)
        finally:  # a peer of other pods' from now on: their sync starts once its own table is written
            self._came_or_went(entry, ref)

    def saved(self, entry: Record) -> None:
        """A record was written or removed (a DEL, an undo, a hot-plug's detach): with nothing left attached its
        table goes; otherwise its rules are worked out again."""
        if entry.attachments:
            with self._lock:
                ahead = not entry.attached and (self._records is None or (entry.container_id, entry.ifname) not in
                                                self._records)  # fmt: skip
            if not ahead:  # an ADD's write-ahead changes no rule: `attached` tells of its interfaces
                self._came_or_went(entry, _pod_ref(entry), itself=True)
        else:
            self.detached(entry)

    def detached(self, entry: Record) -> None:
        """The record's attachments are gone (a DEL): its table too, if its namespace is still there."""
        key = (entry.container_id, entry.ifname)
        with self._lock:
            had = self._applied.pop(key, None)
            self._failed.discard(key)
            self._said.pop(key, None)
            ref = _pod_ref(entry)
            if ref is not None:
                self._own.pop((ref.namespace, ref.name), None)
            if self._records is not None:
                self._records.pop(key, None)
            self._statuses.pop(key, None)
        if had and entry.netns and os.path.exists(entry.netns):
            try:
                with self._write_lock(key):
                    nft.remove(entry.netns, timeout=self.timeout, nft=self.nft_path)
            except (HostError, DelegateError) as e:
                log.warning("policy: cannot remove the table of container %s: %s", entry.container_id, e)
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
            self.sync(scope)

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
        own, status = {}, {}
        for e, ref in entries:
            status[e.container_id, e.ifname] = self._status(e)
            own[(ref.namespace, ref.name)] = self._info(ref, status[e.container_id, e.ifname], read=True, quiet=True)
        with self._lock:
            self._own = own
            failed = set(self._failed)
        self.view.serve({s["name"] for shown in status.values() for s in shown})
        peers, written = Peers(self.view, own), 0
        for e, ref in entries:
            key = (e.container_id, e.ifname)
            if spaces is not None and ref.namespace not in spaces and key not in failed:
                continue
            try:
                written += self._put(key, e, ref, own[(ref.namespace, ref.name)], e.attached, status[key], peers)
            except DelegateError as err:
                log.error("policy: %s", err.msg)
        with self._lock:
            self._peers = (generation, peers)  # an ADD until the next change resolves its peers from these
        return written

    # ------------------------------------------------------------------------------------------------ one pod

    def _status(self, entry: Record) -> list[dict[str, Any]]:
        """The network-status of a record's attachments, worked out again only when they change."""
        key, atts = (entry.container_id, entry.ifname), tuple(entry.attached)
        got = self._statuses.get(key)
        if got is None or len(got[0]) != len(atts) or any(a is not b for a, b in zip(got[0], atts, strict=True)):
            got = self._statuses[key] = (atts, network_status(list(atts), ""))
        return got[1]

    def _info(self, ref: PodRef, status: list[dict[str, Any]], *, read: bool, quiet: bool = False) -> PodInfo:
        """The pod with its records' addresses, its labels as the cluster's view has them (the watch that tells
        of their edits), and, when `read`, its named ports and, where the view lacks it, its labels from the
        node's pod watch (which reads a pod it has not seen)."""
        viewed = self.view.pod(ref.namespace, ref.name)
        known = None
        try:
            known = self.local(ref) if read else None
        except (HostError, NetcompError) as e:  # the API server is away: its labels as last seen
            if not quiet:
                log.warning("policy: pod %s cannot be read (%s); its labels as last seen", ref, e)
        labels = viewed.labels if viewed is not None else known.labels if known is not None else {}
        addresses = {s["name"]: tuple(ip_address(a) for a in s.get("ips") or []) for s in status}
        return PodInfo(ref.namespace, ref.name, labels, addresses, known.ports if known is not None else None)

    def _put(
        self, key: Key, entry: Record, ref: PodRef, info: PodInfo, atts: list[Attachment],
        status: list[dict[str, Any]], peers: Peers, *, adding: bool = False,
    ) -> int:  # fmt: skip
        shown = {s["interface"]: s["name"] for s in status}
        ifaces = tuple(Interface(a.ifname, a.network, shown[a.ifname], _is_netdev(a)) for a in atts)
        outcome = pod_rules(LocalPod(info, ifaces), peers)
        for iface, refs in outcome.unenforced:
            self._say(key, ref, iface, refs)
        with self._write_lock(key):
            if not adding and key not in self._applied and not outcome.rules:
                return 0  # no table, and none needed
            if self._applied.get(key) == outcome.rules and key not in self._failed:
                return 0
            started = time.monotonic()
            try:
                if outcome.rules:
                    nft.apply(entry.netns, outcome.rules, timeout=self.timeout, nft=self.nft_path)
                elif key in self._applied:
                    nft.remove(entry.netns, timeout=self.timeout, nft=self.nft_path)
            except (HostError, DelegateError) as e:
                self.observe("failed", time.monotonic() - started)
                with self._lock:
                    self._failed.add(key)
                names = sorted({p for i in outcome.rules.interfaces for p in i.policies})
                raise DelegateError(
                    E_OTHER,
                    f"cannot put the rules of {', '.join(names) or 'no policy'} in force in pod {ref}: {e}",
                    "the pod's interfaces are not answered for without them",
                ) from None
            self.observe("written", time.monotonic() - started)
            with self._lock:
                self._failed.discard(key)
                if outcome.rules:
                    self._applied[key] = outcome.rules
                else:
                    self._applied.pop(key, None)
        return 1

    def _say(self, key: Key, ref: PodRef, iface: Interface, refs: tuple[str, ...]) -> None:
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

    def _write_lock(self, key: Key) -> threading.Lock:
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


def _is_netdev(a: Attachment) -> bool:
    """Whether the attachment's interface is a kernel netdev in the pod: its result names it with a sandbox, or
    names no interface at all (a plugin that says nothing of it made one by the name it was given)."""
    ifaces = (a.result or {}).get("interfaces") or []
    if not ifaces:
        return True
    return any(i.get("name") == a.ifname and i.get("sandbox") for i in ifaces if isinstance(i, dict))
