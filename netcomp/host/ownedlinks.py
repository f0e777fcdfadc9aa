"""This module makes, and removes, the VLAN or VXLAN master links compiled networks name in `netcomp.hostLink`
(`eth1.120`, `vx5000` over eth1), with pyroute2. A link it makes carries the alias `netcomp:owned`, and only such
links are ever removed (delegate.delegator.Delegator.gc_host_links); a link of that name that is something else is
never touched, and one the operator made with the right kind and id is used as it is."""

from __future__ import annotations

import ipaddress
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from netcomp.errors import DelegateError, HostError, LinkMismatch
from netcomp.host import rtnl

log = logging.getLogger("netcomp.host")
_lock = threading.Lock()  # one creator at a time: two ADDs for the same network must not race to create it
EEXIST, ENOTSUP, ENODEV = 17, 95, 19
_MODULE = {"vlan": "8021q", "vxlan": "vxlan"}
OWNER_ALIAS = "netcomp:owned"


@dataclass(frozen=True)
class _Found:
    index: int
    kind: str
    data: Mapping[str, Any]  # IFLA_INFO_DATA attributes
    parent: int | None  # IFLA_LINK (vlan) or IFLA_VXLAN_LINK (vxlan)
    owned: bool


def _describe(msg: Any) -> _Found:
    info = msg.get_attr("IFLA_LINKINFO")
    kind = info.get_attr("IFLA_INFO_KIND") if info is not None else None
    data = info.get_attr("IFLA_INFO_DATA") if info is not None else None
    attrs = dict(data["attrs"]) if data is not None else {}
    parent = attrs.get("IFLA_VXLAN_LINK") if kind == "vxlan" else msg.get_attr("IFLA_LINK")
    owned = msg.get_attr("IFLA_IFALIAS") == OWNER_ALIAS
    return _Found(msg["index"], kind or "", attrs, parent, owned)


def _find(ipr: Any, name: str) -> _Found | None:
    idx = ipr.link_lookup(ifname=name)
    return _describe(ipr.get_links(idx[0])[0]) if idx else None


def _matches(link: Mapping[str, Any], found: _Found, parent: int) -> bool:
    if found.kind != link["kind"] or found.parent != parent:
        return False
    if found.kind == "vlan":
        return bool(found.data.get("IFLA_VLAN_ID") == link["id"])
    return bool(
        found.data.get("IFLA_VXLAN_ID") == link["vni"]
        and found.data.get("IFLA_VXLAN_PORT", 4789) == int(link.get("port", 4789))
        and _addr(found.data.get("IFLA_VXLAN_GROUP") or found.data.get("IFLA_VXLAN_GROUP6"))
        == _addr(link.get("group") or link.get("remote"))
    )


def _addr(value: object) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(str(value)) if value else None
    except ValueError:
        return None


def _ipr(netns: str | None) -> Any:
    # pyroute2 is imported only when a link is to be made or removed: a daemon that makes none never loads it.
    from pyroute2 import IPRoute, NetNS

    return NetNS(netns) if netns else IPRoute()


def ensure(link: Mapping[str, Any], netns: str | None = None) -> bool:
    """Make the link (in the named network namespace, or the daemon's own) unless it is there already; bring it
    up. Returns whether it was created. Raises HostError with what the operator should do."""
    name, kind, parent_name = str(link["name"]), str(link["kind"]), str(link["link"])
    if kind not in _MODULE:
        raise HostError(f"unknown host link kind {kind!r} for {name}")
    from pyroute2 import NetlinkError

    with _lock, _ipr(netns) as ipr:
        parent = ipr.link_lookup(ifname=parent_name)
        if not parent:
            raise HostError(f"host device {parent_name} (the parent of {kind} link {name}) does not exist")
        found = _find(ipr, name)
        created = False
        if found is not None:
            idx = found.index
            if not _matches(link, found, parent[0]):
                wanted = f"{kind} {link.get('id', link.get('vni'))} on {parent_name}"
                if found.owned:
                    raise LinkMismatch(
                        f"{name} was made by netcomp with other settings than this network needs ({wanted}) and "
                        "is still used by attached containers; it is replaced once they are detached",
                        owned=True,
                    )
                raise LinkMismatch(
                    f"{name} exists but is not the {kind} link this network needs ({wanted}); netcomp leaves it alone",
                    owned=False,
                )
        else:
            spec: dict[str, Any] = {"ifname": name, "kind": kind}
            if kind == "vlan":
                spec.update(link=parent[0], vlan_id=int(link["id"]))
            else:
                spec.update(vxlan_id=int(link["vni"]), vxlan_link=parent[0], vxlan_port=int(link.get("port", 4789)))
                group = _addr(link.get("group") or link.get("remote"))
                if group is not None:
                    spec["vxlan_group6" if group.version == 6 else "vxlan_group"] = str(group)
            try:
                ipr.link("add", **spec)
                created = True
            except NetlinkError as e:
                if e.code == ENOTSUP:
                    raise HostError(
                        f"cannot create {kind} link {name} on {parent_name}: the kernel does not support "
                        f"{kind} (Operation not supported); load the {_MODULE[kind]} module"
                    ) from None
                if e.code != EEXIST:
                    raise HostError(f"cannot create {kind} link {name} on {parent_name}: {e.args[1]}") from None
            idx = ipr.link_lookup(ifname=name)[0]
            if created:
                try:
                    ipr.link("set", index=idx, ifalias=OWNER_ALIAS)
                except NetlinkError as e:  # not fatal: the link works, netcomp just will not remove it later
                    log.warning("cannot mark %s as netcomp's (it will not be removed when unused): %s", name, e)
        try:
            ipr.link("set", index=idx, state="up")
        except NetlinkError as e:
            raise HostError(f"cannot bring {name} up: {e.args[1]}") from None
        if created:
            log.info("made host link %s (%s on %s)", name, kind, parent_name)
        return created


def owned(netns: str | None = None) -> set[str]:
    """The names of the links netcomp made that exist now (one rtnetlink dump: host/rtnl.py)."""
    try:
        return {name for name, alias in rtnl.links(netns) if alias == OWNER_ALIAS}
    except HostError:
        raise
    except (OSError, DelegateError) as e:
        raise HostError(f"cannot list host links: {e}") from None


def remove(name: str, netns: str | None = None) -> bool:
    """Delete a link netcomp made; anything else of that name is left alone. Whether it was removed."""
    from pyroute2 import NetlinkError

    with _lock, _ipr(netns) as ipr:
        found = _find(ipr, name)
        if found is None or not found.owned:
            return False
        try:
            ipr.link("del", index=found.index)
        except NetlinkError as e:
            if e.code == ENODEV:
                return False
            raise HostError(f"cannot remove host link {name}: {e.args[1]}") from None
        log.info("removed host link %s: no network names it and no container uses it", name)
        return True
