"""The pods of this node, as the ADD path needs them (delegate.podstatus.Pods), with the cluster's API server.

- **In: a watch, not a GET per ADD.** The pods bound to this node (fieldSelector `spec.nodeName=<nodeName>`) are
  listed, then watched from the list's resourceVersion; of each, only its uid and the annotations netcomp reads
  are kept. An ADD for a pod the watch has (with the uid kubelet gives, when it gives one) reads nothing from the
  API server; a pod the watch has not delivered yet (an ADD that raced the binding, a pod with no node, the
  watch away) is read with one GET, as raw JSON: the client's model objects would cost milliseconds.
- **Out: a queue, never the ADD's time.** network-status patches and events (AddedInterface per interface, a
  warning when an ADD fails) go to a bounded queue that one writer thread empties when no CNI request has been
  served for QUIET seconds (at most QUIET_LIMIT later: a write costs the API client's CPU, and on a small node the
  API server's, which the next DEL would otherwise wait for); a full queue drops and counts. A patch carries the
  pod's uid as a precondition, so a pod deleted and made again under its name is never given the old one's
  status."""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from netcomp.daemon.kubewatch import keep_following
from netcomp.daemon.metrics import Metrics
from netcomp.delegate import podnets
from netcomp.delegate.select import PodRef
from netcomp.errors import HostError
from netcomp.settings import KubeSettings

log = logging.getLogger("netcomp.kube")
WATCH_SECONDS = 300  # a watch is renewed this often (from the last resourceVersion seen)
QUEUE = 1024  # writes waiting; beyond, dropped and counted
QUIET = 0.05  # a write waits until no CNI request has been served for this long...
QUIET_LIMIT = 2.0  # ...but never longer than this
MAX_MESSAGE = 1024  # an event's message, as the events API bounds it


@dataclass(frozen=True)
class _Pod:
    uid: str
    annotations: Mapping[str, str]


def _keep(doc: Mapping[str, Any]) -> tuple[tuple[str, str], _Pod] | None:
    meta = doc.get("metadata") or {}
    ns, name = meta.get("namespace"), meta.get("name")
    if not isinstance(ns, str) or not isinstance(name, str):
        return None
    notes = meta.get("annotations") or {}
    kept = {k: v for k in podnets.ANNOTATIONS if isinstance(v := notes.get(k), str)}
    return (ns, name), _Pod(str(meta.get("uid") or ""), kept)


