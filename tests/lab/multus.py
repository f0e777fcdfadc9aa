"""Multus's side of a cluster as the Multus tests make it in the tests' API server: NetworkAttachmentDefinitions
(with the configs they carry: a bridge, one with portmap and bandwidth, a ptp), a netcomp Network object, and a
node (a daemon lab following the cluster) that serves them with the real plugins."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.lab.daemonlab import DaemonLab, kube_lab, wait_for
from tests.lab.kubeapi import NETS, ApiServer

NAD = ("k8s.cni.cncf.io", "v1")
NADS = "network-attachment-definitions"


def intent_obj(name: str) -> dict[str, Any]:
    """A netcomp Network object's head; its spec is the caller's."""
    return {"apiVersion": "netcomp.io/v1", "kind": "Network", "metadata": {"name": name}}


def nad(ns: str, name: str, config: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"config": json.dumps(config)},
    }


def bridge(dev: str, subnet: str, base: Path, **extra: Any) -> dict[str, Any]:
    ipam = {"type": "host-local", "subnet": subnet, "dataDir": f"{base}/ipam"}
    return {
        "cniVersion": "1.0.0",
        "name": dev,
        "type": "bridge",
        "bridge": dev,
        "isGateway": True,
        "ipam": ipam,
        **extra,
    }


def shaped(base: Path) -> dict[str, Any]:
    """A bridge with portmap and bandwidth, both declaring their capabilities (as Multus's docs write them)."""
    return {
        "cniVersion": "1.0.0",
        "name": "shaped",
        "plugins": [
            {k: v for k, v in bridge("ncsh0", "10.91.0.0/24", base).items() if k not in ("cniVersion", "name")},
            {"type": "portmap", "capabilities": {"portMappings": True}},
            {"type": "bandwidth", "capabilities": {"bandwidth": True}},
        ],
    }


def dual(base: Path) -> dict[str, Any]:
    """A bridge whose pods get an IPv4 and an IPv6 address (host-local, a range of each family)."""
    ipam = {"type": "host-local", "ranges": [[{"subnet": "10.94.0.0/24"}], [{"subnet": "fd94::/64"}]],
            "dataDir": f"{base}/ipam"}  # fmt: skip
    return {"cniVersion": "1.0.0", "name": "dual", "type": "bridge", "bridge": "ncdu0", "ipam": ipam}


def ptp(base: Path) -> dict[str, Any]:
    """ptp: a plugin that sets no MAC a pod asks for (reads neither the capability nor CNI_ARGS MAC)."""
    ipam = {"type": "host-local", "subnet": "10.92.0.0/24", "dataDir": f"{base}/ipam"}
    return {"cniVersion": "1.0.0", "name": "p2p", "type": "ptp", "ipam": ipam}


@contextlib.contextmanager
def multus_lab(api: ApiServer, admin: Any, base: Path) -> Iterator[DaemonLab]:
    """A node of the lab's networks (mgmt the default, storage and backup macvlan on host-local, signal ipvlan), a
    cluster pool network (pool), and these definitions, all followed from the cluster: kube-system/gw-net (the
    default gateway's bridge), team-a/fast and team-b/fast (one name in two namespaces), team-a/shaped,
    team-a/p2p, team-a/dual (a dual-stack bridge). The namespaces are the `admin` fixture's."""
    from kubernetes import client

    custom = client.CustomObjectsApi(admin)
    defs = [
        ("kube-system", "gw-net", bridge("ncgw0", "10.88.0.0/24", base, isDefaultGateway=True)),
        ("team-a", "fast", bridge("ncfa0", "10.89.0.0/24", base)),
        ("team-b", "fast", bridge("ncfb0", "10.90.0.0/24", base)),
        ("team-a", "shaped", shaped(base)),
        ("team-a", "p2p", ptp(base)),
        ("team-a", "dual", dual(base)),
    ]
    for ns, name, config in defs:
        custom.create_namespaced_custom_object(*NAD, ns, NADS, nad(ns, name, config))
    pool = {"type": "macvlan", "hostDevice": "ncm0", "ipam": {"type": "cluster", "subnet": "10.86.0.0/24"}}
    custom.create_cluster_custom_object(*NETS, {**intent_obj("pool"), "spec": pool})
    with kube_lab(base, api.node_kubeconfig, networkAttachmentDefinitions=True) as dl:
        keys = ["kube-system.gw-net", "team-a.fast", "team-b.fast", "team-a.shaped", "team-a.p2p", "team-a.dual",
                "pool"]  # fmt: skip
        wait_for(dl, lambda: all(k in dl.daemon.state.networks() for k in keys), "the definitions compiled")
        yield dl
