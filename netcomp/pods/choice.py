"""This module says which networks a pod joins, from Multus's annotations or DANM's (never both), resolved against
the networks compiled now and named as Multus and DANM name them. It does not check the names together or put
the asks into attachments: the caller does."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from netcomp.cni.codes import E_INVALID_CONFIG
from netcomp.errors import DelegateError
from netcomp.pods import danm_interfaces, multus
from netcomp.pods.multus import Ask, AskRules
from netcomp.pods.naming import PodRef, Want, check_ifname

DANM_PREFIX = "eth"  # DANM's name for a connection of a network without container_prefix: eth<index>
MULTUS_PREFIX = "net"  # Multus's name for an element of its annotation without `interface`: net<position>


@dataclass
class PodNetworks:
    """What a pod's annotations ask for: a network in the node default's place (on the runtime's interface),
    with what its item asks of it, and more networks, each with its item."""

    default: str | None = None
    default_ask: Ask | None = None
    more: list[tuple[Want, Ask]] = field(default_factory=list)


def plan(
    pod: PodRef, notes: Mapping[str, str], nets: Mapping[str, Mapping[str, Any]], rules: AskRules, runtime_ifname: str
) -> PodNetworks:
    danm = danm_interfaces.danm_annotation(notes, pod)
    if danm is not None:
        both = [k for k in (multus.POD_NETWORKS, multus.DEFAULT_NETWORK) if notes.get(k)]
        if both:
            raise DelegateError(
                E_INVALID_CONFIG,
                f"pod {pod}: annotations {danm[0]} (DANM's) and {both[0]} (Multus's) both say which networks it "
                "joins; give one of them",
            )
        return _danm(pod, danm, nets, runtime_ifname)
    out = PodNetworks()
    if notes.get(multus.DEFAULT_NETWORK):
        ask = multus.parse_default(notes[multus.DEFAULT_NETWORK], pod, rules.default_namespace, rules.fields)
        if ask.ifname not in (None, runtime_ifname):
            raise ask.error(f"interface: the default network is on the runtime's {runtime_ifname}")
        out.default, out.default_ask = multus.resolve(ask, pod, nets, rules, isolated=False), ask
    elif not notes.get(multus.POD_NETWORKS):
        _danm_default(out, pod, nets)
    value = notes.get(multus.POD_NETWORKS)
    asks = multus.parse_networks(value, pod, rules.fields) if value else []
    multus.check_together([*([out.default_ask] if out.default_ask else []), *asks])
    # Multus's names (pkg/multus: "net%d" of the delegate's index): an element without `interface` is named by
    # its place in the annotation, the cluster default network being 0, whatever else the pod asks for.
    out.more = [
        (Want(multus.resolve(a, pod, nets, rules), a.ifname or f"{MULTUS_PREFIX}{i}"), a)
        for i, a in enumerate(asks, start=1)
    ]
    return out


def _danm_default(out: PodNetworks, pod: PodRef, nets: Mapping[str, Mapping[str, Any]]) -> None:
    ask = danm_interfaces.danm_default(pod, nets)
    if ask is not None:
        out.default, out.default_ask = danm_interfaces.resolve_danm(ask, pod, nets), ask


def _danm(
    pod: PodRef, danm: tuple[str, str], nets: Mapping[str, Mapping[str, Any]], runtime_ifname: str
) -> PodNetworks:
    """DANM's connections: the first on the runtime's interface (DANM's eth0) in the node default's place, each
    other one named <container_prefix><index> (eth<index> without a prefix), the index its place in the
    annotation; an empty list is DANM's default network (else the node's)."""
    out = PodNetworks()
    conns = danm_interfaces.parse_danm(danm[1], pod, danm[0])
    if not conns:
        _danm_default(out, pod, nets)
        return out
    keys = [danm_interfaces.resolve_danm(a, pod, nets) for a in conns]
    out.default, out.default_ask = keys[0], conns[0]
    for i, (key, ask) in enumerate(zip(keys[1:], conns[1:], strict=True), start=1):
        prefix = (nets[key].get("netcomp") or {}).get("interfacePrefix") or DANM_PREFIX
        name = f"{prefix}{i}"
        try:
            check_ifname(name)
        except DelegateError as e:
            raise ask.error(f"its interface would be {name!r}: {e.msg}", "container_prefix is too long") from None
        out.more.append((Want(key, name), ask))
    return out
