"""This module reads what a pod asks for as Multus reads it (`k8s.v1.cni.cncf.io/networks` and
`v1.multus-cni.io/default-network`) into Asks, checks every item before any plugin runs (each refusal a CNI error
7 naming the pod, the annotation and the item), and resolves which network each means and whether the pod may
use it. docs/kubernetes.md, "Moving over from Multus"."""

from __future__ import annotations

import hashlib
import ipaddress
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from netcomp.cni.codes import E_INVALID_CONFIG
from netcomp.cni.spec import loads_foreign
from netcomp.errors import DelegateError
from netcomp.ipam.pool import IPAddress, IPInterface, IPNetwork
from netcomp.names import device_id_problem, is_dns_label, is_dns_subdomain
from netcomp.pods.naming import PodRef, check_ifname, display_name, namespace_of, network_key

POD_NETWORKS = "k8s.v1.cni.cncf.io/networks"
DEFAULT_NETWORK = "v1.multus-cni.io/default-network"
NETWORK_STATUS = "k8s.v1.cni.cncf.io/network-status"
DANM_INTERFACES = ("danm.k8s.io/interfaces", "danm.io/interfaces")  # DANM's, before and after its 4.3 rename
# netcomp's own: "true" makes netcomp create (and use) an IPAMClaim per interface of the pod on a cluster pool,
# named <pod>.<interface> and owned by the pod's controller (a StatefulSet's pod made again keeps its address).
IPAM_CLAIMS = "netcomp.io/ipam-claims"
ANNOTATIONS = (POD_NETWORKS, DEFAULT_NETWORK, *DANM_INTERFACES, IPAM_CLAIMS)  # what the daemon keeps of a pod
DANM_NAMESPACED = ("DanmNet", "TenantNetwork")

# The selection element's keys: those every pod may use (interfaceRequest: Multus's name for `interface` before
# 3.2, still read by it), and the fields a node may bar (kubernetes.podFields).
_ALWAYS = ("name", "namespace", "interface", "interfaceRequest")
_FIELDS = ("ips", "mac", "default-route", "cni-args", "portMappings", "bandwidth", "deviceID", "infiniband-guid",
           "ipam-claim-reference")  # fmt: skip
KNOWN_KEYS = (*_ALWAYS, *_FIELDS)
_BANDWIDTH = ("ingressRate", "ingressBurst", "egressRate", "egressBurst")
_PORT_KEYS = {"hostPort": int, "containerPort": int, "protocol": str, "hostIP": str}
# Networks one annotation may name: far beyond what a pod uses, and each is a plan, a record and a plugin run.
MAX_ITEMS = 128


class NoNetwork(DelegateError):
    """A network a pod names that this node does not have (Multus's NoNetworkFound)."""


@dataclass(frozen=True)
class Ask:
    """One network a pod asks for, and what it asks of that attachment."""

    name: str
    namespace: str
    where: str  # "pod ns/p: annotation k8s.v1.cni.cncf.io/networks: item 1 (storage)", for errors
    ifname: str | None = None
    ips: tuple[IPInterface, ...] = ()  # as written: a bare address has the full prefix length
    prefixed: tuple[bool, ...] = ()  # whether each of ips was written with a prefix length
    mac: str | None = None  # lower case, colon separated
    gateways: tuple[IPAddress, ...] | None = None  # default-route: None when not asked; () for "this network's"
    cni_args: Mapping[str, Any] | None = None
    device_id: str | None = None
    capabilities: Mapping[str, Any] = field(default_factory=dict)  # runtimeConfig by capability name
    # DANM's element: the kind it names; the address families to give an address of (`ip`/`ip6` dynamic or an
    # address; None: every family the network has, as for Multus's pods); proutes(6) as (destination, gateway).
    kind: str | None = None
    families: frozenset[int] | None = None
    proutes: tuple[tuple[IPNetwork, IPAddress], ...] = ()
    ipam_claim: str | None = None  # multi-network spec v1.3: the IPAMClaim (of the pod's namespace) holding its address
    own_claim: bool = False  # the claim is netcomp's to create when missing (the IPAM_CLAIMS annotation)

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    def error(self, why: str, details: str = "", code: int = E_INVALID_CONFIG) -> DelegateError:
        return DelegateError(code, f"{self.where}: {why}", details)

    def wrap(self, e: DelegateError) -> DelegateError:
        """An error met for this item (an allocator's, the kernel's) with the pod, annotation and item named."""
        return DelegateError(e.code, f"{self.where}: {e.full_msg}", e.details)


