"""Several netcomp daemons, one per node name, each serving a lab netns of its own and following one real
kube-apiserver (tests/lab/kubeapi.py) with the node's credentials; a Network object they share; what their
caches and the cluster's objects say of the addresses in use."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from netcomp.kube.group import NODE, node_label
from tests.lab.addrs import BLOCKS, in_use
from tests.lab.daemonlab import DaemonLab, kube_lab, wait_for
from tests.lab.kubeapi import NETS, ApiServer


def network(name: str, subnet: str, **ipam: Any) -> dict[str, Any]:
    spec = {"type": "macvlan", "hostDevice": "ncm0", "ipam": {"type": "cluster", "subnet": subnet, **ipam}}
    return {"apiVersion": "netcomp.io/v1", "kind": "Network", "metadata": {"name": name}, "spec": spec}


@contextlib.contextmanager
def shared_network(custom: Any, obj: dict[str, Any]) -> Iterator[None]:
    custom.create_cluster_custom_object(*NETS, obj)
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            custom.delete_cluster_custom_object(*NETS, obj["metadata"]["name"])


def claims(custom: Any, net: str | None = None) -> list[dict[str, Any]]:
    return in_use(custom, net)


def flushed(labs: list[DaemonLab]) -> None:
    """Every node's writes behind done: the cluster's record is the nodes' own."""
    for dl in labs:
        assert dl.daemon.addresses.flush(30), dl.daemon.settings.nodeName


@contextlib.contextmanager
def nodes(base: Path, api: ApiServer, names: list[str], net: str, **extra: Any) -> Iterator[list[DaemonLab]]:
    """A daemon per node name, each in a lab of its own, all following the cluster, waiting until each has
    compiled `net`."""
    with contextlib.ExitStack() as stack:
        labs = []
        for name in names:
            (base / name).mkdir()
            settings = {"nodeName": name, "defaultNetwork": None, "ipamGrace": 2.0, **extra}
            dl = stack.enter_context(kube_lab(base / name, api.node_kubeconfig, settings=settings))
            wait_for(dl, lambda d=dl: net in d.daemon.state.networks(), f"{name} compiling {net}")
            labs.append(dl)
        yield labs


def addresses(dl: DaemonLab, ctr: str, ifname: str = "net0") -> list[str]:
    return [a.split("/")[0] for a in dl.lab.addrs(ctr, ifname)]


def cached_claims(labs: list[DaemonLab]) -> set[tuple[str, str, str]]:
    """(address, node, container) of every claim the daemons' cache entries record."""
    out = set()
    for dl in labs:
        for e in dl.daemon.records.entries():
            for a in e.attachments:
                out.update((c["address"], c["node"], c["container_id"]) for c in a.claims)
    return out


def object_claims(custom: Any, net: str) -> set[tuple[str, str, str]]:
    return {(o["spec"]["address"], o["spec"]["node"], o["spec"]["containerID"]) for o in claims(custom, net)}


def only_own(custom: Any, labs: list[DaemonLab]) -> None:
    """Each node's view holds only blocks labelled with its name: it never took in another node's."""
    for dl in labs:
        node = dl.daemon.settings.nodeName
        mine = custom.list_cluster_custom_object(*BLOCKS, label_selector=f"{NODE}={node_label(node)}")["items"]
        alloc = dl.daemon.addresses.blocks
        assert alloc is not None and set(alloc.view) <= {b["metadata"]["name"] for b in mine}, node
