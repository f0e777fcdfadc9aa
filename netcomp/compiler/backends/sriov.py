"""sriov (k8snetworkplumbingwg/sriov-cni), with sriov-cni's field names. A fixed VF is `deviceID`; a VF pool
(resourceName) goes into the netcomp block, and the daemon sets deviceID to a free VF of it at attach time."""

from __future__ import annotations

from typing import Any

from netcomp.compiler.backends.backend import Backend, RenderInput
from netcomp.compiler.backends.ipamconf import ipam_config, pool
from netcomp.compiler.marker import meta
from netcomp.intent.intent import Intent
from netcomp.intent.model import SriovSpec


def context(intent: Intent, inp: RenderInput) -> dict[str, Any]:
    spec = intent.network.spec
    assert isinstance(spec, SriovSpec)
    return {
        "cniVersion": inp.cni_version,
        "name": intent.name,
        "spec": spec,
        "ipam": ipam_config(spec.ipam),
        "meta": meta(intent, resourceName=spec.resourceName, pool=pool(spec.ipam)),
    }


BACKEND = Backend("sriov", "sriov.json.j2", context)