def element_key(network: str, ifname: str, ask: Ask) -> str:
    """An annotation element's identity as attached: its network, its interface and everything it asks (not its
    place in the annotation). An edit that changes any of them is a detach and an attach."""

    def plain(o: Any) -> Any:
        return sorted(map(str, o)) if isinstance(o, set | frozenset) else str(o)

    fields = {k: v for k, v in asdict(ask).items() if k != "where"}
    fields.update(network=network, ifname=ifname)
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=plain).encode()).hexdigest()[:16]


def problem(where: str, why: str) -> DelegateError:
    return DelegateError(E_INVALID_CONFIG, f"{where}: {why}")


def shown(value: Any, limit: int = 60) -> str:
    """A value a pod wrote, as a message quotes it: its repr, cut short after `limit` characters."""
    text = repr(value[:limit] if isinstance(value, str) else value)
    return text if len(text) <= limit + 2 else text[:limit] + "..."


def parse_ip(text: Any, interface: bool = False) -> Any:
    """An address (or address/prefix) a pod wrote; ValueError for anything else, an IPv6 zone included
    (fe80::1%eth0: no pod address has one, and it would reach the plugins as written, of any length)."""
    if not isinstance(text, str):
        raise ValueError("not a string")
    got = ipaddress.ip_interface(text) if interface else ipaddress.ip_address(text)
    if getattr(got, "scope_id", None):
        raise ValueError("an IPv6 zone")
    return got


def shown_keys(keys: list[str]) -> str:
    """Unknown keys, as a message lists them: the first few, cut short, and how many more."""
    more = f" and {len(keys) - 5} more" if len(keys) > 5 else ""
    return ", ".join(shown(k) for k in keys[:5]) + more


def parse_networks(value: str, pod: PodRef, fields: frozenset[str] | None = None) -> list[Ask]:
    """The networks annotation of a pod, every item checked; [] for an empty one. `fields`: those a pod may use
    besides name, namespace and interface (None: all)."""
    asks = _parse(value, pod, POD_NETWORKS, pod.namespace, fields)
    check_together(asks)
    return asks


def parse_default(value: str, pod: PodRef, namespace: str, fields: frozenset[str] | None = None) -> Ask:
    """The default-network annotation: exactly one network (its namespace `namespace` unless it names one). It
    takes the runtime's interface: an `interface` other than that is refused by the caller, which knows it."""
    asks = _parse(value, pod, DEFAULT_NETWORK, namespace, fields)
    if len(asks) != 1:
        raise problem(f"pod {pod}: annotation {DEFAULT_NETWORK}", f"names {len(asks)} networks; it takes exactly one")
    return asks[0]


def _parse(value: str, pod: PodRef, annotation: str, default_ns: str, fields: frozenset[str] | None) -> list[Ask]:
    head = f"pod {pod}: annotation {annotation}"
    text = value.strip()
    if not text:
        return []
    if not any(c in text for c in '[{"'):  # Multus's test for the JSON form
        items = [item.strip() for item in text.split(",")]
        bounded(sum(1 for item in items if item), head)
        return [_short(item, i, head, default_ns) for i, item in enumerate(items) if item]
    doc = json_list(text, head, "network selection elements (or names separated by commas)")
    return [_element(item, i, head, default_ns, fields) for i, item in enumerate(doc)]


def json_list(text: str, head: str, of: str) -> list[Any]:
    """An annotation that is a JSON list (read by cni/spec.loads_foreign, nesting bounded) of at most MAX_ITEMS."""
    try:
        doc = loads_foreign(text)
    except ValueError as e:
        raise problem(head, f"is not JSON netcomp reads: {e}") from None
    if not isinstance(doc, list):
        raise problem(head, f"must be a JSON list of {of}")
    bounded(len(doc), head)
    return doc


def bounded(count: int, head: str) -> None:
    if count > MAX_ITEMS:
        raise problem(head, f"names {count} networks; a pod may ask for at most {MAX_ITEMS}")


