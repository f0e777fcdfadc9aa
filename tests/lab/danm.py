"""DANM's network objects as the tests create them in the API server (tests/lab/kubeapi.py installs DANM's
CRDs), and the annotation a pod asks for DANM's networks in."""

from __future__ import annotations

from typing import Any

DANM_API = "danm.k8s.io/v1"
DANM_GROUP = ("danm.k8s.io", "v1")
DANM = "danm.k8s.io/interfaces"  # the pod's annotation


def danmnet(name: str, ns: str | None, cidr: str | None, kind: str = "DanmNet", **opts: Any) -> dict[str, Any]:
    """A macvlan DanmNet (or kind's ClusterNetwork or TenantNetwork: the same spec) on ncm0 unless opts name
    another host_device; ns None for a cluster-scoped ClusterNetwork. NetworkID is the name cut to DANM's 10
    characters."""
    options: dict[str, Any] = {"host_device": "ncm0", **opts}
    if cidr:
        options["cidr"] = cidr
    meta = {"name": name, **({"namespace": ns} if ns else {})}
    spec = {"NetworkID": name[:10], "NetworkType": "macvlan", "Options": options}
    return {"apiVersion": DANM_API, "kind": kind, "metadata": meta, "spec": spec}
