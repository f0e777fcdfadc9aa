"""The pods of this node, as the ADD path needs them (pods.netstatus.Pods). In: the node's pods are listed, then
watched (only each pod's uid and the annotations netcomp reads are kept), so an ADD reads from the API server only
a pod the watch has not delivered yet. Out: network-status patches and events wait in a bounded queue for one
writer thread, which writes at a quiet moment of the node's CNI requests (the server's wait_quiet)."""

from __future__ import annotations

import collections
import functools
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from netcomp.errors import HostError
from netcomp.kube.apierrors import ApiException
from netcomp.kube.following import Backoff, Follower
from netcomp.metrics import Metrics
from netcomp.pods import multus
from netcomp.pods.naming import PodRef
from netcomp.policy.resolve import NamedPorts, PodInfo
from netcomp.settings import KubeSettings

log = logging.getLogger("netcomp.kube")
QUEUE = 1024  # events waiting; beyond, dropped and counted (statuses: one per pod, never dropped)
MAX_MESSAGE = 1024  # an event's message, as the events API bounds it


@dataclass(frozen=True)
class _Pod:
    uid: str
    annotations: Mapping[str, str]
    status: str | None = None  # its network-status as written: the same again is not written
    labels: Mapping[str, str] = field(default_factory=dict)  # what policies select it by
    ports: NamedPorts = field(default_factory=dict)  # its containers' named ports, what a policy's port may name


def _keep(doc: Mapping[str, Any]) -> tuple[tuple[str, str], _Pod] | None:
    meta = doc.get("metadata") or {}
    ns, name = meta.get("namespace"), meta.get("name")
    if not isinstance(ns, str) or not isinstance(name, str):
        return None
    notes = meta.get("annotations") or {}
    kept = {k: v for k in multus.ANNOTATIONS if isinstance(v := notes.get(k), str)}
    status = notes.get(multus.NETWORK_STATUS)
    labels = meta.get("labels")
    labels = labels if isinstance(labels, dict) else {}
    return (ns, name), _Pod(
        str(meta.get("uid") or ""),
        kept,
        status if isinstance(status, str) else None,
        {k: v for k, v in labels.items() if isinstance(k, str) and isinstance(v, str)},
        _named_ports(doc.get("spec")),
    )


def _named_ports(spec: Any) -> NamedPorts:
    """A pod's containers' ports that have a name: name -> (protocol, number) pairs (lower-case protocol)."""
    out: dict[str, tuple[tuple[str, int], ...]] = {}
    containers = spec.get("containers") if isinstance(spec, dict) else None
    for c in containers if isinstance(containers, list) else []:
        for p in (c.get("ports") if isinstance(c, dict) else None) or []:
            if isinstance(p, dict) and isinstance(p.get("name"), str) and isinstance(p.get("containerPort"), int):
                pair = (str(p.get("protocol") or "TCP").lower(), p["containerPort"])
                out[p["name"]] = (*out.get(p["name"], ()), pair)
    return out