def _short(item: str, i: int, head: str, default_ns: str) -> Ask:
    """`[namespace/]name[@ifname]`, as Multus's parsePodNetworkObjectName reads it."""
    where = f"{head}: item {i} ({item[:60]!r})"
    ref, at, ifname = item.partition("@")
    ns, slash, name = ref.strip().rpartition("/")
    if not slash:
        ns = default_ns
    if ref.count("/") > 1 or "@" in ifname:
        raise problem(where, "is not [namespace/]name[@interface]")
    for what, v in (("namespace", ns), ("network name", name)):
        if not is_dns_label(v.strip()):
            why = "is not a DNS-1123 label (at most 63 lower case letters, digits and '-')"
            raise problem(where, f"{what} {shown(v)} {why}")
    ask = Ask(name.strip(), ns.strip(), where)
    if at:
        return replace(ask, ifname=_ifname(ifname.strip(), ask))
    return ask


def _ifname(value: str, ask: Ask) -> str:
    try:
        return check_ifname(value)
    except DelegateError as e:
        raise ask.error(f"interface: {e.msg}", e.details) from None


def _element(item: Any, i: int, head: str, default_ns: str, fields: frozenset[str] | None) -> Ask:
    if not isinstance(item, dict):
        raise problem(f"{head}: item {i}", "is not an object (a network selection element)")
    name = item.get("name")
    where = f"{head}: item {i}" + (f" ({name[:60]!r})" if isinstance(name, str) else "")
    unknown = sorted(set(item) - set(KNOWN_KEYS))
    if unknown:
        raise problem(where, f"{shown_keys(unknown)}: not something netcomp can do (it takes {', '.join(KNOWN_KEYS)})")
    if not is_dns_label(name):
        raise problem(where, "name must be the network's name, a DNS-1123 label")
    barred = sorted(k for k in item if fields is not None and k not in (*_ALWAYS, *fields))
    if barred:
        raise problem(where, f"{', '.join(map(repr, barred))}: not allowed on this node (kubernetes.podFields)")
    ns = item.get("namespace") or default_ns
    if not is_dns_label(ns):
        raise problem(where, f"namespace {shown(ns)} is not a namespace's name")
    ask = Ask(name, ns, where)
    changes: dict[str, Any] = {}
    ifname = item.get("interface") or item.get("interfaceRequest")
    if ifname is not None:
        if not isinstance(ifname, str):
            raise ask.error("interface must be a string")
        changes["ifname"] = _ifname(ifname, ask)
    if "ips" in item:
        changes["ips"], changes["prefixed"] = _ips(item["ips"], ask)
    if item.get("ipam-claim-reference") is not None:
        changes["ipam_claim"] = _claim_ref(item["ipam-claim-reference"], ask, "ips" in item)
    if item.get("mac") is not None:
        changes["mac"] = _mac(item["mac"], ask)
    if "default-route" in item:
        changes["gateways"] = _gateways(item["default-route"], ask)
    if item.get("cni-args") is not None:
        if not isinstance(item["cni-args"], dict):
            raise ask.error("cni-args must be an object (it becomes the delegates' args.cni)")
        changes["cni_args"] = item["cni-args"]
    if item.get("deviceID") is not None:
        dev = item["deviceID"]
        # It reaches a plugin's runtimeConfig and file names, as the kubelet's device IDs do: the same rule.
        if not isinstance(dev, str) or (why := device_id_problem(dev)):
            raise ask.error(f"deviceID: {why if isinstance(dev, str) else f'not a string: {shown(dev)}'}")
        changes["device_id"] = dev
    caps: dict[str, Any] = {}
    if item.get("portMappings") is not None:
        caps["portMappings"] = _port_mappings(item["portMappings"], ask)
    if item.get("bandwidth") is not None:
        caps["bandwidth"] = _bandwidth(item["bandwidth"], ask)
    if item.get("infiniband-guid") is not None:
        guid = item["infiniband-guid"]
        if not isinstance(guid, str) or len(guid.replace("-", ":").split(":")) not in (8, 20):
            raise ask.error(f"infiniband-guid {str(guid)[:60]!r} is not a GUID (8 bytes, colon separated)")
        caps["infinibandGUID"] = guid
    if caps:
        changes["capabilities"] = caps
    return replace(ask, **changes) if changes else ask


def _ips(value: Any, ask: Ask) -> tuple[tuple[IPInterface, ...], tuple[bool, ...]]:
    if not isinstance(value, list) or not value:
        raise ask.error("ips must be a non-empty list of addresses")
    out, prefixed = [], []
    for j, v in enumerate(value):
        try:
            out.append(parse_ip(v, interface=True))
            prefixed.append("/" in v)
        except ValueError:
            raise ask.error(f"ips[{j}]: {str(v)[:60]!r} is not an IP address (or address/prefix)") from None
    if len({a.version for a in out}) != len(out):
        raise ask.error("ips: at most one address of each family (IPv4, IPv6) per network")
    return tuple(out), tuple(prefixed)


