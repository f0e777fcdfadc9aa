"""The host links netcomp creates for a network (a VLAN or VXLAN master over hostDevice) and their names:
facts of the intent, used by the rules and by the backends alike."""

from __future__ import annotations

from typing import Any

from netcomp.intent.model import IpvlanSpec, MacvlanSpec
from netcomp.names import IFNAMSIZ


def vlan_link_name(device: str, vlan: int) -> str:
    """`<dev>.<vlan>`; a device name too long for that is cut so the whole stays within 15 characters
    (rules.py rejects two networks whose cut names collide)."""
    suffix = f".{vlan}"
    return device[: IFNAMSIZ - len(suffix)] + suffix


def vxlan_link_name(vni: int) -> str:
    return f"vx{vni}"


def host_link(spec: MacvlanSpec | IpvlanSpec) -> dict[str, Any] | None:
    """The host interface the daemon creates and owns for this network, or None when hostDevice is used as is."""
    if spec.vlan is not None:
        return {
            "kind": "vlan",
            "name": vlan_link_name(spec.hostDevice, spec.vlan),
            "link": spec.hostDevice,
            "id": spec.vlan,
        }
    if spec.vxlan is not None:
        vx = spec.vxlan
        link: dict[str, Any] = {
            "kind": "vxlan",
            "name": vxlan_link_name(vx.vni),
            "link": spec.hostDevice,
            "vni": vx.vni,
            "port": vx.port,
        }
        link.update({k: str(v) for k, v in (("group", vx.group), ("remote", vx.remote)) if v is not None})
        return link
    return None


def master(spec: MacvlanSpec | IpvlanSpec) -> str:
    link = host_link(spec)
    return str(link["name"]) if link else spec.hostDevice
