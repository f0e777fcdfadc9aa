"""Hot-plug by editing the pod, as multus-dynamic-networks-controller gives Multus's users: a change of a running
pod's k8s.v1.cni.cncf.io/networks (or DANM's interfaces) annotation attaches what the edit adds and detaches what
it removes, through the one ADD and DEL path, with the same rules as at the pod's start. An element is what the
record says it was attached for (multus.element_key), so a changed one is a detach and an attach; the default
network does not change on a running pod. Every check an ADD of what is added makes without touching anything
comes first (check: a refused edit detaches nothing); then what is added on free interface names (a failure
leaves the pod as it was), then what is removed, then what takes a removed one's name. `PodSync` runs one pod at a time
from a queue the pod watch feeds, and at start-up once for every recorded pod (a daemon killed mid-hot-plug
finishes the job); a record with attachments to undo (a rollback's DEL failed) is synced once they are undone.
docs/kubernetes.md, "Hot-plug by editing the pod"."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from netcomp.delegate.delegator import Delegator
from netcomp.delegate.planning import check_edit, diff_edit, pod_of
from netcomp.errors import DelegateError
from netcomp.host import netns as nsutil
from netcomp.pods import naming
from netcomp.pods.multus import Ask
from netcomp.pods.naming import PodRef
from netcomp.pods.netstatus import network_status
from netcomp.records.record import Attachment, Record

log = logging.getLogger("netcomp.delegate")


@dataclass
class Synced:
    """What one sync did: interfaces added and removed, and the error that stopped it, if one did."""

    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    error: DelegateError | None = None


class PodSync:
    """Syncs pods whose annotations changed, one at a time, in a thread of its own: `changed(pod)` queues one
    (the pod watch calls it), `all_recorded(records)` queues every pod the records name (at start-up), `undone`
    one whose sync waited for a record's undo (Deleting.undone calls it, set by Delegator.when_undone)."""

    def __init__(self, d: Delegator) -> None:
        self.records, self.locks, self.runner, self.networks = d.records, d.locks, d.runner, d.networks
        self.planning, self.adding, self.deleting = d.planning, d.adding, d.deleting
        self.pods, self.addresses = d.pods, d.addresses
        # A queued pod, and its containers' (container ID, ifname) when the records were read already (at
        # start-up); None: they are looked up in the records when its turn comes.
        self._pending: dict[tuple[str, str], tuple[PodRef, list[tuple[str, str]] | None]] = {}
        # The records (container ID, ifname) whose sync waits for their attachments to be undone, with their pod:
        # one per record at most, forgotten when the undo is done or the record goes.
        self._waiting: dict[tuple[str, str], PodRef] = {}
        self._cond = threading.Condition()
        self.busy = False
        self.synced = 0  # pods synced so far (tests wait for it to pass a count)

    def changed(self, pod: PodRef) -> None:
        with self._cond:
            self._pending[(pod.namespace, pod.name)] = (pod, None)
            self._cond.notify()

    def undone(self, key: tuple[str, str], kept: bool) -> None:
        """A record written with nothing left to undo (`kept`), or removed: the pod whose sync waited for it is
        queued again (the pod watch queues a pod only when its annotations change, so its edit would otherwise
        wait for the next one). Called with the container's lock held, by whatever finished the undo."""
        with self._cond:
            pod = self._waiting.pop(key, None)
            if pod is None or not kept:
                return
            log.info("container %s has nothing left to undo: hot-plug of pod %s synced again", key[0], pod)
            self._pending[(pod.namespace, pod.name)] = (pod, None)
            self._cond.notify()

    def _wait(self, key: tuple[str, str], pod: PodRef) -> None:
        with self._cond:
            self._waiting[key] = pod

    @property
    def waiting(self) -> int:
        """Records whose sync waits for an undo."""
        with self._cond:
            return len(self._waiting)

    @property
    def pods_waiting(self) -> int:
        """Pods whose edit waits for an undo (a pod whose sandbox was made again may have two records waiting)."""
        with self._cond:
            return len({(p.namespace, p.name) for p in self._waiting.values()})

    def all_recorded(self, records: list[Record]) -> None:
        """Queue every pod `records` (every record, as read at start-up) name, with its containers: the records
        are not read again for them."""
        pods: dict[tuple[str, str], PodRef] = {}
        found: dict[tuple[str, str], list[tuple[str, str]]] = {}
        for e in records:  # every uid's: which of them is the live pod is sync's to tell (the watch's uid)
            if (pod := pod_of(e)) is not None:
                pods[(pod.namespace, pod.name)] = pod
                found.setdefault((pod.namespace, pod.name), []).append((e.container_id, e.ifname))
        with self._cond:
            for key, pod in pods.items():
                self._pending.setdefault(key, (pod, found[key]))  # one the watch queued meanwhile looks up
            self._cond.notify()

    def wait_synced(self, count: int, timeout: float) -> bool:
        """Until more than `count` pods were synced and nothing is queued or being synced (tests)."""
        with self._cond:
            return self._cond.wait_for(lambda: self.synced > count and not self._pending and not self.busy, timeout)

    def run(self, stop: threading.Event, listed: threading.Event | None = None) -> None:
        """Sync what is queued until stop; not before `listed` (the pod watch's first list is in): a pod the watch
        does not have is not synced (sync: nothing is detached on a guess), so the start-up pass would do nothing."""
        while listed is not None and not listed.wait(1.0):
            if stop.is_set():
                return
        while not stop.is_set():
            with self._cond:
                if not self._cond.wait_for(lambda: self._pending or stop.is_set(), 1.0) or stop.is_set():
                    continue
                _, (pod, containers) = self._pending.popitem()
                self.busy = True
            try:
                for container_id, ifname in self._containers(pod) if containers is None else containers:
                    self.sync(container_id, ifname)
            except Exception:
                log.exception("hot-plug of pod %s failed", pod)
            finally:
                with self._cond:
                    self.busy = False
                    self.synced += 1
                    self._cond.notify_all()

    def sync(self, container_id: str, ifname: str) -> Synced | None:
        """Bring one container's attachments to what its pod's annotation asks now (None: nothing to do, or not now:
        no record, a pod unknown to it, an ADD not finished, attachments to undo: the record is kept waiting, with
        the container's lock held, and `undone` syncs it then)."""
        if self.pods is None:
            return None
        with self.locks.hold(container_id):
            entry = self.records.load(container_id, ifname)
            pod = pod_of(entry) if entry is not None else None
            if entry is None or pod is None or not entry.attached:
                return None
            if entry.unfinished:  # undone first, as an ADD does (Adding.add); by the retry every few minutes, or a DEL
                log.info("hot-plug of pod %s waits: container %s has attachments to undo first", pod, container_id)
                with self._cond:
                    self._waiting[(container_id, ifname)] = pod
                return None
            notes = self.pods.latest(pod)
            if notes is None:  # not (or no longer) a pod the node's watch has: nothing is detached on a guess
                return None
            try:
                added, removed = diff_edit(self.networks(), self.pods.ask_rules, entry, pod, notes)
                if not added and not removed:
                    return None
                check_edit(self.planning, self.runner, self.addresses, self.adding.devices, entry, pod, added, removed)
                reserved = self.planning.reserve(
                    entry.container_id, [a for a, _ in added], {a.ifname: k for a, k in added}
                )
            except DelegateError as e:
                return self._refused(pod, Synced(error=e))
            try:
                return self._apply(entry, pod, added, removed)
            finally:
                self.planning.unreserve(reserved)

    def _apply(
        self, entry: Record, pod: PodRef, added: list[tuple[Attachment, Ask]], removed: list[Attachment]
    ) -> Synced:
        """What is added on free names attached, what is removed detached, what takes a removed one's name attached;
        reported. Everything that can refuse an edit without touching anything has passed (check)."""
        out = Synced()
        taken = {a.ifname for a in entry.attachments}
        free = [x for x in added if x[0].ifname not in taken]
        blocked = [x for x in added if x[0].ifname in taken]
        try:
            self._attach(entry, pod, free, out)
            if removed:
                with nsutil.recorded(entry, entry.netns, pin=True) as target:
                    errors = self.deleting.detach(entry, removed, target.path, why="hot-plug detach")
                out.removed += [a.ifname for a in removed if all(a is not b for b in entry.attachments)]
                if errors:
                    raise errors[-1]
            self._attach(entry, pod, blocked, out)
        except DelegateError as e:
            out.error = e
        self._report(pod, entry, out)
        return out

    def _attach(self, entry: Record, pod: PodRef, items: list[tuple[Attachment, Ask]], out: Synced) -> None:
        """Attach items already checked, prepared and reserved (sync)."""
        if not items:
            return
        new = [a for a, _ in items]
        self.adding.attach(entry, new, entry.netns, pod, {a.ifname: ask for a, ask in items})
        out.added += [a.ifname for a in new]

    def _report(self, pod: PodRef, entry: Record, out: Synced) -> None:
        assert self.pods is not None
        by_name = {a.ifname: a for a in entry.attachments}
        for name in out.added:
            a = by_name.get(name)
            if a is not None and a.result is not None:
                ips = " ".join(str(ip.get("address")) for ip in a.result.get("ips") or [])
                net = naming.display_name(a.network, a.conflist)
                self.pods.event(pod, "Normal", "AddedInterface", f"Add {name} [{ips}] from {net} (hot-plug)")
        for name in out.removed:
            self.pods.event(pod, "Normal", "RemovedInterface", f"Remove {name} (hot-plug)")
        if out.error is not None:
            self._refused(pod, out)
        self.pods.report(pod, network_status(entry.attached, entry.ifname))  # not what is left to undo
        log.info(
            "hot-plug of pod %s (container %s): added %s, removed %s%s",
            pod,
            entry.container_id,
            ",".join(out.added) or "-",
            ",".join(out.removed) or "-",
            f"; failed: {out.error.full_msg}" if out.error else "",
        )

    def _refused(self, pod: PodRef, out: Synced) -> Synced:
        assert self.pods is not None and out.error is not None
        e = out.error
        self.pods.event(pod, "Warning", "FailedHotplug", e.full_msg + (f" ({e.details})" if e.details else ""))
        if not out.added and not out.removed:
            log.warning("hot-plug of pod %s refused: %s", pod, e.full_msg)
        return out

    def _containers(self, pod: PodRef) -> list[tuple[str, str]]:
        """(container ID, ifname) of the records of the pod: every record read."""
        return [
            (e.container_id, e.ifname)
            for e in self.records.entries()
            if (p := pod_of(e)) is not None and _same_pod(pod, p)
        ]


def _same_pod(pod: PodRef, recorded: PodRef) -> bool:
    """Whether a record of `recorded` is one of `pod`'s: the same name, and not another pod's uid."""
    same_name = (recorded.namespace, recorded.name) == (pod.namespace, pod.name)
    return same_name and not (pod.uid and recorded.uid and pod.uid != recorded.uid)
