"""This module reads and writes IPAMClaim objects (k8s.cni.cncf.io/v1alpha1, namespaced; the multi-network spec
v1.3's `ipam-claim-reference`) on the API server: it reads one by name, writes its status (ips in CIDR form, the
IPsAllocated condition, ownerPod), puts netcomp's finalizer and its node's label on and takes them off, lists the
claims labelled with one node and reads the pods a claim's owner check needs; it follows the claims labelled with
this node (Following) and finishes the claims of a node gone for good for the cluster's GC (GoneNodeClaims). It
checks everything it reads before use (parse): whoever can write a claim can write anything in it. It is loaded
only with a cluster; what a claim's address is on the node is ipamclaims.py's."""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from netcomp.ipam.pool import IPInterface
from netcomp.kube.apiclient import Handle
from netcomp.kube.apierrors import ApiException, one_line
from netcomp.kube.following import Follower
from netcomp.kube.group import NODE, node_label
from netcomp.names import is_dns_label, is_dns_subdomain

log = logging.getLogger("netcomp.ipam")
GROUP, VERSION, PLURAL = "k8s.cni.cncf.io", "v1alpha1", "ipamclaims"
FINALIZER = "netcomp.io/address"  # the claim's address is in a block: freed by netcomp before the claim goes
CONDITION = "IPsAllocated"
MAX_IPS = 2  # one address of each family
RECHECK = 5.0  # seconds between two looks at what waits (Followed.recheck)


class Away(Exception):
    """The API server could not be reached or did not answer as it should: nothing was read or written."""


class Missing(Exception):
    """No such object (404)."""


class Changed(Exception):
    """The object changed since it was read (409 on a write made on its resourceVersion)."""


@dataclass(frozen=True)
class ClaimObject:
    """An IPAMClaim as read, checked: its identity, spec and status, and what netcomp put on it."""

    namespace: str
    name: str
    uid: str
    rv: str
    network: str
    interface: str
    ips: tuple[IPInterface, ...]
    owner_pod: str  # status.ownerPod.name ("": none)
    deleting: bool
    finalizers: tuple[str, ...]
    node: str  # the value of netcomp's node label ("": none)

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def key(self) -> str:
        """namespace/name/uid, as a Claim's ipam_claim holds it."""
        return f"{self.namespace}/{self.name}/{self.uid}"


def parse(obj: Any) -> ClaimObject:
    """The claim an object is; ValueError naming what is wrong (of a claim someone wrote by hand, say)."""
    if not isinstance(obj, dict):
        raise ValueError("not an object")
    meta, spec, status = (_part(obj, k) for k in ("metadata", "spec", "status"))
    ns, name, uid = meta.get("namespace"), meta.get("name"), meta.get("uid")
    if not (is_dns_label(ns) and is_dns_subdomain(name) and isinstance(uid, str) and uid):
        raise ValueError("its metadata has no namespace, name and uid")
    network, interface = spec.get("network"), spec.get("interface")
    if not isinstance(network, str) or not network or len(network) > 253:
        raise ValueError("spec.network is not a network's name")
    if not isinstance(interface, str) or not interface or len(interface) > 15:
        raise ValueError("spec.interface is not an interface's name")
    ips = status.get("ips") or []
    if not isinstance(ips, list) or len(ips) > MAX_IPS:
        raise ValueError(f"status.ips is not a list of at most {MAX_IPS} addresses")
    got = []
    for text in ips:
        try:
            got.append(ipaddress.ip_interface(text if isinstance(text, str) and len(text) <= 64 else ""))
        except ValueError:
            raise ValueError(f"status.ips has {str(text)[:64]!r}, not an address in CIDR form") from None
    if len({a.version for a in got}) != len(got):
        raise ValueError("status.ips has two addresses of one family")
    owner = status.get("ownerPod")
    owner_name = owner.get("name") if isinstance(owner, dict) else ""
    fins = meta.get("finalizers") or []
    labels = _part(meta, "labels")
    return ClaimObject(
        ns, name, uid, str(meta.get("resourceVersion", "")), network, interface, tuple(got),
        owner_name if isinstance(owner_name, str) and is_dns_subdomain(owner_name) else "",
        bool(meta.get("deletionTimestamp")), tuple(f for f in fins if isinstance(f, str)) if isinstance(fins, list)
        else (), str(labels.get(NODE, "")),
    )  # fmt: skip


