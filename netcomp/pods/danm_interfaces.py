"""This module reads what a pod asks for as DANM reads it: the interfaces annotation, a JSON list of connections
each naming a DanmNet, TenantNetwork or ClusterNetwork, and DANM's default network for a pod that names none. It
makes each connection an Ask (as multus.py does an element), refused as a CNI error 7 naming the pod and the
connection, and resolves its network by DANM's kinds and tenancy rules (multus.danm_tenancy)."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from netcomp.cni.codes import E_INVALID_CONFIG
from netcomp.errors import DelegateError
from netcomp.ipam.pool import IPAddress, IPInterface, IPNetwork
from netcomp.names import is_dns_label
from netcomp.pods.multus import (
    DANM_INTERFACES,
    DANM_NAMESPACED,
    Ask,
    NoNetwork,
    danm_kind,
    danm_tenancy,
    json_list,
    parse_ip,
    problem,
    shown,
    shown_keys,
)
from netcomp.pods.naming import PodRef, namespace_of, network_key

DANM_REFS = {"network": "DanmNet", "tenantNetwork": "TenantNetwork", "clusterNetwork": "ClusterNetwork"}
DANM_KEYS = (*DANM_REFS, "ip", "ip6", "proutes", "proutes6")


def danm_annotation(notes: Mapping[str, str], pod: PodRef) -> tuple[str, str] | None:
    """(key, value) of the pod's DANM interfaces annotation, if any; both of DANM's keys at once are refused."""
    given = [(k, notes[k]) for k in DANM_INTERFACES if notes.get(k)]
    if len(given) > 1:
        raise DelegateError(
            E_INVALID_CONFIG, f"pod {pod}: annotations {given[0][0]} and {given[1][0]} both name networks; give one"
        )
    return given[0] if given else None


def parse_danm(value: str, pod: PodRef, annotation: str) -> list[Ask]:
    """DANM's interfaces annotation: a JSON list of connections, each naming exactly one network, with `ip`/`ip6`
    (`dynamic`, `none` or an address; none given: no address of that family) and `proutes`/`proutes6`. Interface
    names are the caller's (they depend on the networks' prefixes)."""
    head = f"pod {pod}: annotation {annotation}"
    return [_connection(item, i, head, pod) for i, item in enumerate(json_list(value, head, "connections"))]


def _connection(item: Any, i: int, head: str, pod: PodRef) -> Ask:
    where = f"{head}: connection {i}"
    if not isinstance(item, dict):
        raise problem(where, "is not an object")
    unknown = sorted(set(item) - set(DANM_KEYS))
    if unknown:
        raise problem(where, f"{shown_keys(unknown)}: not a key of DANM's (it takes {', '.join(DANM_KEYS)})")
    refs = [(k, v) for k, v in item.items() if k in DANM_REFS and v]
    if len(refs) != 1:
        raise problem(where, "names a network in exactly one of network, tenantNetwork, clusterNetwork")
    key, name = refs[0]
    where += f" ({key} {shown(str(name))})"
    if not is_dns_label(name):
        raise problem(where, f"{key} must be the network's name, a DNS-1123 label")
    kind = DANM_REFS[key]
    ask = Ask(name, pod.namespace if kind in DANM_NAMESPACED else "", where, kind=kind)
    families: set[int] = set()
    ips: list[IPInterface] = []
    for field_, version in (("ip", 4), ("ip6", 6)):
        v = item.get(field_)
        if v in (None, "", "none"):
            continue
        if not isinstance(v, str):
            raise ask.error(f"{field_} must be a string: dynamic, none or an address")
        families.add(version)
        if v == "dynamic":
            continue
        try:
            addr = parse_ip(v, interface=True).ip  # DANM drops a prefix length: the network's is used
        except ValueError:
            raise ask.error(f"{field_}: {v[:60]!r} is not dynamic, none or an IPv{version} address") from None
        if addr.version != version:
            raise ask.error(f"{field_}: {v[:60]} is not an IPv{version} address")
        ips.append(ipaddress.ip_interface(addr))
    routes: list[tuple[IPNetwork, IPAddress]] = []
    for field_, version in (("proutes", 4), ("proutes6", 6)):
        value = item.get(field_)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise ask.error(f"{field_} must be an object of destination CIDR to gateway")
        for dst, gw in value.items():
            try:
                if "%" in dst:  # an IPv6 zone: no route of a pod's has one
                    raise ValueError(dst)
                d, g = ipaddress.ip_network(dst, strict=False), parse_ip(gw)
            except ValueError:
                raise ask.error(f"{field_}: {str(dst)[:60]}: {str(gw)[:60]} is not a CIDR and a gateway") from None
            if d.version != version or g.version != version:
                raise ask.error(f"{field_}: {dst}: {gw} is not IPv{version}")
            if version not in families:
                raise ask.error(
                    f"{field_}: the interface gets no IPv{version} address ({'ip' if version == 4 else 'ip6'} is "
                    "none), so there is no source for the policy rule"
                )
            routes.append((d, g))
    return replace(
        ask, ips=tuple(ips), prefixed=(False,) * len(ips), families=frozenset(families), proutes=tuple(routes)
    )


def resolve_danm(ask: Ask, pod: PodRef, nets: Mapping[str, Mapping[str, Any]]) -> str:
    """A DANM connection's network: a DanmNet or TenantNetwork of the pod's namespace, or a ClusterNetwork."""
    key = network_key(ask.namespace, ask.name) if ask.kind in DANM_NAMESPACED else ask.name
    conf = nets.get(key)
    if conf is not None and danm_kind(conf) == ask.kind:
        danm_tenancy(ask, pod, key, conf)
        return key
    elsewhere = sorted(
        namespace_of(c) or "" for k, c in nets.items() if danm_kind(c) == ask.kind and k.endswith(f".{ask.name}")
    )
    what = f"{ask.kind} {ask.ref}" if ask.kind in DANM_NAMESPACED else f"ClusterNetwork {ask.name!r}"
    raise NoNetwork(
        E_INVALID_CONFIG,
        f"{ask.where}: no {what} is compiled on this node",
        f"a {ask.kind} {ask.name!r} is in namespace {', '.join(elsewhere)}, not the pod's ({pod.namespace!r}): a "
        f"{ask.kind} is for its own namespace's pods"
        if elsewhere and ask.kind in DANM_NAMESPACED
        else "see `netcomp status`",
    )


def danm_default(pod: PodRef, nets: Mapping[str, Mapping[str, Any]]) -> Ask | None:
    """DANM's network for a pod that names none: a DanmNet, else a TenantNetwork, called `default` in the pod's
    namespace, else the ClusterNetwork `default`; with `ip: dynamic` on the runtime's interface. None when no
    DANM network is called that (the node's defaultNetwork then applies)."""
    where = f"pod {pod}: DANM's default network (the pod names none)"
    for kind in ("DanmNet", "TenantNetwork", "ClusterNetwork"):
        ns = pod.namespace if kind in DANM_NAMESPACED else ""
        key = network_key(ns, "default") if ns else "default"
        conf = nets.get(key)
        if conf is not None and danm_kind(conf) == kind:
            return Ask("default", ns, where, kind=kind, families=frozenset({4}))
    return None
