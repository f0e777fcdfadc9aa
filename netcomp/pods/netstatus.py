"""This module is a pod's side of an attachment: `Pods` (cluster.podwatch.PodWatch) reads its annotations and
records what Multus records on a pod, the k8s.v1.cni.cncf.io/network-status that network_status() makes, and
events."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from netcomp.cni import result as cniresult
from netcomp.cni.spec import DEFAULT_VERSION
from netcomp.pods import asks, multus, naming
from netcomp.records.record import Attachment


class Pods(Protocol):
    """The cluster's side of a pod (cluster.podwatch.PodWatch)."""

    ask_rules: multus.AskRules

    def annotations(self, pod: naming.PodRef) -> Mapping[str, str]:
        """The pod's annotations netcomp reads (multus.ANNOTATIONS); {} for a pod the API server does not know.
        HostError when the API server cannot answer."""

    def latest(self, pod: naming.PodRef) -> Mapping[str, str] | None:
        """The pod's annotations netcomp reads as the node's watch last saw them; None when the watch does not
        have this pod (a hot-plug acts only on what the watch saw)."""

    def report(self, pod: naming.PodRef, status: list[dict[str, Any]]) -> None:
        """Write k8s.v1.cni.cncf.io/network-status, later (queued; errors are logged and counted, never raised)."""

    def event(self, pod: naming.PodRef, kind: str, reason: str, message: str) -> None:
        """Record an event on the pod, later (queued, best-effort)."""


def network_status(atts: list[Attachment], runtime_ifname: str) -> list[dict[str, Any]]:
    """Multus's k8s.v1.cni.cncf.io/network-status entries: per attachment its network (namespace/name for a
    definition), interface, addresses, MAC, default gateways and DNS, the one on the runtime's interface marked
    default; as the container has them (after a default-route moved them)."""
    out: list[dict[str, Any]] = []
    for a in atts:
        r = cniresult.convert(a.result or {"cniVersion": DEFAULT_VERSION}, DEFAULT_VERSION)
        ifaces = r.get("interfaces") or []
        idx = next((i for i, f in enumerate(ifaces) if f.get("name") == a.ifname and f.get("sandbox")), None)
        entry: dict[str, Any] = {
            "name": naming.display_name(a.network, a.conflist),
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
        gateways = asks.gateways_of(a)
        if gateways:
            entry["gateway"] = gateways
        if a.device and isinstance(a.device.get("info"), dict):
            entry["device-info"] = a.device["info"]  # the device-info spec's record of the device it was given
        out.append(entry)
    return out
