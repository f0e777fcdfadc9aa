"""This node's EndpointSlices for Services on secondary networks (what they hold: slices.py), kept current by a
level-triggered loop: whatever changed, the slices the node should have are worked out whole, compared with those
it has by their digests, and only the difference is written, at a quiet moment of the node's CNI requests. It
writes only slices named and labelled after this node; `gc()` removes those of a node that is gone."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

from netcomp import foreign
from netcomp.cluster import slices
from netcomp.cluster.podwatch import PodWatch
from netcomp.cluster.slices import GROUP, PLURAL, Attached, EndpointPod, Key, ServiceSpec
from netcomp.cni.spec import loads
from netcomp.errors import HostError
from netcomp.kube.apierrors import ApiException
from netcomp.kube.following import Backoff, Follower
from netcomp.kube.group import NODE
from netcomp.metrics import Metrics
from netcomp.records.files import Records
from netcomp.settings import KubeSettings

log = logging.getLogger("netcomp.kube")


class ServiceSlices:
    def __init__(
        self,
        core: Any,
        custom: Any,
        kube: KubeSettings,
        node: str,
        metrics: Metrics,
        pods: PodWatch,
        cache: Records,
        backoff: Callable[[], Backoff] = Backoff,
    ) -> None:
        """`backoff` makes each follower's and the writer's Backoff (a test's has its own clock)."""
        self.core, self.custom, self.kube, self.node = core, custom, kube, node
        self.metrics, self.pods, self.cache = metrics, pods, cache
        self.one_line = pods.explain
        self.opts: dict[str, Any] = {"_request_timeout": kube.timeout, "_preload_content": False}  # of one call
        self._cond = threading.Condition()
        self.services: dict[Key, ServiceSpec] = {}
        self.refused: dict[Key, str] = {}
        self._pods: dict[Key, EndpointPod] = {}
        self._records: dict[tuple[str, str], tuple[Attached, ...]] = {}
        self._pending: set[tuple[str, str]] = set()  # cache entries changed since they were read
        self._unread = False  # entries changed while no Service asked for slices: all are read again when one does
        self.actual: dict[Key, str] = {}  # this node's slices on the API server: their digests
        self.version: str | None = None  # discovery.k8s.io's version the server serves (slices.VERSIONS)
        self._listed: set[str] = set()  # what has been listed once: services, slices, pods, records
        self._dirty = True
        self._busy = False  # the loop is reconciling
        self.backoffs = {what: backoff() for what in ("Services", "slices", "write")}
        self.follows = {"Services": _Services(self), "slices": _Slices(self)}
        self.write_error: str | None = None  # why writing failed last (None: it works now)
        pods.listeners.append(self._pods_seen)
        cache.listeners.append(self._record_changed)

    def start(self, stop: threading.Event) -> None:
        for name, target in (("services", self.follows["Services"].follow),
                             ("slices", self.follows["slices"].follow), ("reconcile", self._loop)):  # fmt: skip
            threading.Thread(target=target, args=(stop,), name=f"kube-{name}", daemon=True).start()

    @property
    def synced(self) -> bool:
        return self._listed >= {"services", "slices", "pods", "records"}

    def status(self) -> dict[str, Any]:
        with self._cond:
            return {
                "synced": self.synced,
                "apiVersion": f"{GROUP}/{self.version}" if self.version else None,
                "services": len(self.services),
                "slices": len(self.actual),
                "refused": {f"{ns}/{name}": why for (ns, name), why in sorted(self.refused.items())},
                "lastError": self.last_error,
            }

    @property
    def last_error(self) -> str | None:
        """The first failure that holds now (following the Services, the slices, or writing), with how it backs off."""
        errors = [f.status_error() for f in self.follows.values()]
        errors.append(f"{self.write_error}{self.backoffs['write'].saying()}" if self.write_error else None)
        return next((why for why in errors if why), None)

    def wait_written(self, timeout: float) -> bool:
        """Until every change seen has been reconciled (tests)."""
        with self._cond:
            return self._cond.wait_for(lambda: self.synced and not self._dirty and not self._busy, timeout)

    # ------------------------------------------------------------------------------------------------ in

    def _touch(self) -> None:
        self._dirty = True
        self._cond.notify_all()

    def _pods_seen(self, kind: str, docs: list[dict[str, Any]]) -> None:
        infos = {(p.namespace, p.name): p for d in docs if (p := slices.read_pod(d)) is not None}
        with self._cond:
            if kind == "LISTED":
                self._pods = infos
                self._listed.add("pods")
                self._touch()
                return
            for key, p in infos.items():
                was = self._pods.pop(key, None)
                if kind != "DELETED":
                    self._pods[key] = p
                if was != self._pods.get(key):  # a change of what the slices hold, not any change of the pod
                    self._touch()

    def _record_changed(self, container_id: str, ifname: str) -> None:
        with self._cond:  # on the ADD's path: noted only, read by the loop
            if not self.services:  # no slice can hold it: nothing to wake for, nor to read until a Service comes
                self._unread = True
                return
            self._pending.add((container_id, ifname))
            self._touch()

    def _read_records(self, keys: set[tuple[str, str]] | None) -> None:
        """The attachments of the cache entries named (of every entry when None)."""
        got: dict[tuple[str, str], tuple[Attached, ...] | None] = {}
        if keys is None:
            entries = self.cache.scan()[0]  # an unreadable one is start-up recovery's to report
            got = {(e.container_id, e.ifname): slices.attached(e) for e in entries}
        for key in keys or ():
            try:
                entry = self.cache.load(*key)
            except HostError as e:
                log.warning("EndpointSlices: %s", e)
                continue
            got[key] = slices.attached(entry) if entry is not None else None
        with self._cond:
            if keys is None:
                self._records = {}
                self._listed.add("records")
            for key, atts in got.items():
                self._records.pop(key, None)
                if atts:
                    self._records[key] = atts

    def _discover(self) -> str:
        """The version of discovery.k8s.io the API server serves, the newest first."""
        for version in slices.VERSIONS:
            try:
                self.custom.get_api_resources(GROUP, version, **self.opts)
                return version
            except ApiException as e:
                if e.status != 404:
                    raise
        raise HostError(f"the API server serves no EndpointSlices ({GROUP} {' or '.join(slices.VERSIONS)})")

    # ------------------------------------------------------------------------------------------------ out

    def _loop(self, stop: threading.Event) -> None:
        """Reconcile whenever something changed and everything has been listed; after a failed write, again
        after a back-off (following.Backoff)."""
        self._read_records(None)
        backoff = self.backoffs["write"]
        while not stop.is_set():
            with self._cond:
                if not self._cond.wait_for(lambda: (self._dirty and self.synced) or stop.is_set(), 1.0):
                    continue
                if stop.is_set():
                    return
                self._busy = True
            failed = 1
            try:
                self.pods.quiet()
                with self._cond:
                    self._dirty = False
                    pending, self._pending = self._pending, set()
                    every, self._unread = self._unread and bool(self.services), self._unread and not self.services
                self._read_records(None if every else pending)
                failed = self._reconcile()
            except Exception:
                log.exception("EndpointSlices: reconciling failed")
            finally:
                with self._cond:
                    self._busy = False
                    if failed:
                        self._dirty = True
                    self._cond.notify_all()
            if failed:
                backoff.sleep(stop, backoff.failed())
            else:
                backoff.ok()

    def _reconcile(self) -> int:
        """Write what differs; the number of writes that failed."""
        with self._cond:
            services, pods, actual = list(self.services.values()), dict(self._pods), dict(self.actual)
            records = [a for atts in self._records.values() for a in atts]
            version = self.version
        assert version is not None
        want = slices.desired(services, pods, records, self.node, version)
        failed = 0
        for key, body in sorted(want.items()):
            if actual.get(key) != slices.digest_of(body):
                failed += not self._write(key, body, version, exists=key in actual)
        for key in sorted(actual.keys() - want.keys()):
            failed += not self._delete(key, version)
        if not failed:
            self.write_error = None
        return failed

    def _write(self, key: Key, body: dict[str, Any], version: str, *, exists: bool) -> bool:
        """Create the slice, or replace it (unconditionally: only this node writes it)."""
        ns, name = key
        args = (GROUP, version, ns, PLURAL)
        put = {  # by whether the slice is there
            True: lambda: self.custom.replace_namespaced_custom_object(*args, name, body, **self.opts),
            False: lambda: self.custom.create_namespaced_custom_object(*args, body, **self.opts),
        }
        try:
            try:
                put[exists]()
            except ApiException as e:
                if e.status not in (404, 409):
                    raise
                put[e.status == 409]()  # 404: gone meanwhile, made; 409: there already (the watch had not said)
        except Exception as e:
            return self._write_failed(f"cannot write EndpointSlice {ns}/{name}", e)
        with self._cond:
            self.actual[key] = slices.digest_of(body)
        log.info("EndpointSlice %s/%s: %d endpoints", ns, name, len(body["endpoints"]))
        return True

    def _delete(self, key: Key, version: str) -> bool:
        ns, name = key
        try:
            self.custom.delete_namespaced_custom_object(GROUP, version, ns, PLURAL, name, body={}, **self.opts)
        except Exception as e:
            if not (isinstance(e, ApiException) and e.status == 404):  # 404: gone already
                return self._write_failed(f"cannot delete EndpointSlice {ns}/{name}", e)
        with self._cond:
            self.actual.pop(key, None)
        log.info("EndpointSlice %s/%s deleted: nothing of this node for it", ns, name)
        return True

    def _write_failed(self, what: str, e: Exception) -> bool:
        self.metrics.kube_errors.labels("slice").inc()
        why = f"{what}: {_api_why(e) or self.one_line(e)}"
        if why != self.write_error:
            log.error("%s (trying again)", why)
        self.write_error = why
        return False

    # ------------------------------------------------------------------------------------------------ GC

    def gc(self) -> dict[str, Any]:
        """Other nodes' slices that are stale (slices.stale): deleted, each only as it was read (a resourceVersion
        precondition), so a node that has just written it again keeps it."""
        removed, kept = [], 0
        try:
            version = self.version or self._discover()
            resp: Any = self.custom.list_cluster_custom_object(
                GROUP, version, PLURAL, label_selector=f"{slices.MANAGED_BY}={slices.MANAGER}",
                _request_timeout=max(self.kube.timeout, 30), _preload_content=False,
            )  # fmt: skip
            by_node: dict[str, list[dict[str, Any]]] = {}
            for item in loads(resp.data).get("items") or []:
                node = str(((item.get("metadata") or {}).get("annotations") or {}).get(NODE) or "")
                if node and node != self.node:
                    by_node.setdefault(node, []).append(item)
            for node, docs in sorted(by_node.items()):
                exists, there = self._node_pods(node)
                for doc in docs:
                    if not slices.stale(doc, exists, there):
                        kept += 1
                        continue
                    meta = doc.get("metadata") or {}
                    body = {"preconditions": {"resourceVersion": meta.get("resourceVersion")}}
                    try:
                        self.custom.delete_namespaced_custom_object(
                            GROUP, version, meta.get("namespace"), PLURAL, meta.get("name"), body=body, **self.opts
                        )
                    except ApiException as e:
                        if e.status in (404, 409):  # gone, or written again since it was read
                            continue
                        raise
                    removed.append({"namespace": meta.get("namespace"), "name": meta.get("name"), "node": node})
                    why = "its Node is gone" if not exists else "none of its pods is there"
                    log.info("EndpointSlice %s/%s of node %s removed: %s", meta.get("namespace"),
                             meta.get("name"), node, why)  # fmt: skip
        except Exception as e:
            return {"removed": removed, "kept": kept, "error": _api_why(e) or self.one_line(e)}
        return {"removed": removed, "kept": kept}

    def _node_pods(self, node: str) -> tuple[bool, set[str]]:
        """Whether the Node exists, and the uids of the pods bound to it."""
        try:
            self.core.read_node(node, **self.opts)
        except ApiException as e:
            if e.status == 404:
                return False, set()
            raise
        resp: Any = self.core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={node}", _request_timeout=max(self.kube.timeout, 30), _preload_content=False
        )
        items = loads(resp.data).get("items") or []
        return True, {str((p.get("metadata") or {}).get("uid") or "") for p in items}


