"""Services on secondary networks: which Services ask for them (in DANM's spelling, as its svcwatcher reads it,
or in netcomp's), which of this node's pods they select, and the EndpointSlices the node writes for them, with
endpoint conditions as kube's controller sets them (pkg/controller/endpointslice/utils.go). It does no I/O:
services.py talks to the API server. docs/kubernetes.md, "Services on secondary networks"."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from netcomp.cni.spec import loads_foreign
from netcomp.kube import labels as labelsel
from netcomp.kube.group import NETWORK, NODE, digest, node_label
from netcomp.kube.labels import Selector
from netcomp.names import DNS_SUBDOMAIN_RE, is_dns_label, quoted
from netcomp.pods.naming import namespace_of, network_key, pod_ref
from netcomp.pods.netstatus import network_status
from netcomp.records.record import Record

GROUP, PLURAL = "discovery.k8s.io", "endpointslices"
VERSIONS = ("v1", "v1beta1")  # the first the API server serves (v1 since Kubernetes 1.21)
MANAGED_BY, MANAGER = "endpointslice.kubernetes.io/managed-by", "netcomp.io"
SERVICE_NAME = "kubernetes.io/service-name"
DIGEST = "netcomp.io/digest"  # of what the slice was written with: a slice is rewritten only when it changes
HEADLESS = "service.kubernetes.io/headless"
PROXY_NAME = "service.kubernetes.io/service-proxy-name"
CONTROLLER_NAME = "service.kubernetes.io/endpoint-controller-name"
TOLERATE_UNREADY = "service.alpha.kubernetes.io/tolerate-unready-endpoints"
SELECTOR = "netcomp.io/selector"
DANM_KINDS = {"network": "DanmNet", "tenantNetwork": "TenantNetwork", "clusterNetwork": "ClusterNetwork"}
TERMINAL = ("Succeeded", "Failed")
PortSet = tuple[tuple[str, str, int], ...]  # (name, protocol, number) of each
Key = tuple[str, str]  # an object's (namespace, name)


@dataclass(frozen=True)
class Port:
    name: str
    protocol: str
    number: int | None  # None: `target` names a container port
    target: str | None = None


@dataclass(frozen=True)
class NetworkRef:
    kind: str | None  # DANM's kind, None for netcomp's spelling
    name: str


@dataclass(frozen=True)
class ServiceSpec:
    namespace: str
    name: str
    uid: str
    spelling: str  # "netcomp" or "danm"
    selector: Selector
    networks: tuple[NetworkRef, ...]
    ports: tuple[Port, ...]
    publish_not_ready: bool = False
    headless: bool = False
    proxy_name: str | None = None


@dataclass(frozen=True)
class Refusal:
    """A Service that asks for slices and cannot have them: why, for the log and `netcomp status`."""

    namespace: str
    name: str
    why: str


def read_service(doc: Mapping[str, Any], danm_group: str = "danm.k8s.io") -> ServiceSpec | Refusal | None:
    """What a Service asks of this node; None when it asks nothing. Its annotations are a tenant's text: anything
    they cannot mean is a Refusal, never an exception."""
    meta, spec = _mapping(doc.get("metadata")), _mapping(doc.get("spec"))
    notes = {k: v for k, v in _mapping(meta.get("annotations")).items() if isinstance(v, str)}
    own = _mapping(meta.get("labels"))
    ns, name, uid = str(meta.get("namespace") or ""), str(meta.get("name") or ""), str(meta.get("uid") or "")
    prefixes = [danm_group, *(p for p in ("danm.k8s.io", "danm.io") if p != danm_group)]
    danm = next((p for p in prefixes if any(f"{p}/{k}" in notes for k in ("selector", *DANM_KINDS))), None)
    native = NETWORK in notes or SELECTOR in notes
    if not native and danm is None:
        return None
    delegated = own.get(CONTROLLER_NAME) == MANAGER
    try:
        if spec.get("type") == "ExternalName":
            raise ValueError("an ExternalName Service has no endpoints")
        if spec.get("selector") and not delegated:
            raise ValueError(
                "it has a spec.selector, so kube-controller-manager gives it the pods' primary addresses: "
                "leave spec.selector out (or label it service.kubernetes.io/endpoint-controller-name=netcomp.io)"
            )
        if native:
            selector, networks = _native(notes, spec.get("selector") if delegated else None)
        else:
            assert danm is not None
            selector, networks = _danm(notes, danm)
        ports = spec.get("ports")
        ports = tuple(_port(p, native) for p in (ports if isinstance(ports, list) else []) if isinstance(p, dict))
    except ValueError as e:
        return Refusal(ns, name, str(e))
    not_ready = bool(spec.get("publishNotReadyAddresses")) or notes.get(TOLERATE_UNREADY) == "true"
    proxy = str(own[PROXY_NAME]) if own.get(PROXY_NAME) else None
    spelling, headless = "netcomp" if native else "danm", spec.get("clusterIP") == "None"
    return ServiceSpec(ns, name, uid, spelling, selector, networks, ports, not_ready, headless, proxy)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _native(notes: Mapping[str, str], own_selector: Any) -> tuple[Selector, tuple[NetworkRef, ...]]:
    network = str(notes.get(NETWORK) or "").strip()
    ns, slash, name = network.rpartition("/")
    if not is_dns_label(name) or (slash and not is_dns_label(ns)):
        raise ValueError(f"{NETWORK}: {quoted(network)} is not a network (name, or namespace/name)")
    if SELECTOR in notes:
        try:
            selector = labelsel.parse(str(notes[SELECTOR]))
        except ValueError as e:
            raise ValueError(f"{SELECTOR}: {e}") from None
    elif isinstance(own_selector, dict) and own_selector:
        try:
            selector = labelsel.from_map({str(k): str(v) for k, v in own_selector.items()})
        except ValueError as e:
            raise ValueError(f"spec.selector: {e}") from None
    else:
        raise ValueError(f"{SELECTOR} is missing: the labels of the pods to select (as kubectl -l takes them)")
    if selector.empty:
        raise ValueError(f"{SELECTOR} is empty: it would select every pod of the namespace")
    return selector, (NetworkRef(None, network),)


def _danm(notes: Mapping[str, str], prefix: str) -> tuple[Selector, tuple[NetworkRef, ...]]:
    key = f"{prefix}/selector"
    try:
        labels = loads_foreign(notes.get(key) or "{}")
    except ValueError as e:
        raise ValueError(f"{key}: not JSON ({e})") from None
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        raise ValueError(f'{key}: not a JSON object of labels (e.g. {{"app": "lb"}})')
    if not labels:
        raise ValueError(f"{key} selects nothing (DANM's svcwatcher ignores such a Service too)")
    try:
        selector = labelsel.from_map(labels)
    except ValueError as e:
        raise ValueError(f"{key}: {e}") from None
    networks = []
    for field_, kind in DANM_KINDS.items():
        value = str(notes.get(f"{prefix}/{field_}") or "").strip()
        if value:
            if not is_dns_label(value):
                raise ValueError(f"{prefix}/{field_}: {quoted(value)} is not a {kind}'s name")
            networks.append(NetworkRef(kind, value))
    if not networks:
        raise ValueError(f"it names no network: {prefix}/network, /tenantNetwork or /clusterNetwork")
    return selector, tuple(networks)


def _port(p: Mapping[str, Any], native: bool) -> Port:
    name, protocol = str(p.get("name") or ""), str(p.get("protocol") or "TCP")
    target = p.get("targetPort", p.get("port")) if native else p.get("port")
    if isinstance(target, int):
        return Port(name, protocol, target)
    if isinstance(target, str) and target.isdigit():
        return Port(name, protocol, int(target))
    if isinstance(target, str) and target:
        return Port(name, protocol, None, target)
    raise ValueError(f"port {name or '(unnamed)'} has no port number")


# ------------------------------------------------------------------------------------------------ pods


@dataclass(frozen=True)
class EndpointPod:
    """A pod as its Services' EndpointSlices see it: who it is, its labels, whether it is ready, its ports."""

    namespace: str
    name: str
    uid: str
    labels: Mapping[str, str] = field(default_factory=dict)
    phase: str = ""
    ready: bool = False  # its Ready condition
    terminating: bool = False
    ports: PortSet = ()  # the named container ports

    def port(self, name: str, protocol: str) -> int | None:
        return next((n for pname, proto, n in self.ports if pname == name and proto == protocol), None)