def _claim_ref(value: Any, ask: Ask, with_ips: bool) -> str:
    """The IPAMClaim an element names: an object's name (DNS-1123 subdomain), never beside static `ips`."""
    if with_ips:
        raise ask.error(
            "ips and ipam-claim-reference together: the addresses come from one or the other",
            "leave out ips (the claim holds the address) or ipam-claim-reference",
        )
    if not isinstance(value, str) or not is_dns_subdomain(value):
        raise ask.error(f"ipam-claim-reference {shown(value)} is not an IPAMClaim's name (a DNS-1123 subdomain)")
    return value


def _mac(value: Any, ask: Ask) -> str:
    text = value.replace("-", ":").lower() if isinstance(value, str) else ""
    parts = text.split(":")
    if len(parts) != 6 or not all(len(p) == 2 and all(c in "0123456789abcdef" for c in p) for p in parts):
        raise ask.error(f"mac {str(value)[:60]!r} is not a MAC address (six bytes, as 02:00:00:00:00:01)")
    if int(parts[0], 16) & 1:
        raise ask.error(f"mac {value!r} is a multicast address; an interface needs a unicast one")
    if text == "00:00:00:00:00:00":
        raise ask.error("mac 00:00:00:00:00:00 is not an address an interface can have")
    return text


def _gateways(value: Any, ask: Ask) -> tuple[IPAddress, ...]:
    if not isinstance(value, list):
        raise ask.error("default-route must be a list of gateway addresses (empty: this network's own gateway)")
    out = []
    for j, v in enumerate(value):
        try:
            out.append(parse_ip(v))
        except ValueError:
            raise ask.error(f"default-route[{j}]: {str(v)[:60]!r} is not an IP address") from None
    return tuple(out)


def _port_mappings(value: Any, ask: Ask) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise ask.error("portMappings must be a list of {hostPort, containerPort, protocol, hostIP}")
    out = []
    for j, pm in enumerate(value):
        if not isinstance(pm, dict) or set(pm) - set(_PORT_KEYS):
            raise ask.error(f"portMappings[{j}]: an object of {', '.join(_PORT_KEYS)} only")
        for k, t in _PORT_KEYS.items():
            v = pm.get(k)
            if v is None and k in ("hostPort", "containerPort"):
                raise ask.error(f"portMappings[{j}]: {k} is required")
            if v is not None and (not isinstance(v, t) or isinstance(v, bool)):
                raise ask.error(f"portMappings[{j}].{k} must be a {t.__name__}")
            if isinstance(v, int) and not 0 < v < 65536:
                raise ask.error(f"portMappings[{j}].{k} {v} is not a port (1-65535)")
        out.append(dict(pm))
    return out


def _bandwidth(value: Any, ask: Ask) -> dict[str, int]:
    if not isinstance(value, dict) or set(value) - set(_BANDWIDTH):
        raise ask.error(f"bandwidth must be an object of {', '.join(_BANDWIDTH)}")
    for k, v in value.items():
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise ask.error(f"bandwidth.{k} must be a whole number of bits per second (or bits), not {shown(v)}")
    return dict(value)


def check_together(asks: list[Ask]) -> None:
    """What no item shows alone: the same MAC twice, two default routes of one family."""
    macs: dict[str, Ask] = {}
    gateways: dict[int, Ask] = {}
    for a in asks:
        if a.mac is not None:
            if a.mac in macs:
                raise a.error(f"mac {a.mac} is asked for twice (also by {macs[a.mac].where.rpartition(': ')[2]})")
            macs[a.mac] = a
        for gw in a.gateways or ():
            if gw.version in gateways:
                other = gateways[gw.version].where.rpartition(": ")[2]
                raise a.error(
                    f"default-route: a second IPv{gw.version} default route (also {other}); a pod has one per "
                    "address family"
                )
            gateways[gw.version] = a
    defaults = [a for a in asks if a.gateways is not None]
    if len(defaults) > 1 and any(not a.gateways for a in defaults):
        empty = next(a for a in defaults if not a.gateways)
        raise empty.error(
            "default-route [] (this network's own gateway) with another item's default-route: a pod has one "
            "default route per address family"
        )