class _Followed(Follower):
    """What ServiceSlices (`ss`) follows: a failure is said as its slices', an error status in _api_why's words."""

    said = "EndpointSlices: %s%s"

    def __init__(self, ss: ServiceSlices, what: str, api: Any, method: str, **kwargs: Any) -> None:
        super().__init__(what, api, method, explain=ss.one_line, timeout=max(ss.kube.timeout, 30), loads=loads,
                         metrics=ss.metrics, **kwargs)  # fmt: skip
        self.ss = ss

    def api_why(self, e: Any) -> str:
        return _api_why(e)

    def meanwhile(self) -> str:
        return " (their slices stay as they are until it answers)"


class _Services(_Followed):
    """The Services (those of serviceLabelSelector, all when it is unset): what each asks, or why it is refused."""

    def __init__(self, ss: ServiceSlices) -> None:
        selector = ss.kube.serviceLabelSelector or None  # None: no query parameter
        super().__init__(ss, "the Services", ss.core, "list_service_for_all_namespaces",
                         backoff=ss.backoffs["Services"], label_selector=selector)  # fmt: skip

    def listed(self, items: list[Any]) -> None:
        ss = self.ss
        read = [(_key(item), self._read(item)) for item in items if isinstance(item, dict)]
        with ss._cond:
            ss.services, ss.refused = {}, {}
            for key, got in read:
                self._take(key, got)
            ss._listed.add("services")
            ss._touch()
        log.info("EndpointSlices: %d Services on secondary networks", len(ss.services))

    def seen(self, kind: str, obj: dict[str, Any]) -> None:
        ss, key = self.ss, _key(obj)
        got = self._read(obj) if kind != "DELETED" else None
        with ss._cond:
            before = (ss.services.get(key), ss.refused.get(key))
            self._take(key, got)
            if (ss.services.get(key), ss.refused.get(key)) != before:
                ss._touch()

    def _read(self, obj: dict[str, Any]) -> ServiceSpec | slices.Refusal | None:
        """What a Service asks; a refusal is said once per version of it, naming who wrote it (foreign.py). A
        Service is a tenant's: nothing in it stops the watch of the others."""
        try:
            got = slices.read_service(obj, self.ss.kube.danmGroup)
        except Exception as e:  # a shape read_service did not foresee: that Service's loss only
            log.debug("Service %s/%s", *_key(obj), exc_info=True)
            got = slices.Refusal(*_key(obj), f"cannot be read ({type(e).__name__})")
        if isinstance(got, slices.Refusal):
            foreign.ignore("Service", "/".join(_key(obj)), f"gets no EndpointSlices: {got.why}", obj)
        return got

    def _take(self, key: Key, got: ServiceSpec | slices.Refusal | None) -> None:
        self.ss.services.pop(key, None)
        self.ss.refused.pop(key, None)
        if isinstance(got, ServiceSpec):
            self.ss.services[key] = got
        elif isinstance(got, slices.Refusal):
            self.ss.refused[key] = got.why


