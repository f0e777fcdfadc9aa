"""This module reads and changes what netcomp itself touches in a container's network namespace after its plugins
ran: an interface's MAC and addresses, the default routes (as Multus moves them), DANM's policy routes, and what
a killed plugin left. Each call enters the namespace (nsenter.inside) and opens pyroute2 there."""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from dataclasses import dataclass
from typing import Any

from netcomp.host.nsenter import inside, open_netns

MAIN_TABLE = 254
FAMILIES = {4: socket.AF_INET, 6: socket.AF_INET6}
DEFAULT_DST = {4: "0.0.0.0/0", 6: "::/0"}


class RouteRefused(Exception):
    """The kernel refused a default route (a gateway not reachable on that interface): the request's fault."""

    def __init__(self, ifname: str, gateway: str, why: str) -> None:
        super().__init__(f"the kernel refused a default route via {gateway} on {ifname}: {why}")
        self.ifname, self.gateway, self.why = ifname, gateway, why


@dataclass(frozen=True)
class LinkState:
    mac: str | None  # lower case, colon separated
    addresses: tuple[str, ...]  # address/prefix, link-local IPv6 left out


@dataclass(frozen=True)
class DefaultRoute:
    """The default route of one address family on one interface: `gateway` set makes it (replacing what was
    there); None keeps the interface's own. Either way every other interface loses its default of that family."""

    family: int  # 4 or 6
    ifname: str
    gateway: str | None


def link_state(netns: str | int, ifname: str) -> LinkState | None:
    """The MAC and addresses of an interface in the namespace; None when there is no such interface."""

    def work() -> LinkState | None:
        from pyroute2 import IPRoute

        with IPRoute() as ipr:
            found = ipr.link_lookup(ifname=ifname)
            if not found:
                return None
            mac = ipr.get_links(found[0])[0].get("IFLA_ADDRESS")
            addrs = (
                ipaddress.ip_interface(f"{m.get('IFA_ADDRESS')}/{m['prefixlen']}") for m in ipr.get_addr(index=found[0])
            )
            kept = tuple(str(a) for a in addrs if not (a.version == 6 and a.ip.is_link_local))
            return LinkState(str(mac).lower() if mac else None, kept)

    return inside(netns, work, f"read interface {ifname}")


def set_default_routes(netns: str | int, routes: list[DefaultRoute]) -> None:
    """For each route given, remove the main table's default routes of its family through other interfaces, and
    put the one via `gateway` in place of its own. RouteRefused when the kernel will not have it."""

    def work() -> None:
        from pyroute2 import IPRoute, NetlinkError

        with IPRoute() as ipr:
            for want in routes:
                fam = FAMILIES[want.family]
                found = ipr.link_lookup(ifname=want.ifname)
                if not found:
                    raise RouteRefused(want.ifname, want.gateway or "-", "the interface is not there")
                index = found[0]
                for r in ipr.get_routes(family=fam, table=MAIN_TABLE):
                    if r["dst_len"] != 0 or (r.get("RTA_OIF") == index and want.gateway is None):
                        continue
                    _delete(ipr, fam, r)
                if want.gateway is not None:
                    try:
                        ipr.route("replace", family=fam, dst=DEFAULT_DST[want.family], gateway=want.gateway, oif=index)
                    except NetlinkError as e:
                        raise RouteRefused(want.ifname, want.gateway, _strerror(e)) from None

    inside(netns, work, "set the default routes")


@dataclass(frozen=True)
class PolicyRoutes:
    """DANM's proutes of one interface: a rule sending what comes from `source` (the interface's address with
    its network's prefix length) to `table`, and the routes in that table."""

    ifname: str
    table: int
    source: str  # address/prefix
    routes: tuple[tuple[str, str], ...]  # (destination CIDR, gateway)


