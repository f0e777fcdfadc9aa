"""The host links netcomp owns: the VLAN or VXLAN master a compiled network names in its `netcomp.hostLink` block
(for example `eth1.120`, or `vx5000` over eth1). Made with pyroute2 before the first delegate of an ADD that
needs one, and brought up; a link of that name that exists but is something else is never touched."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from pyroute2 import IPRoute, NetlinkError, NetNS

from netcomp.errors import HostError

_lock = threading.Lock()  # one creator at a time: two ADDs for the same network must not race to create it
EEXIST, ENOTSUP, ENODEV = 17, 95, 19
_MODULE = {"vlan": "8021q", "vxlan": "vxlan"}


def _kind_data(ipr: Any, name: str) -> tuple[str, Mapping[str, Any], int] | None:
    idx = ipr.link_lookup(ifname=name)
    if not idx:
        return None
    link = ipr.get_links(idx[0])[0]
    info = link.get_attr("IFLA_LINKINFO")
    kind = info.get_attr("IFLA_INFO_KIND") if info is not None else None
    data = info.get_attr("IFLA_INFO_DATA") if info is not None else None
    attrs = dict(data["attrs"]) if data is not None else {}
    return kind or "", attrs, idx[0]


def _matches(link: Mapping[str, Any], kind: str, attrs: Mapping[str, Any]) -> bool:
    if kind != link["kind"]:
        return False
    if kind == "vlan":
        return bool(attrs.get("IFLA_VLAN_ID") == link["id"])
    return bool(attrs.get("IFLA_VXLAN_ID") == link["vni"])


def ensure(link: Mapping[str, Any], netns: str | None = None) -> bool:
    """Make the link (in the named network namespace, or the daemon's own) unless it is there already; bring it
    up. Returns whether it was created. Raises HostError with what the operator should do."""
    name, kind, parent_name = str(link["name"]), str(link["kind"]), str(link["link"])
    if kind not in _MODULE:
        raise HostError(f"unknown host link kind {kind!r} for {name}")
    with _lock, NetNS(netns) if netns else IPRoute() as ipr:
        parent = ipr.link_lookup(ifname=parent_name)
        if not parent:
            raise HostError(f"host device {parent_name} (the parent of {kind} link {name}) does not exist")
        found = _kind_data(ipr, name)
        created = False
        if found is not None:
            fkind, attrs, idx = found
            if not _matches(link, fkind, attrs):
                raise HostError(
                    f"{name} exists but is not the {kind} link this network needs "
                    f"({kind} {link.get('id', link.get('vni'))} on {parent_name}); netcomp leaves it alone"
                )
        else:
            spec: dict[str, Any] = {"ifname": name, "kind": kind}
            if kind == "vlan":
                spec.update(link=parent[0], vlan_id=int(link["id"]))
            else:
                spec.update(vxlan_id=int(link["vni"]), vxlan_link=parent[0], vxlan_port=int(link.get("port", 4789)))
                if link.get("group") or link.get("remote"):
                    spec["vxlan_group"] = str(link.get("group") or link.get("remote"))
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
        try:
            ipr.link("set", index=idx, state="up")
        except NetlinkError as e:
            raise HostError(f"cannot bring {name} up: {e.args[1]}") from None
        return created