def read_pod(doc: Mapping[str, Any]) -> EndpointPod | None:
    meta, spec, status = doc.get("metadata") or {}, doc.get("spec") or {}, doc.get("status") or {}
    ns, name = meta.get("namespace"), meta.get("name")
    if not isinstance(ns, str) or not isinstance(name, str):
        return None
    ports = []
    for c in spec.get("containers") or []:
        for p in (c or {}).get("ports") or []:
            if isinstance(p, dict) and p.get("name") and isinstance(p.get("containerPort"), int):
                ports.append((str(p["name"]), str(p.get("protocol") or "TCP"), p["containerPort"]))
    conditions = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    uid, phase = str(meta.get("uid") or ""), str(status.get("phase") or "")
    return EndpointPod(ns, name, uid, labels, phase, ready, bool(meta.get("deletionTimestamp")), tuple(sorted(ports)))


@dataclass(frozen=True)
class Attached:
    """One attachment of a pod on this node, as its cache entry records it."""

    namespace: str  # the pod's
    pod: str
    pod_uid: str
    network: str  # its name on the node
    network_namespace: str | None  # a namespaced definition's namespace
    kind: str | None  # DANM's kind of the network, when it is DANM's
    ifname: str
    ips: tuple[str, ...]


def attached(entry: Record) -> tuple[Attached, ...]:
    atts = entry.attached
    out = []
    for a, status in zip(atts, network_status(atts, entry.ifname), strict=True):
        pod = pod_ref(a.args)
        if pod is None:
            continue  # a container that is no pod
        kind = (a.conflist.get("netcomp") or {}).get("danmKind")
        kind = kind if isinstance(kind, str) else None
        ips = tuple(status["ips"])
        out.append(Attached(pod.namespace, pod.name, pod.uid, a.network, namespace_of(a.conflist), kind, a.ifname, ips))
    return tuple(out)


