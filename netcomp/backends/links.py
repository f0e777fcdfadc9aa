"""macvlan and ipvlan (containernetworking/plugins): a link per container on a master, which is hostDevice or the
VLAN/VXLAN link the daemon creates over it. The two differ only in their template (macvlan has `mac` and other
modes); the context is the same."""

from __future__ import annotations

from typing import Any

from netcomp.backends import Backend, RenderInput, register
from netcomp.backends.common import ipam_config, ipam_plugins, meta
from netcomp.intent import Intent
from netcomp.intent.links import host_link, master
from netcomp.intent.model import IpvlanSpec, MacvlanSpec


def _spec(intent: Intent) -> MacvlanSpec | IpvlanSpec:
    spec = intent.network.spec
    assert isinstance(spec, MacvlanSpec | IpvlanSpec)
    return spec


def context(intent: Intent, inp: RenderInput) -> dict[str, Any]:
    spec = _spec(intent)
    return {
        "cniVersion": inp.cni_version,
        "name": intent.name,
        "spec": spec,
        "master": master(spec),
        "ipam": ipam_config(spec.ipam),
        "meta": meta(intent, hostLink=host_link(spec)),
    }


def plugins(intent: Intent, inp: RenderInput) -> list[str]:
    spec = _spec(intent)
    return [spec.type, *ipam_plugins(spec.ipam)]


MACVLAN = register(Backend("macvlan", "macvlan.json.j2", context, plugins))
IPVLAN = register(Backend("ipvlan", "ipvlan.json.j2", context, plugins))