class _Slices(_Followed):
    """This node's EndpointSlices, in the version of discovery.k8s.io the server serves: their digests."""

    def __init__(self, ss: ServiceSlices) -> None:
        super().__init__(ss, "this node's EndpointSlices", ss.custom, "list_cluster_custom_object",
                         backoff=ss.backoffs["slices"], label_selector=slices.own_selector(ss.node))  # fmt: skip

    def _relist(self) -> str:
        self.args = (GROUP, self.ss._discover(), PLURAL)
        return super()._relist()

    def listed(self, items: list[Any]) -> None:
        ss = self.ss
        with ss._cond:
            ss.version = self.args[1]
            ss.actual = {_key(item): slices.digest_of(item) for item in items}
            ss._listed.add("slices")
            ss._touch()

    def seen(self, kind: str, obj: dict[str, Any]) -> None:
        ss, key = self.ss, _key(obj)
        with ss._cond:
            before = ss.actual.pop(key, None)
            if kind != "DELETED":
                ss.actual[key] = slices.digest_of(obj)
            if ss.actual.get(key) != before:  # not our own write coming back: someone else's change
                ss._touch()


def _key(doc: dict[str, Any]) -> Key:
    meta = doc.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _api_why(e: Any) -> str:
    """An API error in a line (the server's message when it says one); what to do about a 403."""
    status, reason = getattr(e, "status", None), getattr(e, "reason", None)
    if status is None:
        return ""
    text = f"{status} {reason}"
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        message = loads(getattr(e, "body", b"") or b"").get("message")
        if message and message not in str(reason):  # netcomp's own client has it in the reason already
            text += f": {message}"
    if status == 403:
        text += (
            " (the node's ClusterRole must allow list and watch on services and list, watch, create, update and "
            "delete on endpointslices: packaging/kubernetes/rbac.yaml; or set kubernetes.services: false)"
        )
    return text