class PodWatch(Follower):
    """pods.netstatus.Pods for a node with a cluster. `core`: the client's CoreV1Api; `one_line` words a failed
    call (apierrors.one_line). A pod's statuses coalesce; events beyond QUEUE are dropped and counted; a patch
    carries the pod's uid as a precondition, so a pod made again under its name never gets the old one's status."""

    metrics: Metrics

    def __init__(
        self,
        core: Any,
        kube: KubeSettings,
        node: str,
        metrics: Metrics,
        one_line: Callable[[Exception], str],
        backoff: Backoff | None = None,
    ) -> None:
        super().__init__(f"the pods of node {node}", core, "list_pod_for_all_namespaces", explain=one_line,
                         backoff=backoff, timeout=max(kube.timeout, 30), loads=json.loads, metrics=metrics,
                         field_selector=f"spec.nodeName={node}")  # fmt: skip
        self.core, self.kube, self.node = core, kube, node
        self.opts: dict[str, Any] = {"_request_timeout": kube.timeout, "_preload_content": False}  # of one call
        self.ask_rules = multus.AskRules(
            kube.namespaceIsolation, frozenset(kube.globalNamespaces), kube.multusNamespace, frozenset(kube.podFields)
        )
        self._pods: dict[tuple[str, str], _Pod] = {}
        self._last_read: _Pod | None = None  # the pod _read read last
        self._lock = threading.Lock()
        self.changed = threading.Condition(self._lock)  # notified on every pod the watch delivers
        # Told each list ("LISTED", its pods) and change (its type, [the pod]) from the follower's thread, to note.
        self.listeners: list[Callable[[str, list[dict[str, Any]]], None]] = []
        # What waits to be written: the latest status of each pod, and events (at most QUEUE; more are dropped).
        self._pending = threading.Condition()
        self._statuses: dict[PodRef, list[dict[str, Any]]] = {}
        self._events: collections.deque[tuple[PodRef | dict[str, Any], str, str, str]] = collections.deque()
        self._writing = False
        # Waits until the node's CNI requests leave the CPU alone (server.Server.wait_quiet), set once serving.
        self.quiet: Callable[[], object] = lambda: True
        # Told of a pod whose network annotations changed (cluster.podsync.PodSync.changed), once serving.
        self.on_change: Callable[[PodRef], object] = lambda pod: None

    def start(self, stop: threading.Event) -> None:
        if self.kube.podNetworks or self.listeners:
            threading.Thread(target=self.follow, args=(stop,), name="kube-pods", daemon=True).start()
        if self.kube.networkStatus or self.kube.events:
            threading.Thread(target=self._write_loop, args=(stop,), name="kube-writes", daemon=True).start()

    def known(self) -> int:
        with self._lock:
            return len(self._pods)

    def has(self, namespace: str, name: str) -> bool:
        """Whether the watch has delivered the pod (call with `changed` held to wait for it)."""
        return (namespace, name) in self._pods

    # ------------------------------------------------------------------------------------------------ in

    def annotations(self, pod: PodRef) -> Mapping[str, str]:
        if not self.kube.podNetworks:
            return {}
        got = self.latest(pod)
        self.metrics.pod_lookups.labels("api" if got is None else "watch").inc()
        return got if got is not None else self._read(pod)

    def latest(self, pod: PodRef) -> Mapping[str, str] | None:
        got = self._known(pod)
        return got.annotations if got is not None else None

    def policy_info(self, pod: PodRef) -> PodInfo | None:
        """The pod's labels and named ports, as policies select it (read when the watch has not delivered it);
        None when the API server does not know it. HostError when it cannot answer."""
        got = self._known(pod)
        if got is None:
            self._read(pod)
            got = self._known(pod) or self._last_read
        if got is None:
            return None
        return PodInfo(pod.namespace, pod.name, got.labels, {}, got.ports)

    def _read(self, pod: PodRef) -> Mapping[str, str]:
        self._last_read = None
        try:
            doc = json.loads(self.core.read_namespaced_pod(pod.name, pod.namespace, **self.opts).data)
        except Exception as e:
            if isinstance(e, ApiException) and e.status == 404:
                log.warning("pod %s is not known to the API server: only the networks asked for otherwise", pod)
                return {}
            self.metrics.kube_errors.labels("read").inc()
            raise HostError(f"{e.status} {e.reason}" if isinstance(e, ApiException) else self.explain(e)) from None
        kept = _keep(doc)
        if kept is not None and pod.uid and kept[1].uid and kept[1].uid != pod.uid:
            log.warning("pod %s is another pod now (uid %s, not %s): only the networks asked for otherwise", pod,
                        kept[1].uid, pod.uid)  # fmt: skip
            return {}
        self._last_read = kept[1] if kept else None
        return kept[1].annotations if kept else {}

    def listed(self, items: list[Any]) -> None:
        pods = dict(kept for item in items if (kept := _keep(item)))
        for fn in self.listeners:
            fn("LISTED", items)
        with self._lock:
            old, self._pods = self._pods, pods
            self.changed.notify_all()
        for key, got in pods.items():  # what a watch that ended missed
            before = old.get(key)
            if before is not None and before.uid == got.uid and before.annotations != got.annotations:
                self.on_change(PodRef(key[0], key[1], got.uid))
        log.info("cluster: %d pods on node %s", len(pods), self.node)

    def seen(self, kind: str, obj: dict[str, Any]) -> None:
        kept = _keep(obj)
        if kept is None:
            return
        for fn in self.listeners:
            fn(kind, [obj])
        with self._lock:
            before = self._pods.pop(kept[0], None)
            if kind != "DELETED":
                self._pods[kept[0]] = kept[1]
            self.changed.notify_all()
        if kind == "MODIFIED" and before is not None and before.annotations != kept[1].annotations:
            self.on_change(PodRef(kept[0][0], kept[0][1], kept[1].uid))

    def meanwhile(self) -> str:
        return " (reading pods one by one meanwhile)"

    # ------------------------------------------------------------------------------------------------ out

    def report(self, pod: PodRef, status: list[dict[str, Any]]) -> None:
        """Queue the pod's network-status; a pod whose status is still waiting gets only the latest written."""
        if not self.kube.networkStatus:
            return
        with self._pending:
            self._statuses[pod] = status  # the latest wins; one write per pod however many reports wait
            self._pending.notify()

    def event(self, pod: PodRef, kind: str, reason: str, message: str) -> None:
        if self.kube.events:
            self.object_event(pod, kind, reason, message)

    def object_event(self, involved: PodRef | dict[str, Any], kind: str, reason: str, message: str) -> None:
        """An event on a pod or on any object (`involved`: apiVersion, kind, name, namespace for a namespaced one,
        uid), queued; a cluster-scoped object's goes to namespace default, where kubectl looks for it."""
        with self._pending:
            if len(self._events) >= QUEUE:  # events give way: statuses have a queue of their own
                self.metrics.kube_errors.labels("dropped").inc()
                log.warning("cluster: %d events waiting; dropped %s (%s)", QUEUE, reason, message[:80])
                return
            self._events.append((involved, kind, reason, message))
            self._pending.notify()

    def flush(self, timeout: float) -> bool:
        """Until every queued write was tried (tests, and a stopping daemon); False on timeout."""
        with self._pending:
            return self._pending.wait_for(lambda: not (self._statuses or self._events or self._writing), timeout)

    def _write_loop(self, stop: threading.Event) -> None:
        """Wait for something to write, then for a quiet moment (not while the node's ADDs and DELs need the
        CPU), then write everything pending: every status, then the events, before waiting for quiet again."""
        while True:
            with self._pending:
                if not self._pending.wait_for(lambda: self._statuses or self._events or stop.is_set(), 1.0):
                    continue
                if stop.is_set() and not (self._statuses or self._events):
                    return  # stopped with nothing left to write
                self._writing = True
            try:
                self.quiet()
                while True:
                    with self._pending:
                        if self._statuses:
                            pod = next(iter(self._statuses))
                            write = functools.partial(self._write_status, pod, self._statuses.pop(pod))
                        elif self._events:
                            write = functools.partial(self._write_event, *self._events.popleft())
                        else:
                            break
                    write()
            finally:
                with self._pending:
                    self._writing = False
                    self._pending.notify_all()

    def _known(self, pod: PodRef) -> _Pod | None:
        """The pod as the watch last delivered it, if it is the same pod (by uid, when the runtime said one)."""
        with self._lock:
            got = self._pods.get((pod.namespace, pod.name))
        return got if got is not None and (not pod.uid or got.uid == pod.uid) else None

    def _uid(self, pod: PodRef) -> str:
        if pod.uid:
            return pod.uid
        got = self._known(pod)
        return got.uid if got is not None else ""

    def _write_status(self, pod: PodRef, status: list[dict[str, Any]]) -> None:
        text = json.dumps(status, indent=2)
        known = self._known(pod)
        if known is not None and known.status == text:
            return  # the pod has it already (a sync that changed nothing, an ADD answered again)
        meta: dict[str, Any] = {"annotations": {multus.NETWORK_STATUS: text}}
        if uid := self._uid(pod):
            meta["uid"] = uid  # a precondition: never the status of a pod of the same name made since
        try:
            self.core.patch_namespaced_pod(pod.name, pod.namespace, {"metadata": meta}, **self.opts)
        except Exception as e:  # best-effort: the pod is attached; only its annotation is missing
            self.metrics.kube_errors.labels("patch").inc()
            log.warning("cannot write %s of pod %s: %s", multus.NETWORK_STATUS, pod, self._why(e))

    def _write_event(self, about: PodRef | dict[str, Any], kind: str, reason: str, message: str) -> None:
        if isinstance(about, dict):
            involved = about
        else:
            involved = {"apiVersion": "v1", "kind": "Pod", "namespace": about.namespace, "name": about.name}
            if uid := self._uid(about):  # as the watch knows it, when the runtime did not say
                involved["uid"] = uid
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        namespace = involved.get("namespace") or "default"
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{str(involved['name'])[:200]}.{time.time_ns():x}", "namespace": namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message[:MAX_MESSAGE],
            "type": kind,
            "source": {"component": "netcomp", "host": self.node},
            "reportingComponent": "netcomp",
            "reportingInstance": self.node,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self.core.create_namespaced_event(namespace, body, **self.opts)
        except Exception as e:
            self.metrics.kube_errors.labels("event").inc()
            log.warning("cannot record event %s on %s %s: %s", reason, involved.get("kind"), involved["name"],
                        self._why(e))  # fmt: skip

    def _why(self, e: Exception) -> str:
        """A failed write in a line: an error status as the server said it, anything else in an operator's words."""
        return f"{getattr(e, 'status', '')} {getattr(e, 'reason', '')}".strip() or self.explain(e)