def _part(obj: dict[str, Any], key: str) -> dict[str, Any]:
    got = obj.get(key)
    return got if isinstance(got, dict) else {}


def condition(ok: bool, message: str) -> dict[str, Any]:
    """The claim's IPsAllocated condition, as metav1.Condition has it."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"type": CONDITION, "status": "True" if ok else "False", "lastTransitionTime": now,
            "reason": "SuccessfulAllocation" if ok else "AllocationFailed", "message": message[:1024]}  # fmt: skip


class ClaimApi:
    """The calls on IPAMClaims and on the pods their owner check reads."""

    def __init__(self, api: Handle, node: str) -> None:
        self.custom: Any = api.custom
        self.core: Any = api.core
        self.timeout = api.timeout
        self.node = node

    def _call(self, facade: Any, method: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return getattr(facade, method)(*args, _request_timeout=self.timeout, **kwargs)
        except ApiException as e:
            if e.status == 404:
                raise Missing(one_line(e)) from None
            if e.status == 409:
                raise Changed(one_line(e)) from None
            raise Away(one_line(e)) from None
        except Exception as e:
            raise Away(one_line(e)) from None

    def get(self, namespace: str, name: str) -> ClaimObject:
        """Missing; Away; ValueError for an object that is no claim netcomp can use."""
        return parse(self._call(self.custom, "get_namespaced_custom_object", GROUP, VERSION, namespace, PLURAL, name))

    def create(self, namespace: str, name: str, network: str, interface: str, owner: dict[str, Any]) -> ClaimObject:
        """A claim netcomp makes for a pod, owned by `owner` (an ownerReference). Changed when it exists; Away."""
        meta = {"name": name, "ownerReferences": [owner]}
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "IPAMClaim", "metadata": meta,
                "spec": {"network": network, "interface": interface}}  # fmt: skip
        return parse(self._call(self.custom, "create_namespaced_custom_object", GROUP, VERSION, namespace, PLURAL,
                                body))  # fmt: skip

    def mark(self, c: ClaimObject, node: str | None) -> ClaimObject:
        """netcomp's finalizer and `node`'s label put on the claim, on its version only (Changed); node None: both
        taken off. Missing; Away."""
        fins = [f for f in c.finalizers if f != FINALIZER] + ([FINALIZER] if node is not None else [])
        meta = {"resourceVersion": c.rv, "finalizers": fins, "labels": {NODE: node_label(node) if node else None}}
        body = {"metadata": meta}
        return parse(self._call(self.custom, "patch_namespaced_custom_object", GROUP, VERSION, c.namespace, PLURAL,
                                c.name, body))  # fmt: skip

    def write_status(self, c: ClaimObject, ips: list[str], owner_pod: str) -> ClaimObject:
        """status.ips, the IPsAllocated condition and ownerPod. Missing; Away."""
        status = {"ips": ips, "ownerPod": {"name": owner_pod}, "conditions": [condition(True, "netcomp: " +
                  ", ".join(ips))]}  # fmt: skip
        body = {"metadata": {"uid": c.uid}, "status": status}
        return parse(self._call(self.custom, "patch_namespaced_custom_object_status", GROUP, VERSION, c.namespace,
                                PLURAL, c.name, body))  # fmt: skip

    def clear_owner(self, namespace: str, name: str, uid: str, owner_pod: str) -> None:
        """status.ownerPod taken away if it still names `owner_pod` (on claim `uid`): one JSON patch whose tests
        the API server checks with the change, so that a later ADD's owner is never taken away. Missing;
        Away (a test that fails too)."""
        body = [{"op": "test", "path": "/metadata/uid", "value": uid},
                {"op": "test", "path": "/status/ownerPod/name", "value": owner_pod},
                {"op": "remove", "path": "/status/ownerPod"}]  # fmt: skip
        self._call(self.custom, "patch_namespaced_custom_object_status", GROUP, VERSION, namespace, PLURAL, name,
                   body)  # fmt: skip

    def labelled(self, node: str | None = None) -> list[ClaimObject]:
        """The claims labelled with `node` (default this one: those whose addresses it keeps), in every
        namespace. Away."""
        doc = self._call(self.custom, "list_custom_object_for_all_namespaces", GROUP, VERSION, PLURAL,
                         label_selector=f"{NODE}={node_label(node or self.node)}")  # fmt: skip
        out = []
        for item in (doc or {}).get("items") or []:
            try:
                out.append(parse(item))
            except ValueError:
                continue  # not one netcomp can use: nothing of it is kept
        return out

    def gone_node(self, node: str) -> GoneNodeClaims | None:
        """The claims labelled with `node`, gone for good, for the cluster's GC; None: they cannot be told."""
        try:
            return GoneNodeClaims(self, node, {c.uid: c for c in self.labelled(node)})
        except Missing:
            return GoneNodeClaims(self, node, {})  # no IPAMClaim CRD: no claim at all
        except Away as e:
            log.warning("cannot list the IPAMClaims of node %s: %s", node, e)
            return None

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A pod's object (None: there is none). Away."""
        try:
            got = self._call(self.core, "read_namespaced_pod", name, namespace)
        except Missing:
            return None
        return got if isinstance(got, dict) else None


