"""Rules that need more than one intent. Each is a function from all intents to diagnostics, linear or n log n:
the daemon reruns them on every edit."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from netcomp.errors import Diagnostic
from netcomp.intent.hostlink import host_link
from netcomp.intent.intent import Intent
from netcomp.intent.model import HostLocalIPAM, IpvlanSpec, MacvlanSpec, WhereaboutsIPAM

Finding = tuple[Intent, Diagnostic]
Rule = Callable[[Sequence[Intent]], list[Finding]]


def _where(intent: Intent, loc: Sequence[Any] = ("metadata", "name")) -> str:
    return f"{intent.doc.location(intent.source_loc(loc))}"


def duplicate_names(intents: Sequence[Intent]) -> list[Finding]:
    first: dict[str, Intent] = {}
    out: list[Finding] = []
    for it in intents:
        other = first.setdefault(it.name, it)
        if other is not it:
            msg = f"network {it.name!r} is defined twice (first at {_where(other)})"
            out.append((it, it.diagnostic(msg, ("metadata", "name"))))
    return out


@dataclass(frozen=True, slots=True)
class _Link:
    """What the rules need of a macvlan/ipvlan network."""

    device: str
    vlan: int | None
    vni: int | None
    link: dict[str, Any] | None  # the host link netcomp creates, if any
    master: str
    # (version, first, last address as ints, model path of the subnet, text) of ranged IPAM subnets
    spans: tuple[tuple[int, int, int, tuple[Any, ...], str], ...]


def _link_facts(it: Intent) -> _Link | None:
    if "link" in it.memo:
        return it.memo["link"]  # type: ignore[no-any-return]
    spec = it.network.spec
    facts = None
    if isinstance(spec, MacvlanSpec | IpvlanSpec):
        link = host_link(spec)
        spans = []
        if isinstance(spec.ipam, HostLocalIPAM | WhereaboutsIPAM):
            ipam = spec.ipam
            for i, r in enumerate(ipam.all_ranges()):
                loc = ("spec", "ipam", "subnet") if ipam.subnet is not None else ("spec", "ipam", "ranges", i, "subnet")
                net = r.subnet
                spans.append((net.version, int(net.network_address), int(net.broadcast_address), loc, str(net)))
        facts = _Link(
            spec.hostDevice,
            spec.vlan,
            spec.vxlan.vni if spec.vxlan else None,
            link,
            str(link["name"]) if link else spec.hostDevice,
            tuple(spans),
        )
    it.memo["link"] = facts
    return facts


def _links(intents: Sequence[Intent]) -> list[tuple[Intent, _Link]]:
    facts = [(it, _link_facts(it)) for it in intents]
    return [(it, f) for it, f in facts if f is not None]


LinkRule = Callable[[Sequence[tuple[Intent, _Link]]], list[Finding]]


# Where a network's host link id is written: the VLAN id, or the VNI inside the vxlan mapping.
_VLAN_AT: tuple[str, ...] = ("spec", "vlan")
_VNI_AT: tuple[str, ...] = ("spec", "vxlan", "vni")


def _taken(out: list[Finding], seen: dict[Any, Intent], key: Any, it: Intent, what: str, loc: Sequence[Any]) -> bool:
    """Whether `key` was taken by an earlier network (the finding added to out): the first one keeps it."""
    other = seen.setdefault(key, it)
    if other is it:
        return False
    out.append((it, it.diagnostic(f"{what} is already used by network {other.name!r} ({_where(other, loc)})", loc)))
    return True


def vlan_vxlan_clashes(links: Sequence[tuple[Intent, _Link]]) -> list[Finding]:
    """One VLAN id per device, one VNI per node, one owner per host link name; and no network may use a link
    that netcomp creates for another one as its hostDevice."""
    out: list[Finding] = []
    vlans: dict[tuple[str, int], Intent] = {}
    vnis: dict[int, Intent] = {}
    owners: dict[str, tuple[Intent, dict[str, Any]]] = {}
    for it, f in links:
        if f.vlan is not None and _taken(out, vlans, (f.device, f.vlan), it, f"VLAN {f.vlan} on {f.device}", _VLAN_AT):
            continue
        if f.vni is not None and _taken(out, vnis, f.vni, it, f"VXLAN VNI {f.vni}", _VNI_AT):
            continue
        if f.link is not None:
            prev = owners.setdefault(f.link["name"], (it, f.link))
            if prev[0] is not it:
                msg = (
                    f"host link name {f.link['name']!r} (cut to 15 characters) is also the link of network "
                    f"{prev[0].name!r} on {prev[1]['link']}; rename a device or change the id"
                )
                out.append((it, it.diagnostic(msg, _VLAN_AT if f.vlan is not None else _VNI_AT)))
    for it, f in links:
        owner = owners.get(f.device)
        if owner is not None:
            msg = (
                f"hostDevice {f.device!r} is the {owner[1]['kind']} link netcomp creates for network "
                f"{owner[0].name!r}; use {owner[1]['link']} with vlan/vxlan instead"
            )
            out.append((it, it.diagnostic(msg, ("spec", "hostDevice"))))
    return out


def overlapping_subnets(links: Sequence[tuple[Intent, _Link]]) -> list[Finding]:
    """Subnets of different networks on one master (device, or device+VLAN/VXLAN) must not overlap: host-local
    would hand out the same address twice on one L2 segment."""
    spans = [(f.master, *span, it) for it, f in links if f.spans for span in f.spans]
    spans.sort(key=lambda s: s[:4])
    out: list[Finding] = []
    prev: tuple[Any, ...] | None = None
    for s in spans:
        m, version, first, last, loc, text, it = s
        if prev is not None and prev[0] == m and prev[1] == version and first <= prev[3]:
            other = prev[6]
            if other is not it:
                msg = f"subnet {text} overlaps {prev[5]} of network {other.name!r} on {m} ({_where(other, prev[4])})"
            else:
                msg = f"subnet {text} overlaps {prev[5]} of the same network"
            out.append((it, it.diagnostic(msg, loc)))
        if prev is None or prev[0] != m or prev[1] != version or last > prev[3]:
            prev = s
    return out


RULES: tuple[Rule, ...] = (duplicate_names,)
LINK_RULES: tuple[LinkRule, ...] = (vlan_vxlan_clashes, overlapping_subnets)


def check(intents: Sequence[Intent]) -> list[Finding]:
    out: list[Finding] = []
    for rule in RULES:
        out.extend(rule(intents))
    links = _links(intents)  # facts computed once, shared by the rules about links
    for link_rule in LINK_RULES:
        out.extend(link_rule(links))
    return out
