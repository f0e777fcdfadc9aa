"""This module follows the cluster as MultiNetworkPolicy enforcement reads it (policy.resolve.View): the policies
(k8s.cni.cncf.io multi-networkpolicies, v1beta2 or v1beta1, whichever the API server serves), the namespaces' labels,
and every pod's labels and addresses by network (its network-status), as metadata only (PartialObjectMetadata: no
spec, no status). Each kind is listed a small page at a time: what a page parses to is garbage before the next is
read, and what is kept of it is made among little garbage, so it pins few of the allocator's arenas. Where the node
says which networks it serves (`served`), a pod is kept only with its addresses on those networks, and not at all
without one: a peer counts through its addresses on the network of a node pod's interface, and nothing else of other
pods is needed. When the node comes to serve another network (`serve`), the pods are listed again. The pods and
namespaces are followed only while a policy exists: a cluster with none pays nothing. Where the CRD is not installed,
nothing is enforced and that is said once; the API is looked for again every few minutes. Each change that can change
a rule tells `on_change`, with the namespaces whose pods' rules it can change (None: any)."""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from ipaddress import ip_address
from typing import Any

import orjson

from netcomp import foreign, libc
from netcomp.cni.spec import loads_foreign
from netcomp.kube.apiclient import METADATA_LIST
from netcomp.kube.apierrors import ApiException
from netcomp.kube.following import Backoff, Follower, pages
from netcomp.metrics import Metrics
from netcomp.pods import multus
from netcomp.policy.mnp import GROUP, PLURAL, VERSIONS, Policy, PolicyError, parse
from netcomp.policy.resolve import Address, PodInfo, touched

log = logging.getLogger("netcomp.kube")
LOOK_AGAIN = 300.0  # seconds between looks for the CRD where it is not installed
NO_ADDRESSES: Mapping[str, tuple[Address, ...]] = {}  # shared by every pod without a network-status
MAX_ADDRESSES = 64  # a pod's network-status gives it on one network, each counted once
MAX_LABELSETS = 1 << 16  # distinct label sets shared among the pods kept, forgotten all at once past this
PAGE = 100  # objects per page of a list: what one page parses to is garbage that kept objects are made among
KIND = "MultiNetworkPolicy"  # as foreign.ignore counts a policy's refusals