def _rank(ref: NetworkRef, svc_ns: str, a: Attached) -> int | None:
    """Whether the attachment is on the network the Service names: 0 yes, 1 only as the node-wide network of a
    bare name (taken when the pod has nothing of the namespace's definition of it), None no."""
    if ref.kind is None:
        ns, slash, name = ref.name.rpartition("/")
        if slash:
            return 0 if a.network_namespace == ns and a.network == network_key(ns, name) else None
        if a.network_namespace == svc_ns and a.network == network_key(svc_ns, name):
            return 0
        return 1 if a.network_namespace is None and a.network == name else None
    if ref.kind == "ClusterNetwork":
        return 0 if a.kind == ref.kind and a.network == ref.name else None
    return 0 if a.kind == ref.kind and a.network == network_key(svc_ns, ref.name) else None


# ------------------------------------------------------------------------------------------------ slices


def own_selector(node: str) -> str:
    return f"{MANAGED_BY}={MANAGER},{NODE}={node_label(node)}"


def slice_name(service: str, node: str, family: int, ports: str = "") -> str:
    """`<service>.<node>.v4` (a port set's hash after it when there are several): a Service's name has no dot,
    so no two Services, nodes or families share one, and each node writes only its own."""
    tail = [f"v{family}", *([ports] if ports else [])]
    name = ".".join([service, node, *tail])
    ok = len(name) <= 253 and DNS_SUBDOMAIN_RE.fullmatch(node)
    return name if ok else ".".join([service, digest(node), *tail])


