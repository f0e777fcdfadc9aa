"""macvlan and ipvlan (containernetworking/plugins): a link per container on a master, which is hostDevice or the
VLAN/VXLAN link the daemon creates over it. The two differ only in their template (macvlan has `mac` and other
modes); the context is the same."""

from __future__ import annotations

from typing import Any

from netcomp.compiler.backends.backend import Backend, RenderInput
from netcomp.compiler.backends.ipamconf import ipam_config, pool
from netcomp.compiler.marker import meta
from netcomp.intent.hostlink import host_link, master
from netcomp.intent.intent import Intent
from netcomp.intent.model import IpvlanSpec, MacvlanSpec


def context(intent: Intent, inp: RenderInput) -> dict[str, Any]:
    spec = intent.network.spec
    assert isinstance(spec, MacvlanSpec | IpvlanSpec)
    return {
        "cniVersion": inp.cni_version,
        "name": intent.name,
        "spec": spec,
        "master": master(spec),
        "ipam": ipam_config(spec.ipam),
        "meta": meta(intent, hostLink=host_link(spec), pool=pool(spec.ipam)),
    }


MACVLAN = Backend("macvlan", "macvlan.json.j2", context)
IPVLAN = Backend("ipvlan", "ipvlan.json.j2", context)
