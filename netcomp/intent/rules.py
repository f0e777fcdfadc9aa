"""Rules that need more than one intent. Each is a function from all intents to diagnostics, linear or
n log n (the daemon reruns them on every edit of a 10,000-intent node)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from netcomp.errors import Diagnostic
from netcomp.intent import Intent
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
            out.append(
                (
                    it,
                    it.diagnostic(
                        f"network {it.name!r} is defined twice (first at {_where(other)})",
                        ("metadata", "name"),
                    ),
                )
            )
    return out


def _links(intents: Sequence[Intent]) -> Iterator[tuple[Intent, MacvlanSpec | IpvlanSpec]]:
    for it in intents:
        spec = it.network.spec
        if isinstance(spec, MacvlanSpec | IpvlanSpec):
            yield it, spec


def vlan_vxlan_clashes(intents: Sequence[Intent]) -> list[Finding]:
    """One VLAN id per device, one VNI per node, one owner per host link name; and no network may use a link
    that netcomp creates for another one as its hostDevice."""
    from netcomp.backends.common import host_link

    out: list[Finding] = []
    vlans: dict[tuple[str, int], Intent] = {}
    vnis: dict[int, Intent] = {}
    owners: dict[str, tuple[Intent, dict[str, Any]]] = {}
    for it, spec in _links(intents):
        link = host_link(spec)
        if spec.vlan is not None:
            other = vlans.setdefault((spec.hostDevice, spec.vlan), it)
            if other is not it:
                out.append(
                    (
                        it,
                        it.diagnostic(
                            f"VLAN {spec.vlan} on {spec.hostDevice} is already used by network "
                            f"{other.name!r} ({_where(other, ('spec', 'vlan'))})",
                            ("spec", "vlan"),
                        ),
                    )
                )
                continue
        if spec.vxlan is not None:
            other = vnis.setdefault(spec.vxlan.vni, it)
            if other is not it:
                out.append(
                    (
                        it,
                        it.diagnostic(
                            f"VXLAN VNI {spec.vxlan.vni} is already used by network {other.name!r} "
                            f"({_where(other, ('spec', 'vxlan'))})",
                            ("spec", "vxlan"),
                        ),
                    )
                )
                continue
        if link is not None:
            prev = owners.setdefault(link["name"], (it, link))
            if prev[0] is not it:
                out.append(
                    (
                        it,
                        it.diagnostic(
                            f"host link name {link['name']!r} (cut to 15 characters) is also the link of network "
                            f"{prev[0].name!r} on {prev[1]['link']}; rename a device or change the id",
                            ("spec", "vlan" if spec.vlan is not None else "vxlan"),
                        ),
                    )
                )
    for it, spec in _links(intents):
        owner = owners.get(spec.hostDevice)
        if owner is not None:
            out.append(
                (
                    it,
                    it.diagnostic(
                        f"hostDevice {spec.hostDevice!r} is the {owner[1]['kind']} link netcomp "
                        f"creates for network {owner[0].name!r}; use {owner[1]['link']} with "
                        f"vlan/vxlan instead",
                        ("spec", "hostDevice"),
                    ),
                )
            )
    return out


def overlapping_subnets(intents: Sequence[Intent]) -> list[Finding]:
    """Subnets of different networks on one master (device, or device+VLAN/VXLAN) must not overlap: host-local
    would hand out the same address twice on one L2 segment."""
    from netcomp.backends.common import master

    spans: list[tuple[str, int, int, int, Intent, tuple[Any, ...], str]] = []
    for it, spec in _links(intents):
        ipam = spec.ipam
        if not isinstance(ipam, HostLocalIPAM | WhereaboutsIPAM):
            continue
        m = master(spec)
        for i, r in enumerate(ipam.all_ranges()):
            loc = ("spec", "ipam", "subnet") if ipam.subnet is not None else ("spec", "ipam", "ranges", i, "subnet")
            net = r.subnet
            spans.append((m, net.version, int(net.network_address), int(net.broadcast_address), it, loc, str(net)))
    spans.sort(key=lambda s: (s[0], s[1], s[2], s[3]))
    out: list[Finding] = []
    prev: tuple[str, int, int, int, Intent, tuple[Any, ...], str] | None = None
    for s in spans:
        if prev is not None and prev[0] == s[0] and prev[1] == s[1] and s[2] <= prev[3]:
            if prev[4] is not s[4]:
                out.append(
                    (
                        s[4],
                        s[4].diagnostic(
                            f"subnet {s[6]} overlaps {prev[6]} of network {prev[4].name!r} on "
                            f"{s[0]} ({_where(prev[4], prev[5])})",
                            s[5],
                        ),
                    )
                )
            else:
                out.append((s[4], s[4].diagnostic(f"subnet {s[6]} overlaps {prev[6]} of the same network", s[5])))
        if prev is None or prev[0] != s[0] or prev[1] != s[1] or s[3] > prev[3]:
            prev = s
    return out


RULES: tuple[Rule, ...] = (duplicate_names, vlan_vxlan_clashes, overlapping_subnets)


def check(intents: Sequence[Intent]) -> list[Finding]:
    out: list[Finding] = []
    for rule in RULES:
        out.extend(rule(intents))
    return out
