"""macvlan (containernetworking/plugins): master, mode, mtu, mac, ipam."""

from __future__ import annotations

from typing import Any

from netcomp.backends import Backend, RenderInput, register
from netcomp.backends.common import ipam_config, ipam_plugins, meta
from netcomp.intent import Intent
from netcomp.intent.links import host_link, master
from netcomp.intent.model import MacvlanSpec


def context(intent: Intent, inp: RenderInput) -> dict[str, Any]:
    spec = intent.network.spec
    assert isinstance(spec, MacvlanSpec)
    return {
        "cniVersion": inp.cni_version,
        "name": intent.name,
        "spec": spec,
        "master": master(spec),
        "ipam": ipam_config(spec.ipam),
        "meta": meta(intent, hostLink=host_link(spec)),
    }


def plugins(intent: Intent, inp: RenderInput) -> list[str]:
    spec = intent.network.spec
    assert isinstance(spec, MacvlanSpec)
    return ["macvlan", *ipam_plugins(spec.ipam)]


BACKEND = register(Backend("macvlan", "macvlan.json.j2", context, plugins))