def controller_uid(pod: dict[str, Any]) -> str:
    """The uid of the pod's controller (its ownerReference with controller: true; "": none)."""
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    for r in refs if isinstance(refs, list) else []:
        if isinstance(r, dict) and r.get("controller") is True and isinstance(r.get("uid"), str):
            return str(r["uid"])
    return ""


def controller_ref(pod: dict[str, Any]) -> dict[str, Any] | None:
    """An ownerReference to the pod's controller, for an object that goes with it (not blocking its deletion)."""
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    for r in refs if isinstance(refs, list) else []:
        if (
            isinstance(r, dict)
            and r.get("controller") is True
            and all(isinstance(r.get(k), str) for k in ("apiVersion", "kind", "name", "uid"))
        ):
            return {k: r[k] for k in ("apiVersion", "kind", "name", "uid")} | {"blockOwnerDeletion": False}
    return None


def running(pod: dict[str, Any]) -> bool:
    """The pod is alive: not finished (phase Succeeded or Failed)."""
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def unused(pod: dict[str, Any] | None, node_exists: Callable[[str], bool]) -> str | None:
    """Why a deleted claim's address is used by no pod, `pod` being its status.ownerPod's object: the pod is gone,
    finished, or not on a live node (Allocator.gone's rules; ownerPod names no uid); None: it runs on a live node.
    node_exists may raise (StoreUnavailable): nothing is decided then."""
    if pod is None:
        return "its pod is gone"
    if not running(pod):
        return "its pod has finished"
    node = (pod.get("spec") or {}).get("nodeName")
    if not isinstance(node, str) or not node:
        return "its pod is on no node"
    return None if node_exists(node) else f"its pod was on node {node}, which is gone"