def desired(
    services: Iterable[ServiceSpec],
    pods: Mapping[Key, EndpointPod],
    records: Iterable[Attached],
    node: str,
    version: str,
) -> dict[Key, dict[str, Any]]:
    """Every slice this node should have, by (namespace, name)."""
    by_pod: dict[Key, list[Attached]] = {}
    for a in records:
        by_pod.setdefault((a.namespace, a.pod), []).append(a)
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for svc in services:
        groups: dict[tuple[int, PortSet], dict[tuple[str, ...], dict[str, Any]]] = {}
        for key, atts in by_pod.items():
            pod = pods.get(key)
            if pod is None or key[0] != svc.namespace or pod.phase in TERMINAL or not svc.selector.matches(pod.labels):
                continue
            ranked = [
                (r, a)
                for a in atts
                if not a.pod_uid or not pod.uid or a.pod_uid == pod.uid  # not an earlier pod's of its name
                for ref in svc.networks
                if (r := _rank(ref, svc.namespace, a)) is not None
            ]
            best = min((r for r, _ in ranked), default=None)
            ports = tuple(
                (p.name, p.protocol, n)
                for p in svc.ports
                if (n := p.number if p.target is None else pod.port(p.target, p.protocol)) is not None
            )
            for r, a in ranked:
                for ip in a.ips if r == best else ():
                    family = 6 if ":" in ip else 4  # a result's address, as the plugin gave it
                    eps = groups.setdefault((family, ports), {})
                    eps[(pod.namespace, pod.name, a.ifname, ip)] = _endpoint(svc, pod, ip, node, version)
        for (family, ports), eps in groups.items():
            body = _slice(svc, node, version, family, ports, [eps[k] for k in sorted(eps)])
            out[(svc.namespace, body["metadata"]["name"])] = body
    return out


def _endpoint(svc: ServiceSpec, pod: EndpointPod, ip: str, node: str, version: str) -> dict[str, Any]:
    serving = svc.publish_not_ready or (pod.phase == "Running" and pod.ready)
    ready = svc.publish_not_ready or (serving and not pod.terminating)
    ep: dict[str, Any] = {
        "addresses": [ip],
        "conditions": {"ready": ready, "serving": serving, "terminating": pod.terminating},
        "targetRef": {"kind": "Pod", "namespace": pod.namespace, "name": pod.name, "uid": pod.uid},
    }
    if version == "v1beta1":
        ep["topology"] = {"kubernetes.io/hostname": node}  # v1beta1's nodeName is behind a feature gate in 1.20
    else:
        ep["nodeName"] = node
    return ep


def _slice(
    svc: ServiceSpec, node: str, version: str, family: int, ports: PortSet, endpoints: list[dict[str, Any]]
) -> dict[str, Any]:
    labels = {MANAGED_BY: MANAGER, SERVICE_NAME: svc.name, NODE: node_label(node)}
    if svc.headless:
        labels[HEADLESS] = ""  # as kube's controller marks them: kube-proxy does not even look
    if svc.proxy_name:
        labels[PROXY_NAME] = svc.proxy_name
    named = any(p.target for p in svc.ports)  # pods may resolve a named port differently: a slice per port set
    name = slice_name(svc.name, node, family, digest(json.dumps(ports))[:8] if named else "")
    owner = {"apiVersion": "v1", "kind": "Service", "name": svc.name, "uid": svc.uid}
    body: dict[str, Any] = {
        "apiVersion": f"{GROUP}/{version}",
        "kind": "EndpointSlice",
        "metadata": {
            "name": name,
            "namespace": svc.namespace,
            "labels": labels,
            "annotations": {NODE: node},
            "ownerReferences": [owner] if svc.uid else [],
        },
        "addressType": f"IPv{family}",
        "endpoints": endpoints,
        "ports": [{"name": n, "protocol": proto, "port": num} for n, proto, num in ports],
    }
    body["metadata"]["annotations"][DIGEST] = digest(orjson.dumps(body, option=orjson.OPT_SORT_KEYS))
    return body


def digest_of(doc: Mapping[str, Any]) -> str:
    return str(((doc.get("metadata") or {}).get("annotations") or {}).get(DIGEST) or "")


def stale(doc: Mapping[str, Any], node_exists: bool, pods_there: set[str]) -> bool:
    """Whether another node's slice may go: its node is no Node now, or none of the pods it names is still on that
    node (`pods_there`: the uids of the pods bound to it)."""
    if not node_exists:
        return True
    uids = {str((e.get("targetRef") or {}).get("uid") or "") for e in doc.get("endpoints") or []}
    return not (uids & pods_there)