class _Kind(Follower):
    """One kind followed, listed a page at a time: the text and objects of one page are garbage before the next
    is read, and what is kept of them is what `read` takes into `found`, handed over whole by `put`."""

    def __init__(self, owner: PolicyWatch, what: str, api: Any, method: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(what, api, method, *args, explain=owner.explain, backoff=owner.backoff(),
                         timeout=owner.timeout, loads=orjson.loads, metrics=owner.metrics, **kwargs)  # fmt: skip
        self.owner = owner
        self.listing = threading.Lock()  # the follower's list and one `serve` asks for are not made at once

    def meanwhile(self) -> str:
        return (f" (the rules in force in the pods stay as last known; a change to {self.what} made meanwhile is not "
                "known until it answers)")  # fmt: skip

    def _relist(self) -> str:
        with self.listing:
            self.begin()
            found: dict[Any, Any] = {}
            rv, call = "", getattr(self.api, self.method)
            listing = pages(lambda *a, **kw: orjson.loads(call(*a, _preload_content=False, **kw).data), *self.args,
                            timeout=self.timeout, limit=PAGE, **self.kwargs)  # fmt: skip
            for items, page_rv in listing:
                self.read(items, found)
                rv = page_rv
                del items  # garbage before the next page is read
            self.put(found)
            libc.malloc_trim()  # the pages parsed are garbage now: given back to the system
        self.last_error = None
        self.synced.set()
        return rv

    def listed(self, items: list[Any]) -> None:  # a list of one page
        found: dict[Any, Any] = {}
        self.read(items, found)
        self.put(found)

    def begin(self) -> None:
        """A list begins."""

    def read(self, items: list[Any], found: dict[Any, Any]) -> None:
        raise NotImplementedError

    def put(self, found: dict[Any, Any]) -> None:
        raise NotImplementedError


class _Policies(_Kind):
    def read(self, items: list[Any], found: dict[Any, Any]) -> None:
        found.update(((p.namespace, p.name), p) for item in items if (p := self.owner.read_policy(item)))

    def put(self, found: dict[Any, Any]) -> None:
        self.owner.put_policies(found)

    def seen(self, kind: str, obj: dict[str, Any]) -> None:
        key = _key(obj)
        if key:
            self.owner.put_policy(key, None if kind == "DELETED" else self.owner.read_policy(obj))


class _Namespaces(_Kind):
    def read(self, items: list[Any], found: dict[Any, Any]) -> None:
        found.update((m["name"], m.get("labels") or {}) for item in items if (m := _read("Namespace", item)))

    def put(self, found: dict[Any, Any]) -> None:
        self.owner.put_namespaces(found)

    def seen(self, kind: str, obj: dict[str, Any]) -> None:
        meta, name = _read("Namespace", obj), (_meta(obj) or {}).get("name")
        if isinstance(name, str):  # one that cannot be read now is known no more
            self.owner.put_namespace(name, None if kind == "DELETED" or meta is None else meta.get("labels") or {})


class _Pods(_Kind):
    def begin(self) -> None:
        self.owner.begin_list()

    def read(self, items: list[Any], found: dict[Any, Any]) -> None:
        for item in items:
            if (got := self.owner.read_pod(item)) and self.owner.keeps(got):
                found.setdefault(got.namespace, {})[got.name] = got

    def put(self, found: dict[Any, Any]) -> None:
        self.owner.put_pods(found)

    def seen(self, kind: str, obj: dict[str, Any]) -> None:
        got = self.owner.read_pod(obj) if kind != "DELETED" else None
        if got is None and (key := _key(obj)):  # gone, or cannot be read now: known no more
            got, kind = PodInfo(*key, {}, NO_ADDRESSES), "DELETED"
        if got is not None:
            self.owner.put_pod(got, deleted=kind == "DELETED" or not self.owner.keeps(got))


class PolicyWatch:
    """policy.resolve.View over what the API server holds; `on_change` is told of every change that can change
    a rule (set by the enforcer)."""

    def __init__(
        self, core: Any, custom: Any, timeout: float, metrics: Metrics, explain: Callable[[Exception], str],
        backoff: Callable[[], Backoff],
    ) -> None:  # fmt: skip
        self.core, self.custom, self.timeout, self.metrics = core, custom, timeout, metrics
        self.explain, self.backoff = explain, backoff
        self.on_change: Callable[[set[str] | None], object] = lambda spaces: None
        self.served: Callable[[], Iterable[str]] | None = None  # the node's networks as network-status names them
        self._serving: frozenset[str] | None = None  # the networks whose addresses are kept; None: every one
        self._asked: frozenset[str] = frozenset()  # the networks the node's pods are on
        self._lock = threading.Lock()
        self._policies: dict[tuple[str, str], Policy] = {}
        self._by_ns: dict[str, list[Policy]] = {}
        self._spaces: dict[str, Mapping[str, str]] = {}
        self._in_ns: dict[str, dict[str, PodInfo]] = {}  # the pods by namespace, then name
        self._labelsets: dict[tuple[tuple[str, str], ...], Mapping[str, str]] = {}  # shared: replicas' are alike
        self.version: str | None = None  # the API version followed; None: no CRD (yet)
        self.known = threading.Event()  # whether policies exist is known: listed, or the CRD is not served
        self.followers: list[Follower] = []
        self._others_started = False
        self._stop: threading.Event | None = None

    # ------------------------------------------------------------------------------------------------ following

    def start(self, stop: threading.Event) -> None:
        self._stop = stop
        threading.Thread(target=self._find_api, args=(stop,), name="kube-policies", daemon=True).start()

    def _find_api(self, stop: threading.Event) -> None:
        """Follow the policies once the API server serves them; look again every LOOK_AGAIN seconds until then."""
        said, backoff = False, self.backoff()
        while not stop.is_set():
            away: Exception | None = None
            for version in VERSIONS:
                try:
                    doc = self.custom.get_api_resources(GROUP, version, _request_timeout=self.timeout)
                except ApiException as e:
                    if e.status != 404:
                        away = e
                        break
                    continue
                except Exception as e:  # away: asked again soon, as every follower backs off
                    away = e
                    break
                if any(r.get("name") == PLURAL for r in (doc or {}).get("resources") or []):
                    self.version = version
                    f = _Policies(self, "MultiNetworkPolicies", self.custom, "list_cluster_custom_object", GROUP,
                                  version, PLURAL)  # fmt: skip
                    self.followers.append(f)
                    log.info("cluster: following MultiNetworkPolicies (%s/%s)", GROUP, version)
                    f.follow(stop)
                    return
            else:
                self.known.set()  # not served: there is none
            if away is not None:
                log.debug("cluster: cannot tell whether MultiNetworkPolicies are served: %s", self.explain(away))
                backoff.sleep(stop, backoff.failed())
                continue
            if not said:
                log.info("cluster: the API server serves no MultiNetworkPolicy (%s): none is enforced", GROUP)
                said = True
            stop.wait(LOOK_AGAIN)

    def _start_others(self) -> None:
        """The namespaces and the pods, from the first policy on."""
        if self._others_started or self._stop is None:
            return
        self._others_started = True
        pods = _Pods(self, "pods (their metadata)", self.core, "list_pod_for_all_namespaces", _accept=METADATA_LIST)
        for f in (_Namespaces(self, "namespaces", self.core, "list_namespace"), pods):
            self.followers.append(f)
            threading.Thread(target=f.follow, args=(self._stop,), name="kube-policy-peers", daemon=True).start()

    def status_error(self) -> str | None:
        return next((e for f in self.followers if (e := f.status_error())), None)

    # ------------------------------------------------------------------------------------------------ in

    def read_policy(self, obj: Any) -> Policy | None:
        """The policy, or None when it selects nothing; what is refused of it is said once (foreign.ignore)."""
        try:
            got = parse(obj)
        except PolicyError as e:
            _ignore(KIND, "/".join(_key(obj) or ("?",)), f"it selects nothing: {e}", obj)
            return None
        if got.problems:
            _ignore(KIND, got.ref, "; ".join(got.problems), obj)
        return got

    def read_pod(self, obj: Any) -> PodInfo | None:
        meta = _read("Pod", obj)
        if meta is None:
            return None
        labels: Mapping[str, str] = meta.get("labels") or {}
        addresses, why = _addresses((meta.get("annotations") or {}).get(multus.NETWORK_STATUS), self._serving)
        if why:
            _ignore("Pod", f"{meta['namespace']}/{meta['name']}", why, obj)
        if addresses or self._serving is None:  # kept: its labels shared with the pods that have the same
            if len(self._labelsets) >= MAX_LABELSETS:  # forgotten all at once: pods made and gone leave theirs
                self._labelsets.clear()
            labels = self._labelsets.setdefault(tuple(sorted(labels.items())), labels)
        return PodInfo(sys.intern(meta["namespace"]), meta["name"], labels, addresses or NO_ADDRESSES)

    def keeps(self, pod: PodInfo) -> bool:
        """Whether the pod is kept: it has an address on a network the node serves, or the node does not say."""
        return self._serving is None or bool(pod.addresses)

    def begin_list(self) -> None:
        if self.served is not None:
            self._serving = frozenset(self.served()) | self._asked | (self._serving or frozenset())

    def serve(self, networks: Iterable[str]) -> None:
        """Keep the addresses on `networks` (network-status names) from now on: the pods are listed again when
        one is new (a network the node came to serve since the last list). Where the API server is away, that is
        said, and the list is made again by the follower's next one."""
        if self.served is None:
            return
        self._asked |= frozenset(networks)
        if self._serving is None or self._serving.issuperset(networks):
            return  # the first list is still to come, or nothing new
        more = set(networks) - self._serving
        self._serving = self._serving | more
        pods = next((f for f in self.followers if isinstance(f, _Pods)), None)
        if pods is None:
            return
        log.info("cluster: the pods are listed again for their addresses on %s", ", ".join(sorted(more)))
        try:
            pods._relist()
        except Exception as e:  # away: what it cannot list is said, and the follower lists again
            log.warning("cluster: cannot list the pods for their addresses on %s: %s", ", ".join(sorted(more)),
                        self.explain(e))  # fmt: skip

    def put_policies(self, policies: dict[tuple[str, str], Policy]) -> None:
        with self._lock:
            self._policies = policies
            self._reindex()
        self.known.set()
        self._changed(None)

    def put_policy(self, key: tuple[str, str], policy: Policy | None) -> None:
        with self._lock:
            if policy is None:
                self._policies.pop(key, None)
            else:
                self._policies[key] = policy
            self._reindex()
        self._changed({key[0]})  # a policy selects pods of its own namespace only

    def _reindex(self) -> None:
        by_ns: dict[str, list[Policy]] = {}
        for (ns, _), p in sorted(self._policies.items()):
            by_ns.setdefault(ns, []).append(p)
        self._by_ns = by_ns

    def _changed(self, spaces: set[str] | None) -> None:
        if self._policies:
            self._start_others()
        self.on_change(spaces)

    def put_namespaces(self, spaces: dict[str, Mapping[str, str]]) -> None:
        with self._lock:
            self._spaces = spaces
        self._changed(None)

    def put_namespace(self, name: str, labels: Mapping[str, str] | None) -> None:
        with self._lock:
            before = self._spaces.get(name)
            if before == labels:
                return
            if labels is None:
                self._spaces.pop(name, None)
            else:
                self._spaces[name] = labels
            spaces = touched(self._policies.values(), name, [before or {}, labels or {}])
        self._changed(spaces)

    def put_pods(self, in_ns: dict[str, dict[str, PodInfo]]) -> None:
        """Every pod, by namespace and name."""
        with self._lock:
            self._in_ns = in_ns
        self._changed(None)

    def put_pod(self, pod: PodInfo, deleted: bool) -> None:
        with self._lock:
            before = self._in_ns.get(pod.namespace, {}).get(pod.name)
            if deleted:
                self._in_ns.get(pod.namespace, {}).pop(pod.name, None)
            elif before is not None and before.labels == pod.labels and before.addresses == pod.addresses:
                return  # nothing a rule is made of
            else:
                self._in_ns.setdefault(pod.namespace, {})[pod.name] = pod
            spaces = touched(self._policies.values(), pod.namespace, [self._spaces.get(pod.namespace) or {}])
        self._changed({pod.namespace, *spaces})  # the pod's own rules, and those it is a peer in

    # ------------------------------------------------------------------------------------------------ View

    def policies(self, namespace: str) -> Iterable[Policy]:
        with self._lock:
            return list(self._by_ns.get(namespace, ()))

    def every_policy(self) -> Iterable[Policy]:
        with self._lock:
            return list(self._policies.values())

    def namespace_labels(self, namespace: str) -> Mapping[str, str] | None:
        with self._lock:
            return self._spaces.get(namespace)

    def namespaces(self) -> Iterable[str]:
        with self._lock:
            return sorted(self._spaces)

    def pods(self, namespace: str) -> Iterable[PodInfo]:
        with self._lock:
            return list(self._in_ns.get(namespace, {}).values())

    def pod(self, namespace: str, name: str) -> PodInfo | None:
        with self._lock:
            return self._in_ns.get(namespace, {}).get(name)

    def active(self) -> bool:
        """Whether any policy is known (a policy that selects nothing is not one)."""
        return bool(self._policies)

    def counts(self) -> dict[str, int]:
        with self._lock:
            return {
                "policies": len(self._policies),
                "namespaces": len(self._spaces),
                "pods": sum(map(len, self._in_ns.values())),
            }


def _meta(obj: Any) -> dict[str, Any] | None:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    return meta if isinstance(meta, dict) else None


def _ignore(kind: str, name: str, why: str, obj: Any) -> None:
    """foreign.ignore, once per object (its uid) and reason: its writer's edits of anything else, and its
    deletion, say nothing again."""
    uid = (_meta(obj) or {}).get("uid")
    foreign.ignore(kind, name, why, obj if isinstance(obj, dict) else None, uid[:64] if isinstance(uid, str) else "")


def _read(kind: str, obj: Any) -> dict[str, Any] | None:
    """A Namespace's or Pod's metadata, when it has a name (and a Pod a namespace), its labels are a map of
    strings and its annotations a map; otherwise None, said once (foreign.ignore): a part of one is never taken."""
    meta = _meta(obj) or {}
    key = (meta.get("namespace") if kind == "Pod" else "", meta.get("name"))
    labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
    named = all(isinstance(k, str) for k in key)
    if not named:
        why = "it has no namespace and name" if kind == "Pod" else "it has no name"
    elif not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        why = "its labels are not a map of strings"
    elif not isinstance(notes, dict):
        why = "its annotations are not a map"
    else:
        return meta
    _ignore(kind, "/".join(k for k in key if k) if named else "?", why, obj)
    return None


def _key(obj: Any) -> tuple[str, str] | None:
    meta = _meta(obj)
    if not meta or not isinstance(meta.get("namespace"), str) or not isinstance(meta.get("name"), str):
        return None
    return meta["namespace"], meta["name"]


def _addresses(status: Any, networks: frozenset[str] | None) -> tuple[dict[str, tuple[Address, ...]], str]:
    """A network-status annotation's addresses by network, on `networks` only (None: every one), each once and at
    most MAX_ADDRESSES a network; and what of it was left out, or "" (a tenant's text: the first problem)."""
    if status is None:
        return {}, ""
    try:
        if not isinstance(status, str) or len(status) > 1 << 16:
            raise ValueError("not a string of at most 64 KiB")
        entries = loads_foreign(status)  # nested too deep is refused too
        if not isinstance(entries, list):
            raise ValueError("not a list")
    except ValueError as e:
        return {}, f"its network-status gives it no address: {e}"
    out: dict[str, dict[Address, None]] = {}
    why = ""
    for i, entry in enumerate(entries):
        ips = entry.get("ips") or [] if isinstance(entry, dict) else None
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not isinstance(ips, list):
            why = why or f"network-status[{i}] is left out: not a network's name with a list of addresses"
            continue
        if networks is not None and entry["name"] not in networks:
            continue
        got = out.setdefault(sys.intern(entry["name"]), {})  # one copy of a network's name, not one a pod
        for text in ips:
            try:
                address = ip_address(text if isinstance(text, str) else "")
            except ValueError:
                why = why or f"network-status[{i}]: {str(text)[:60]!r} is not an address"
                continue
            if address not in got and len(got) == MAX_ADDRESSES:
                why = why or f"more than {MAX_ADDRESSES} addresses on {entry['name'][:253]}: the rest are left out"
                break
            got[address] = None
    return {name: tuple(got) for name, got in out.items() if got}, why