class PodWatch:
    """delegate.podstatus.Pods for a node with a cluster. `core`: the client's CoreV1Api; `explain` words a failed
    call (kube.explain)."""

    def __init__(
        self, core: Any, kube: KubeSettings, node: str, metrics: Metrics, explain: Callable[[Exception], str]
    ) -> None:
        self.core = core
        self.kube = kube
        self.node = node
        self.metrics = metrics
        self.explain = explain
        self.policy = podnets.Policy(kube.namespaceIsolation, frozenset(kube.globalNamespaces), kube.multusNamespace)
        self._pods: dict[tuple[str, str], _Pod] = {}
        self._lock = threading.Lock()
        self.changed = threading.Condition(self._lock)  # notified on every pod the watch delivers
        self.synced = threading.Event()
        self.last_error: str | None = None
        self._writes: queue.Queue[tuple[str, PodRef, Any] | None] = queue.Queue(QUEUE)
        # Waits until the node's CNI requests leave the CPU alone (server.Server.wait_quiet), set once serving.
        self.quiet: Callable[[float, float], object] = lambda settle, limit: True

    def start(self, stop: threading.Event) -> None:
        if self.kube.podNetworks:
            threading.Thread(target=self._follow, args=(stop,), name="kube-pods", daemon=True).start()
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
        with self._lock:
            got = self._pods.get((pod.namespace, pod.name))
        if got is not None and (not pod.uid or got.uid == pod.uid):
            self.metrics.pod_lookups.labels("watch").inc()
            return got.annotations
        self.metrics.pod_lookups.labels("api").inc()
        return self._read(pod)

    def _read(self, pod: PodRef) -> Mapping[str, str]:
        from kubernetes.client.exceptions import ApiException

        try:
            resp: Any = self.core.read_namespaced_pod(
                pod.name, pod.namespace, _request_timeout=self.kube.timeout, _preload_content=False
            )
            doc = json.loads(resp.data)
        except ApiException as e:
            if e.status == 404:
                log.warning("pod %s is not known to the API server: only the networks asked for otherwise", pod)
                return {}
            self.metrics.kube_errors.labels("read").inc()
            raise HostError(f"{e.status} {e.reason}") from None
        except Exception as e:
            self.metrics.kube_errors.labels("read").inc()
            raise HostError(self.explain(e)) from None
        kept = _keep(doc)
        return kept[1].annotations if kept else {}

    def _follow(self, stop: threading.Event) -> None:
        """List the node's pods, then watch them (kubewatch.keep_following); what is known stays meanwhile."""
        keep_following(stop, self._relist, self._watch, self._failed, self.explain)

    def _selector(self) -> str:
        return f"spec.nodeName={self.node}"

    def _relist(self) -> str:
        resp: Any = self.core.list_pod_for_all_namespaces(
            field_selector=self._selector(), _request_timeout=max(self.kube.timeout, 30), _preload_content=False
        )
        doc = json.loads(resp.data)
        pods = dict(kept for item in doc.get("items") or [] if (kept := _keep(item)))
        with self._lock:
            self._pods = pods
            self.changed.notify_all()
        self.last_error = None
        self.synced.set()
        log.info("cluster: %d pods on node %s", len(pods), self.node)
        return str((doc.get("metadata") or {}).get("resourceVersion") or "")

    def _watch(self, rv: str, stop: threading.Event) -> str:
        from kubernetes import watch

        w = watch.Watch()
        try:
            for event in w.stream(
                self.core.list_pod_for_all_namespaces,
                field_selector=self._selector(),
                resource_version=rv,
                allow_watch_bookmarks=True,
                timeout_seconds=WATCH_SECONDS,
                _request_timeout=WATCH_SECONDS + 10,
                deserialize=False,
            ):
                if stop.is_set():
                    break
                obj = event.get("object") or {}
                rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                kind = event.get("type")
                kept = _keep(obj) if kind in ("ADDED", "MODIFIED", "DELETED") else None
                if kept is None:
                    continue
                with self._lock:
                    if kind == "DELETED":
                        self._pods.pop(kept[0], None)
                    else:
                        self._pods[kept[0]] = kept[1]
                    self.changed.notify_all()
        finally:
            w.stop()
        return rv

    def _failed(self, why: str) -> None:
        self.metrics.kube_errors.labels("watch").inc()
        if why != self.last_error:
            log.error(
                "cluster: cannot follow the pods of node %s: %s (reading pods one by one meanwhile)", self.node, why
            )
        self.last_error = why

    # ------------------------------------------------------------------------------------------------ out

    def report(self, pod: PodRef, status: list[dict[str, Any]]) -> None:
        if self.kube.networkStatus:
            self._put(("status", pod, status))

    def event(self, pod: PodRef, kind: str, reason: str, message: str) -> None:
        if self.kube.events:
            self._put(("event", pod, (kind, reason, message)))

    def _put(self, item: tuple[str, PodRef, Any]) -> None:
        try:
            self._writes.put_nowait(item)
        except queue.Full:
            self.metrics.kube_errors.labels("dropped").inc()
            log.warning("cluster: %d writes waiting; dropped the %s of pod %s", QUEUE, item[0], item[1])

    def flush(self, timeout: float) -> bool:
        """Until every queued write was tried (tests, and a stopping daemon); False on timeout."""
        done = self._writes.all_tasks_done
        with done:
            return done.wait_for(lambda: not self._writes.unfinished_tasks, timeout)

    def _write_loop(self, stop: threading.Event) -> None:
        while True:  # until stopped with nothing left to write
            try:
                item = self._writes.get(timeout=1.0)
            except queue.Empty:
                if stop.is_set():
                    return
                continue
            try:
                if item is not None:
                    self.quiet(QUIET, QUIET_LIMIT)  # not while the node's ADDs and DELs need the CPU
                    kind, pod, what = item
                    if kind == "status":
                        self._write_status(pod, what)
                    elif kind == "event":
                        self._write_event(pod, *what)
                    else:
                        self._create_event(*what)
            finally:
                self._writes.task_done()

    def _uid(self, pod: PodRef) -> str:
        if pod.uid:
            return pod.uid
        with self._lock:
            got = self._pods.get((pod.namespace, pod.name))
        return got.uid if got is not None else ""

    def _write_status(self, pod: PodRef, status: list[dict[str, Any]]) -> None:
        meta: dict[str, Any] = {"annotations": {podnets.NETWORK_STATUS: json.dumps(status, indent=2)}}
        uid = self._uid(pod)
        if uid:
            meta["uid"] = uid  # a precondition: never the status of a pod of the same name made since
        try:
            self.core.patch_namespaced_pod(
                pod.name, pod.namespace, {"metadata": meta}, _request_timeout=self.kube.timeout, _preload_content=False
            )
        except Exception as e:  # best-effort: the pod is attached; only its annotation is missing
            self.metrics.kube_errors.labels("patch").inc()
            why = f"{getattr(e, 'status', '')} {getattr(e, 'reason', '')}".strip() or self.explain(e)
            log.warning("cannot write %s of pod %s: %s", podnets.NETWORK_STATUS, pod, why)

    def _write_event(self, pod: PodRef, kind: str, reason: str, message: str) -> None:
        involved: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "namespace": pod.namespace, "name": pod.name}
        uid = self._uid(pod)
        if uid:
            involved["uid"] = uid
        self._create_event(involved, kind, reason, message)

    def object_event(self, involved: dict[str, Any], kind: str, reason: str, message: str) -> None:
        """An event on any object (`involved`: apiVersion, kind, name, namespace for a namespaced one, uid),
        queued like a pod's; a cluster-scoped object's goes to namespace default, where kubectl looks for it."""
        self._put(("object-event", PodRef(involved.get("namespace") or "default", str(involved["name"])),
                   (involved, kind, reason, message)))  # fmt: skip

    def _create_event(self, involved: dict[str, Any], kind: str, reason: str, message: str) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        namespace = involved.get("namespace") or "default"
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{involved['name']}.{time.time_ns():x}", "namespace": namespace},
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
            self.core.create_namespaced_event(
                namespace, body, _request_timeout=self.kube.timeout, _preload_content=False
            )
        except Exception as e:
            self.metrics.kube_errors.labels("event").inc()
            why = f"{getattr(e, 'status', '')} {getattr(e, 'reason', '')}".strip() or self.explain(e)
            log.warning("cannot record event %s on %s %s: %s", reason, involved.get("kind"), involved["name"], why)