def add_policy_routes(netns: str | int, wanted: list[PolicyRoutes]) -> None:
    """Add the rules and routes (a rule already there is kept). RouteRefused when the kernel will not have one."""

    def work() -> None:
        from pyroute2 import IPRoute, NetlinkError

        with IPRoute() as ipr:
            for w in wanted:
                found = ipr.link_lookup(ifname=w.ifname)
                if not found:
                    raise RouteRefused(w.ifname, "-", "the interface is not there")
                src = ipaddress.ip_interface(w.source)
                fam = FAMILIES[src.version]
                try:
                    ipr.rule("add", family=fam, src=str(src.ip), src_len=src.network.prefixlen, table=w.table)
                except NetlinkError as e:
                    if e.code != 17:  # EEXIST: the same rule (a retried ADD in the same namespace)
                        raise RouteRefused(
                            w.ifname, "-", f"rule from {w.source} table {w.table}: {_strerror(e)}"
                        ) from None
                for dst, gw in w.routes:
                    try:
                        ipr.route("replace", family=fam, dst=dst, gateway=gw, oif=found[0], table=w.table)
                    except NetlinkError as e:
                        raise RouteRefused(w.ifname, gw, f"route to {dst} in table {w.table}: {_strerror(e)}") from None

    inside(netns, work, "add policy routes")


def _delete(ipr: Any, fam: int, r: Any) -> None:
    from pyroute2 import NetlinkError

    try:
        ipr.route(
            "del",
            family=fam,
            dst_len=0,
            table=MAIN_TABLE,
            oif=r.get("RTA_OIF"),
            gateway=r.get("RTA_GATEWAY"),
            priority=r.get("RTA_PRIORITY"),
        )
    except NetlinkError as e:
        if e.code != 3:  # ESRCH: gone already
            raise OSError(e.code, _strerror(e)) from None


def _strerror(e: Exception) -> str:
    """pyroute2's NetlinkError carries (code, strerror)."""
    return str(e.args[1]) if len(e.args) > 1 else str(e)


def link_names(netns: str | int) -> set[str]:
    """Every interface name in the namespace."""
    return inside(netns, lambda: {name for _, name in socket.if_nameindex()}, "list links")


# What a plugin killed half-way can leave, and nothing else is: macvlan, ipvlan and vlan make their link in the
# container's namespace under a temporary name (libcni's RandomVethName: veth and 8 hex digits) before renaming it.
TEMP_NAME = re.compile(r"veth[0-9a-f]{8}")
TEMP_KINDS = {"macvlan", "macvtap", "ipvlan", "ipvtap", "vlan"}


def sweep(netns: str | int, names: set[str], home: str, devices: set[str]) -> list[str]:
    """Remove what a killed plugin left among `names` (new since its ADD began): delete a link of a kind such
    plugins make under a temporary name; move a device (no link kind) back to `home` only when an undone plugin
    was given it (`devices`: names and PCI addresses from their configs). Anything else (a workload's own tun) is
    left alone. Returns what was done, one line per interface."""
    home_fd, _ = open_netns(home)

    def work() -> list[str]:
        from pyroute2 import IPRoute, NetlinkError

        done = []
        with IPRoute() as ipr:
            for name in sorted(names):
                try:
                    found = ipr.link_lookup(ifname=name)
                    if not found:
                        continue
                    link = ipr.get_links(found[0])[0]
                    info = link.get("IFLA_LINKINFO")
                    kind = info.get("IFLA_INFO_KIND") if info is not None else None
                    if kind in TEMP_KINDS and TEMP_NAME.fullmatch(name):
                        ipr.link("del", index=found[0])
                        done.append(f"{name} ({kind}) deleted")
                    elif kind is None and {name, link.get("IFLA_PARENT_DEV_NAME")} & devices:
                        ipr.link("set", index=found[0], state="down")
                        ipr.link("set", index=found[0], net_ns_fd=home_fd)
                        done.append(f"{name} (a device) moved back")
                except NetlinkError as e:
                    done.append(f"{name}: {_strerror(e)}")
        return done

    try:
        return inside(netns, work, "remove interfaces a plugin left")
    finally:
        os.close(home_fd)
