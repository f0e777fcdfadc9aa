"""A pod's side of an attachment, when the node has a cluster: the networks its annotation asks for (read through
`Pods`, which daemon.kube.Cluster implements) and the k8s.v1.cni.cncf.io/network-status written back."""

from __future__ import annotations

from typing import Any, Protocol

from netcomp.cni import result as cniresult
from netcomp.cni.cache import Attachment
from netcomp.cni.spec import DEFAULT_VERSION
from netcomp.delegate import select


class Pods(Protocol):
    """The cluster's side of a pod (daemon.kube.Cluster): the networks its annotation asks for, and where its
    network status is written back."""

    def networks_annotation(self, pod: select.PodRef) -> str | None:
        """The pod's k8s.v1.cni.cncf.io/networks annotation; None when it has none. HostError when the API
        server cannot answer."""
        ...

    def report(self, pod: select.PodRef, status: list[dict[str, Any]]) -> None:
        """Write k8s.v1.cni.cncf.io/network-status (best-effort; errors are logged, never raised)."""
        ...


def network_status(atts: list[Attachment], runtime_ifname: str) -> list[dict[str, Any]]:
    """Multus's k8s.v1.cni.cncf.io/network-status entries: per attachment its network, interface, addresses,
    MAC and DNS, the one on the runtime's interface marked default."""
    out: list[dict[str, Any]] = []
    for a in atts:
        r = cniresult.convert(a.result or {"cniVersion": DEFAULT_VERSION}, DEFAULT_VERSION)
        ifaces = r.get("interfaces") or []
        idx = next((i for i, f in enumerate(ifaces) if f.get("name") == a.ifname and f.get("sandbox")), None)
        entry: dict[str, Any] = {
            "name": a.network,
            "interface": a.ifname,
            "ips": [
                str(ip["address"]).split("/")[0]
                for ip in r.get("ips") or []
                if "address" in ip and (idx is None or ip.get("interface", idx) == idx)
            ],
        }
        if idx is not None and ifaces[idx].get("mac"):
            entry["mac"] = ifaces[idx]["mac"]
        if a.ifname == runtime_ifname:
            entry["default"] = True
        if r.get("dns"):
            entry["dns"] = r["dns"]
        out.append(entry)
    return out
