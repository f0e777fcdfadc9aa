"""Services on secondary networks in the tests: the cluster of the Service tests in the tests' API server (a
namespace, two Nodes, a pool network and a DanmNet the Services select on), nodes following it, its Services and
pods, and the EndpointSlices the nodes write as a view ({node: [(pod, address, ready)]}), waited for with a watch;
and a node's ServiceSlices in process over any API client (slices_of)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.lab.daemonlab import DaemonLab, kube_lab, wait_for
from tests.lab.danm import DANM_GROUP, danmnet
from tests.lab.kubeapi import NETS, ApiServer
from tests.lab.labpods import cni_args, status_of

NS = "vnf"
ES = ("discovery.k8s.io", "v1beta1")
NODES = ("node-a", "node-b")
View = dict[str, list[tuple[str, str, bool]]]  # node -> (pod, address, ready) of its slices


def make_service_networks(admin: Any) -> None:
    """The Service tests' cluster: namespace vnf, Nodes node-a and node-b (no kubelet registers them here), ext (a
    cluster pool Network), vnf/internal (a DanmNet)."""
    from kubernetes import client

    core, custom = client.CoreV1Api(admin), client.CustomObjectsApi(admin)
    core.create_namespace({"metadata": {"name": NS}})
    for node in NODES:  # the Nodes the pods are bound to
        core.create_node({"metadata": {"name": node}})
    ipam = {"type": "cluster", "subnet": "10.66.0.0/24"}
    ext = {"apiVersion": "netcomp.io/v1", "kind": "Network", "metadata": {"name": "ext"}}
    custom.create_cluster_custom_object(*NETS, {**ext, "spec": {"type": "macvlan", "hostDevice": "ncm0", "ipam": ipam}})
    internal = danmnet("internal", NS, "10.67.0.0/24", container_prefix="int")
    custom.create_namespaced_custom_object(*DANM_GROUP, NS, "danmnets", internal)


@contextlib.contextmanager
def service_node(api: ApiServer, base: Path, name: str) -> Iterator[DaemonLab]:
    """A node following the Service tests' cluster (its networks compiled), named `name`, in `base`."""
    base.mkdir()
    settings = {"nodeName": name, "ipamGrace": 2.0}
    with kube_lab(base, api.node_kubeconfig, danm=True, settings=settings) as dl:
        wait_for(dl, lambda: {"ext", f"{NS}.internal"} <= set(dl.daemon.state.networks()), "the networks compiled")
        yield dl


def service(core: Any, name: str, notes: dict[str, str], ports: list[dict[str, Any]]) -> dict[str, Any]:
    body = {"metadata": {"name": name, "annotations": notes}, "spec": {"clusterIP": "None", "ports": ports}}
    return core.create_namespaced_service(NS, body).to_dict()  # type: ignore[no-any-return]


def make_pod(core: Any, dl: DaemonLab, name: str, labels: dict[str, str], notes: dict[str, str]) -> dict[str, Any]:
    body = {
        "metadata": {"name": name, "labels": labels, "annotations": notes},
        "spec": {"nodeName": dl.settings.nodeName, "containers": [{"name": "c", "image": "registry.invalid/none"}]},
    }
    created = core.create_namespaced_pod(NS, body)
    return {"ns": NS, "name": name, "uid": created.metadata.uid}


def attach_to(admin: Any, dl: DaemonLab, p: dict[str, Any], network: str) -> tuple[str, str]:
    """ADD the pod's sandbox; (container, its address on `network`), read from its namespace and matched
    against the network-status the node wrote."""
    ctr = dl.lab.container()
    rc, res = dl.shim("ADD", ctr, args=cni_args(p, ctr))
    assert rc == 0, res
    [entry] = [s for s in status_of(admin, dl, p) if s["name"] == network]
    [addr] = [a.split("/")[0] for a in dl.lab.addrs(ctr, entry["interface"])]
    assert entry["ips"] == [addr]
    return ctr, addr


def delete_service(core: Any, name: str) -> None:
    # Kubernetes 1.20 answers a Service's DELETE with a Status, which the client would read as a Service.
    core.delete_namespaced_service(name, NS, _preload_content=False)


def view_of(items: list[dict[str, Any]], svc: str) -> View:
    out: View = {}
    for s in items:
        meta = s["metadata"]
        if meta["labels"].get("kubernetes.io/service-name") != svc:
            continue
        node = meta["labels"]["netcomp.io/node"]
        assert meta["name"].startswith(f"{svc}.{node}.v4") and meta["annotations"]["netcomp.io/node"] == node
        for e in s.get("endpoints") or []:
            assert e["topology"] == {"kubernetes.io/hostname": node}  # each node writes its own pods only
            out.setdefault(node, []).append((e["targetRef"]["name"], e["addresses"][0], e["conditions"]["ready"]))
    return {n: sorted(v) for n, v in out.items()}


def wait_view(custom: Any, svc: str, want: View, timeout: float = 60) -> list[dict[str, Any]]:
    """Until the slices of `svc` say `want`: listed, then watched (no sleep), or fail showing what they say."""
    from kubernetes import watch

    deadline = time.monotonic() + timeout
    doc = custom.list_namespaced_custom_object(*ES, NS, "endpointslices")
    items = {s["metadata"]["name"]: s for s in doc["items"]}
    rv = doc["metadata"]["resourceVersion"]
    while view_of(list(items.values()), svc) != want:
        left = deadline - time.monotonic()
        assert left > 0, f"slices of {svc}: {view_of(list(items.values()), svc)}, not {want}"
        w = watch.Watch()
        for ev in w.stream(custom.list_namespaced_custom_object, *ES, NS, "endpointslices", resource_version=rv,
                           timeout_seconds=max(1, int(left))):  # fmt: skip
            obj = ev["object"]
            rv = obj["metadata"]["resourceVersion"]
            if ev["type"] == "DELETED":
                items.pop(obj["metadata"]["name"], None)
            else:
                items[obj["metadata"]["name"]] = obj
            if view_of(list(items.values()), svc) == want:
                w.stop()
    return list(items.values())


def slices_of(core: Any, tmp: Path, **kw: Any) -> Any:
    """A node's ServiceSlices (node n1) over `core` as its API client for everything, in process, its records in
    `tmp`; (the slices, their metrics). `kw`: more of ServiceSlices' arguments."""
    from netcomp.cluster.podwatch import PodWatch
    from netcomp.cluster.services import ServiceSlices
    from netcomp.metrics import Metrics
    from netcomp.records.files import Records
    from netcomp.settings import KubeSettings

    kube, metrics = KubeSettings(), Metrics()
    pods = PodWatch(core, kube, "n1", metrics, str)
    return ServiceSlices(core, core, kube, "n1", metrics, pods, Records(tmp), **kw), metrics
