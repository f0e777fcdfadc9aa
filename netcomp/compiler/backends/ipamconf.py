"""What the backends share: a plugin's IPAM section, and the pool of netcomp's own allocator (ipam: {type:
cluster}) for the `netcomp` block (marker.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from netcomp.intent.model import (
    DHCPIPAM,
    IPAM,
    ClusterIPAM,
    HostLocalIPAM,
    IPRange,
    NoIPAM,
    Route,
    StaticIPAM,
    WhereaboutsIPAM,
)


def _span(r: IPRange, keys: tuple[str, str, str]) -> dict[str, Any]:
    """A range's subnet and bounds under the names a plugin uses for them."""
    out: dict[str, Any] = {keys[0]: str(r.subnet)}
    if r.rangeStart is not None:
        out[keys[1]] = str(r.rangeStart)
    if r.rangeEnd is not None:
        out[keys[2]] = str(r.rangeEnd)
    return out


def _range(r: IPRange) -> dict[str, Any]:
    return {**_span(r, ("subnet", "rangeStart", "rangeEnd")), "gateway": str(r.effective_gateway)}


def _excluding(r: IPRange, out: dict[str, Any]) -> dict[str, Any]:
    """`out` with the range's `exclude` (whereabouts and netcomp's pools have one)."""
    if r.exclude:
        out["exclude"] = [str(e) for e in r.exclude]
    return out


def _routes(routes: list[Route], gateways: dict[int, str]) -> list[dict[str, str]]:
    # Every route carries an explicit gw: the reference plugins' CHECK fails on a route without one.
    return [{"dst": str(r.dst), "gw": str(r.gw) if r.gw is not None else gateways[r.dst.version]} for r in routes]


def _gateways(ranges: list[IPRange]) -> dict[int, str]:
    gws: dict[int, str] = {}
    for r in ranges:
        gws.setdefault(r.subnet.version, str(r.effective_gateway))
    return gws


def _range_sets(ranges: list[IPRange], one: Any = None) -> list[list[dict[str, Any]]]:
    """One range set per address family, v4 first: a container gets one address of each family it has ranges
    for (host-local's `ranges`, and netcomp's cluster pools)."""
    sets: dict[int, list[dict[str, Any]]] = {}
    for r in ranges:
        sets.setdefault(r.subnet.version, []).append((one or _range)(r))
    return [sets[v] for v in sorted(sets)]


def _host_local(ipam: HostLocalIPAM) -> dict[str, Any]:
    ranges = ipam.all_ranges()
    out: dict[str, Any] = {"type": "host-local", "ranges": _range_sets(ranges)}
    if ipam.routes:
        out["routes"] = _routes(ipam.routes, _gateways(ranges))
    if ipam.dataDir is not None:
        out["dataDir"] = ipam.dataDir
    return out


def _whereabouts_range(r: IPRange) -> dict[str, Any]:
    return _excluding(r, _span(r, ("range", "range_start", "range_end")))


def _whereabouts(ipam: WhereaboutsIPAM) -> dict[str, Any]:
    ranges = ipam.all_ranges()
    out: dict[str, Any] = {"type": "whereabouts"}
    if len(ranges) == 1:
        out.update(_whereabouts_range(ranges[0]))
        out["gateway"] = str(ranges[0].effective_gateway)
    else:
        out["ipRanges"] = [_whereabouts_range(r) for r in ranges]
    if ipam.routes:
        out["routes"] = _routes(ipam.routes, _gateways(ranges))
    return out


def _static(ipam: StaticIPAM) -> dict[str, Any]:
    addrs = []
    gws: dict[int, str] = {}
    for a in ipam.addresses:
        entry = {"address": str(a.address)}
        if a.gateway is not None:
            entry["gateway"] = str(a.gateway)
            gws.setdefault(a.gateway.version, str(a.gateway))
        addrs.append(entry)
    out: dict[str, Any] = {"type": "static"}
    if addrs:
        out["addresses"] = addrs
    if ipam.routes:
        out["routes"] = _routes(ipam.routes, gws)
    return out


def _cluster(ipam: ClusterIPAM) -> dict[str, Any]:
    """The delegate's part of a cluster network: the static plugin, whose addresses the daemon fills in at ADD
    with the ones it claimed (the pool itself is in the netcomp block: pool())."""
    out: dict[str, Any] = {"type": "static"}
    if ipam.routes:
        out["routes"] = _routes(ipam.routes, _gateways(ipam.all_ranges()))
    return out


def pool(ipam: IPAM | None) -> dict[str, Any] | None:
    """The address pool the daemon allocates from, for the netcomp block (None unless the IPAM is cluster)."""
    if not isinstance(ipam, ClusterIPAM):
        return None
    out: dict[str, Any] = {
        "type": "cluster",
        "ranges": _range_sets(ipam.all_ranges(), lambda r: _excluding(r, _range(r))),
    }
    if ipam.blockSize is not None:
        out["blockSize"] = ipam.blockSize
    return out


# The plugin's `ipam` section of each IPAM model; NoIPAM has none.
_SECTIONS: dict[type, Callable[[Any], dict[str, Any]]] = {
    HostLocalIPAM: _host_local,
    ClusterIPAM: _cluster,
    WhereaboutsIPAM: _whereabouts,
    StaticIPAM: _static,
    DHCPIPAM: lambda _: {"type": "dhcp"},
}


def ipam_config(ipam: IPAM | None) -> dict[str, Any] | None:
    """The plugin's `ipam` section, or None for no IPAM at all."""
    return None if ipam is None or isinstance(ipam, NoIPAM) else _SECTIONS[type(ipam)](ipam)