@dataclass
class GoneNodeClaims:
    """The IPAMClaims labelled with a node gone for good (its Node deleted), as one run of the cluster's GC reads
    them: a claim listed keeps its block entries; one being deleted has netcomp's finalizer (and the gone node's
    label) taken off once no running pod uses its address (finish), after which its entries may be freed. The
    finalizer goes before the entries: a GC killed between the two leaves entries whose claim is gone, which the
    next run frees (never an entry freed while its claim could still be used, nor a claim left hanging)."""

    api: ClaimApi
    node: str
    claims: dict[str, ClaimObject]  # by uid
    done: dict[str, str | None] = field(default_factory=dict)

    def __contains__(self, uid: object) -> bool:
        return uid in self.claims

    def finish(self, uid: str, node_exists: Callable[[str], bool]) -> str | None:
        """Why the claim's entries may be freed now (its finalizer is off); None: they stay (it is not being
        deleted, a running pod on a live node uses its address, or that cannot be told now). Once per run."""
        if uid not in self.done:
            self.done[uid] = self._finish(self.claims[uid], node_exists)
        return self.done[uid]

    def finish_all(self, node_exists: Callable[[str], bool]) -> None:
        """Every claim being deleted finished, those holding no entry the run saw included (an ADD's label and
        finalizer written with no address given, say); a claim not deleted whose status has no address let go,
        as the gone node will never give it one (another node's ADD then can; an entry the gone node recorded
        for it is then freed as its claim's no more)."""
        for uid, c in self.claims.items():
            if c.deleting:
                self.finish(uid, node_exists)
            elif not c.ips and FINALIZER in c.finalizers:
                try:
                    self.api.mark(c, None)
                except (Away, Changed, Missing) as e:
                    log.warning("IPAMClaim %s: node %s's label stays for now: %s", c.ref, self.node, e)
                    continue
                log.warning("IPAMClaim %s was being given its first address by node %s, which is gone: its label "
                            "and finalizer taken off", c.ref, self.node)  # fmt: skip

    def _finish(self, c: ClaimObject, node_exists: Callable[[str], bool]) -> str | None:
        if not c.deleting:
            return None
        why = "no pod is named its owner"
        if c.owner_pod:
            try:
                pod = self.api.pod(c.namespace, c.owner_pod)
            except Away as e:
                log.warning("IPAMClaim %s is deleted (node %s is gone): pod %s/%s, its owner, cannot be read (%s): "
                            "its address stays", c.ref, self.node, c.namespace, c.owner_pod, e)  # fmt: skip
                return None
            got = unused(pod, node_exists)
            if got is None:
                log.info("IPAMClaim %s is deleted (node %s is gone): its address stays while pod %s/%s runs; a "
                         "later GC run frees it", c.ref, self.node, c.namespace, c.owner_pod)  # fmt: skip
                return None
            why = got.replace("its pod", f"pod {c.namespace}/{c.owner_pod}", 1)
        if FINALIZER in c.finalizers:
            try:
                self.api.mark(c, None)
            except Missing:
                pass
            except (Away, Changed) as e:
                log.warning("IPAMClaim %s: its finalizer stays for now: %s", c.ref, e)
                return None
        log.warning("IPAMClaim %s is deleted, %s and its node %s is gone: its finalizer taken off", c.ref, why,
                    self.node)  # fmt: skip
        return f"its IPAMClaim {c.ref} is deleted and {why} (node {self.node} is gone)"


class Followed(Protocol):
    """What the claims labelled with a node are told (ipamclaims.IPAMClaims)."""

    node: str

    def listed(self, claims: list[ClaimObject]) -> None:
        """A whole list of them."""

    def deleted(self, c: ClaimObject | None, uid: str) -> None:
        """One being deleted, or gone."""

    def unanswered(self, c: ClaimObject) -> None:
        """One as a watch shows it, not being deleted."""

    def recheck(self) -> None:
        """Every few seconds: what waits on a pod, the API server, or an ADD, looked at again (cheap when nothing
        waits)."""


class Following(Follower):
    """The IPAMClaims labelled with this node (those whose block entries it keeps), listed and watched: each
    node follows only the claims that name it."""

    def __init__(self, claims: Followed, api: Handle) -> None:
        super().__init__("IPAMClaims of this node", api.custom, "list_custom_object_for_all_namespaces", GROUP,
                         VERSION, PLURAL, explain=one_line, backoff=api.backoff(), timeout=api.timeout,
                         loads=orjson.loads, label_selector=f"{NODE}={node_label(claims.node)}")  # fmt: skip
        self.claims = claims
        self._once, self._started = threading.Lock(), False

    def listed(self, items: list[Any]) -> None:
        got = []
        for item in items:
            with contextlib.suppress(ValueError):
                got.append(parse(item))
        self.claims.listed(got)

    def seen(self, kind: str, obj: dict[str, Any]) -> None:
        try:
            c = parse(obj)
        except ValueError:
            return
        if kind == "DELETED" or c.deleting:  # gone: its last state still names its pod
            self.claims.deleted(c, c.uid)
        else:
            self.claims.unanswered(c)

    def start(self, stop: threading.Event, recheck: float = RECHECK) -> None:
        """Once: the claims followed, and every `recheck` seconds what waits looked at again (Followed.recheck)."""
        with self._once:
            if self._started:
                return
            self._started = True
        threading.Thread(target=self.follow, args=(stop,), name="kube-ipamclaims", daemon=True).start()

        def loop() -> None:
            while not stop.wait(recheck):
                self.claims.recheck()

        threading.Thread(target=loop, name="ipamclaims-pods", daemon=True).start()


def going(pod: dict[str, Any] | None, uid: str) -> bool:
    """The pod of `uid` is gone, finished, or being deleted (another pod of its name counts as gone)."""
    meta = (pod or {}).get("metadata") or {}
    return pod is None or meta.get("uid") != uid or bool(meta.get("deletionTimestamp")) or not running(pod)