def check_interfaces(named: list[tuple[str, Ask]], runtime_ifname: str, has_default: bool) -> None:
    """The interface names of a pod's items together, before any plugin runs: one asked twice, or the runtime's
    own (which the pod's default network takes), is refused naming the pod and both items."""
    seen: dict[str, Ask] = {}
    for ifname, ask in named:
        if has_default and ifname == runtime_ifname:
            raise ask.error(
                f"interface {ifname!r} is the runtime's interface, which the pod's default network takes",
                "name the interface otherwise, or leave `interface` out",
            )
        if ifname in seen:
            other = seen[ifname].where.rpartition(": ")[2]
            raise ask.error(f"interface {ifname!r} is also {other}'s", "each network needs an interface of its own")
        seen[ifname] = ask


@dataclass(frozen=True)
class AskRules:
    """Multus's namespace options (netcomp.yaml `kubernetes:`): with `isolation`, a pod may use the
    NetworkAttachmentDefinitions of its own namespace and of `global_namespaces` only; `default_namespace` is
    where a default-network annotation's definition is when it names none."""

    isolation: bool = False
    global_namespaces: frozenset[str] = frozenset({"default"})
    default_namespace: str = "kube-system"
    fields: frozenset[str] | None = None  # the selection element's fields a pod may use (None: every one)


def resolve(
    ask: Ask, pod: PodRef, nets: Mapping[str, Mapping[str, Any]], rules: AskRules, *, isolated: bool = True
) -> str:
    """The network an item means: the NetworkAttachmentDefinition namespace/name when there is one, else the
    node-wide network of that name (netcomp's Network objects are cluster-wide, as a global namespace's would
    be). With isolation (and `isolated`), a definition of another namespace than the pod's and not global is
    refused naming both. DelegateError 7 when neither exists."""
    key = network_key(ask.namespace, ask.name)
    if key in nets:
        danm_tenancy(ask, pod, key, nets[key])
        if (
            isolated
            and rules.isolation
            and ask.namespace != pod.namespace
            and ask.namespace not in rules.global_namespaces
        ):
            raise ask.error(
                f"namespace isolation: pod {pod} is in namespace {pod.namespace!r} and may not use "
                f"{ask.ref} of namespace {ask.namespace!r}",
                "namespaceIsolation is on: a pod uses its own namespace's definitions and those of "
                + (", ".join(sorted(rules.global_namespaces)) or "no other namespace"),
            )
        return key
    conf = nets.get(ask.name)
    if conf is not None and namespace_of(conf) is None:
        danm_tenancy(ask, pod, ask.name, conf)
        return ask.name
    namespaced = sorted(display_name(k, c) for k, c in nets.items() if k.endswith(f".{ask.name}") and namespace_of(c))
    raise NoNetwork(
        E_INVALID_CONFIG,
        f"{ask.where}: no network {ask.ref}: no NetworkAttachmentDefinition {ask.ref} and no Network "
        f"{ask.name!r} is compiled on this node",
        f"definitions of that name: {', '.join(namespaced)}" if namespaced else "see `netcomp status`",
    )


def danm_kind(conf: Mapping[str, Any]) -> str | None:
    kind = (conf.get("netcomp") or {}).get("danmKind")
    return kind if isinstance(kind, str) else None


def danm_tenancy(ask: Ask, pod: PodRef, key: str, conf: Mapping[str, Any]) -> None:
    """DANM's rules for its networks, whichever annotation names them: a DanmNet or TenantNetwork is for its own
    namespace's pods; a ClusterNetwork with AllowedTenants for those namespaces' pods only."""
    kind = danm_kind(conf)
    ns = namespace_of(conf)
    if kind in DANM_NAMESPACED and ns is not None and ns != pod.namespace:
        raise ask.error(
            f"{kind} {ns}/{key[len(ns) + 1 :]} is in namespace {ns!r}, and pod {pod} is in namespace "
            f"{pod.namespace!r}: a {kind} is for its own namespace's pods"
        )
    tenants = (conf.get("netcomp") or {}).get("allowedTenants") or []
    if kind == "ClusterNetwork" and tenants and pod.namespace not in tenants:
        raise ask.error(
            f"ClusterNetwork {key} allows the pods of {', '.join(tenants)}; pod {pod} is in namespace "
            f"{pod.namespace!r} (AllowedTenants)"
        )
