"""Services on secondary networks against a real kube-apiserver and etcd (kubeapi.py): two daemons as two nodes,
each serving its own lab with the real plugins, the daemons with the packaged ClusterRole's rights only. A
Service in netcomp's spelling and one in DANM's: each node's EndpointSlice holds the addresses its pods have on
the network (read back from the pods' namespaces and their network-status), following pods created, made
ready, relabelled, deleted and moved to the other node, and the Service deleted; a daemon restarted, the API
server away and back, a slice deleted by hand, and another node's stale slices removed by the GC. The server is
Kubernetes 1.20: EndpointSlices are discovery.k8s.io/v1beta1 there (v1 is in tests/unit/test_service_slices.py)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from netcomp.daemon.daemon import Daemon
from tests.lab.daemonlab import DaemonLab
from tests.lab.kubeapi import ApiServer
from tests.lab.labpods import NETWORKS, cni_args
from tests.lab.services import ES, NS, attach_to, delete_service, make_pod, service, service_node, wait_view

pytestmark = pytest.mark.root


@pytest.fixture(scope="module")
def nodes(
    api: ApiServer, service_networks: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[DaemonLab]]:
    base = tmp_path_factory.mktemp("svc")
    with service_node(api, base / "a", "node-a") as a, service_node(api, base / "b", "node-b") as b:
        yield [a, b]


# ------------------------------------------------------------------------------------------------ helpers


def detach(dl: DaemonLab, ctr: str, p: dict[str, Any]) -> None:
    rc, res = dl.shim("DEL", ctr, args=cni_args(p, ctr))
    assert rc == 0, res


def ready(core: Any, p: dict[str, Any], is_ready: bool = True) -> None:
    cond = [{"type": "Ready", "status": "True" if is_ready else "False"}]
    core.patch_namespaced_pod_status(p["name"], NS, {"status": {"phase": "Running", "conditions": cond}})


def written(*labs: DaemonLab) -> None:
    for dl in labs:
        assert dl.daemon.cluster is not None and dl.daemon.cluster.slices is not None
        assert dl.daemon.cluster.slices.wait_written(30)


def known(dl: DaemonLab, p: dict[str, Any], cond: Callable[[bool], bool] = bool) -> None:
    """Until the node's pod follower has (or no longer has) the pod."""
    assert dl.daemon.cluster is not None
    pods = dl.daemon.cluster.pods
    with pods.changed:
        assert pods.changed.wait_for(lambda: cond(pods.has(NS, p["name"])), 30)


# ------------------------------------------------------------------------------------------------ netcomp's spelling


def test_a_service_follows_its_pods_across_two_nodes(
    core: Any, custom: Any, admin: Any, nodes: list[DaemonLab]
) -> None:
    a, b = nodes
    notes = {"netcomp.io/selector": "app=web", "netcomp.io/network": "ext"}
    svc = service(core, "web", notes, [{"name": "http", "port": 80, "targetPort": 8080}])
    on_ext = {NETWORKS: "ext"}
    a1 = make_pod(core, a, "web-a1", {"app": "web"}, on_ext)
    b1 = make_pod(core, b, "web-b1", {"app": "web"}, on_ext)
    db = make_pod(core, a, "db-a1", {"app": "db"}, on_ext)  # not selected
    ctr_a1, ip_a1 = attach_to(admin, a, a1, "ext")
    ctr_b1, ip_b1 = attach_to(admin, b, b1, "ext")
    attach_to(admin, a, db, "ext")
    items = wait_view(custom, "web", {"node-a": [("web-a1", ip_a1, False)], "node-b": [("web-b1", ip_b1, False)]})
    [sa] = [s for s in items if s["metadata"]["name"] == "web.node-a.v4"]
    assert sa["addressType"] == "IPv4" and sa["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]
    assert sa["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"] == "netcomp.io"
    assert sa["metadata"]["labels"]["service.kubernetes.io/headless"] == ""
    assert [(o["kind"], o["name"], o["uid"]) for o in sa["metadata"]["ownerReferences"]] == [
        ("Service", "web", svc["metadata"]["uid"])
    ]
    assert sa["endpoints"][0]["targetRef"]["uid"] == a1["uid"]

    # Ready once Running with its Ready condition.
    ready(core, a1)
    wait_view(custom, "web", {"node-a": [("web-a1", ip_a1, True)], "node-b": [("web-b1", ip_b1, False)]})

    # A pod created, then deleted.
    a2 = make_pod(core, a, "web-a2", {"app": "web"}, on_ext)
    ctr_a2, ip_a2 = attach_to(admin, a, a2, "ext")
    want = {"node-a": [("web-a1", ip_a1, True), ("web-a2", ip_a2, False)], "node-b": [("web-b1", ip_b1, False)]}
    wait_view(custom, "web", want)
    detach(a, ctr_a2, a2)
    core.delete_namespaced_pod("web-a2", NS, grace_period_seconds=0)
    wait_view(custom, "web", {"node-a": [("web-a1", ip_a1, True)], "node-b": [("web-b1", ip_b1, False)]})

    # web-b1 moves to node-a: node-b's last pod of the Service is gone, and so is its slice.
    detach(b, ctr_b1, b1)
    core.delete_namespaced_pod("web-b1", NS, grace_period_seconds=0)
    known(b, b1, lambda has: not has)
    b1 = make_pod(core, a, "web-b1", {"app": "web"}, on_ext)
    ctr_b1, ip_b1 = attach_to(admin, a, b1, "ext")
    items = wait_view(custom, "web", {"node-a": [("web-a1", ip_a1, True), ("web-b1", ip_b1, False)]})
    assert [s["metadata"]["name"] for s in items if "web." in s["metadata"]["name"]] == ["web.node-a.v4"]

    # Relabelled: no longer selected.
    core.patch_namespaced_pod("web-a1", NS, {"metadata": {"labels": {"app": "other"}}})
    wait_view(custom, "web", {"node-a": [("web-b1", ip_b1, False)]})

    # The Service deleted: every node deletes its slices (no kube-controller-manager runs here to do it).
    delete_service(core, "web")
    wait_view(custom, "web", {})
    written(a, b)
    assert custom.list_namespaced_custom_object(*ES, NS, "endpointslices")["items"] == []
    for ctr, p in ((ctr_a1, a1), (ctr_b1, b1)):
        detach(a, ctr, p)
        core.delete_namespaced_pod(p["name"], NS, grace_period_seconds=0)
    core.delete_namespaced_pod("db-a1", NS, grace_period_seconds=0)


# ------------------------------------------------------------------------------------------------ DANM's spelling


def test_danms_svcwatcher_service(core: Any, custom: Any, admin: Any, nodes: list[DaemonLab]) -> None:
    """DANM's annotations and its port rule (the Service's port, not targetPort); a pod whose connection to the
    DanmNet has no address (`ip: none`) gives no endpoint; a refused Service is in `netcomp status`."""
    a, b = nodes
    notes = {"danm.k8s.io/selector": json.dumps({"app": "lb"}), "danm.k8s.io/network": "internal"}
    service(core, "lb", notes, [{"name": "sip", "port": 5060, "targetPort": 15060, "protocol": "UDP"}])
    conn = "danm.k8s.io/interfaces"
    lb0 = make_pod(core, a, "lb-0", {"app": "lb"}, {conn: json.dumps([{"network": "internal", "ip": "dynamic"}])})
    lb1 = make_pod(core, b, "lb-1", {"app": "lb"}, {conn: json.dumps([{"network": "internal", "ip": "dynamic"}])})
    bare = make_pod(core, b, "lb-2", {"app": "lb"}, {conn: json.dumps([{"network": "internal", "ip": "none"}])})
    ctr0, ip0 = attach_to(admin, a, lb0, f"{NS}/internal")
    ctr1, ip1 = attach_to(admin, b, lb1, f"{NS}/internal")
    ctr2 = b.lab.container()
    assert b.shim("ADD", ctr2, args=cni_args(bare, ctr2))[0] == 0
    for p in (lb0, lb1):
        ready(core, p)
    items = wait_view(custom, "lb", {"node-a": [("lb-0", ip0, True)], "node-b": [("lb-1", ip1, True)]})
    lb = [s for s in items if s["metadata"]["labels"]["kubernetes.io/service-name"] == "lb"]
    assert len(lb) == 2 and all(s["ports"] == [{"name": "sip", "port": 5060, "protocol": "UDP"}] for s in lb)

    bad = {"danm.k8s.io/selector": "{app: lb}", "danm.k8s.io/network": "internal"}
    service(core, "broken", bad, [{"port": 1}])
    assert a.daemon.cluster is not None and a.daemon.cluster.slices is not None
    with a.daemon.cluster.slices._cond:
        assert a.daemon.cluster.slices._cond.wait_for(lambda: (NS, "broken") in a.daemon.cluster.slices.refused, 30)
    why = a.daemon.status()["kubernetes"]["endpointSlices"]["refused"][f"{NS}/broken"]
    assert why.startswith("danm.k8s.io/selector: not JSON")

    for name in ("lb", "broken"):
        delete_service(core, name)
    wait_view(custom, "lb", {})
    for dl, ctr, p in ((a, ctr0, lb0), (b, ctr1, lb1), (b, ctr2, bare)):
        detach(dl, ctr, p)
        core.delete_namespaced_pod(p["name"], NS, grace_period_seconds=0)


# ------------------------------------------------------------------------------------------------ faults


def restart(dl: DaemonLab) -> None:
    """The node's daemon started again (after dl.daemon.stop()), following the cluster as at first."""
    dl.daemon = Daemon(lambda: dl.settings, exec_=dl.lab.exec_in_host, link_netns=dl.lab.host,
                       state_path=dl.base / "state.json")  # fmt: skip
    dl.daemon.start_cluster()
    dl.daemon.reload()
    dl.daemon.start()


def address_on(dl: DaemonLab, ctr: str, network: str) -> str:
    """The container's address on `network`, by the interface the node's record names."""
    entry = dl.daemon.records.load(f"ctr-{ctr}", "eth0")
    assert entry is not None
    [att] = [x for x in entry.attached if x.network == network]
    [addr] = [x.split("/")[0] for x in dl.lab.addrs(ctr, att.ifname)]
    return addr


def test_restart_api_server_away_and_a_slice_deleted_by_hand(
    api: ApiServer, core: Any, custom: Any, admin: Any, nodes: list[DaemonLab]
) -> None:
    """On the lab's host-local network `storage`, which needs no API server to attach."""
    a, _ = nodes
    notes = {"netcomp.io/selector": "app=api", "netcomp.io/network": "storage"}
    service(core, "api", notes, [{"port": 443}])
    on_storage = {NETWORKS: "storage"}
    p1, p2 = (make_pod(core, a, f"api-{i}", {"app": "api"}, on_storage) for i in (1, 2))
    ctr1, ip1 = attach_to(admin, a, p1, "storage")
    ctr2, ip2 = attach_to(admin, a, p2, "storage")
    wait_view(custom, "api", {"node-a": [("api-1", ip1, False), ("api-2", ip2, False)]})

    # A slice deleted by hand is written again.
    custom.delete_namespaced_custom_object(*ES, NS, "endpointslices", "api.node-a.v4")
    wait_view(custom, "api", {"node-a": [("api-1", ip1, False), ("api-2", ip2, False)]})

    # The daemon stopped; meanwhile api-2 is deleted (its container not: no DEL reached the node) and api-1 made
    # ready. The daemon started again reconciles from the cluster and its records.
    written(a)
    a.daemon.stop(drain=5)
    core.delete_namespaced_pod("api-2", NS, grace_period_seconds=0)
    ready(core, p1)
    restart(a)
    wait_view(custom, "api", {"node-a": [("api-1", ip1, True)]})
    detach(a, ctr2, p2)

    # The API server away: a pod the node follows already is attached, another detached; the slice says both
    # once the API server is back.
    p3 = make_pod(core, a, "api-3", {"app": "api"}, on_storage)
    known(a, p3)
    api.stop_apiserver()
    try:
        ctr3 = a.lab.container()
        rc, res = a.shim("ADD", ctr3, args=cni_args(p3, ctr3))
        assert rc == 0, res
        detach(a, ctr1, p1)
    finally:
        api.start_apiserver()
    ip3 = address_on(a, ctr3, "storage")
    wait_view(custom, "api", {"node-a": [("api-3", ip3, False)]})

    delete_service(core, "api")
    wait_view(custom, "api", {})
    detach(a, ctr3, p3)
    for p in (p1, p3):
        core.delete_namespaced_pod(p["name"], NS, grace_period_seconds=0)


def test_the_gc_removes_a_gone_nodes_slices_only_with_proof(
    core: Any, custom: Any, admin: Any, nodes: list[DaemonLab]
) -> None:
    a, b = nodes
    notes = {"netcomp.io/selector": "app=gc", "netcomp.io/network": "ext"}
    service(core, "gc", notes, [{"port": 7}])
    on_ext = {NETWORKS: "ext"}
    pa, pb = make_pod(core, a, "gc-a", {"app": "gc"}, on_ext), make_pod(core, b, "gc-b", {"app": "gc"}, on_ext)
    ctr_a, ip_a = attach_to(admin, a, pa, "ext")
    ctr_b, ip_b = attach_to(admin, b, pb, "ext")
    wait_view(custom, "gc", {"node-a": [("gc-a", ip_a, False)], "node-b": [("gc-b", ip_b, False)]})
    # node-b's daemon stops with its pod still bound there: its slice stays, and so it does after a GC.
    written(b)
    b.daemon.stop(drain=5)
    try:
        assert a.daemon._gc_cluster()["endpointSlices"] == {"removed": [], "kept": 1}
        # Its pod deleted (the node "gone" with it): the GC removes the slice, and only that one.
        core.delete_namespaced_pod("gc-b", NS, grace_period_seconds=0)
        doc = a.daemon._gc_cluster()["endpointSlices"]
        assert doc == {"removed": [{"namespace": NS, "name": "gc.node-b.v4", "node": "node-b"}], "kept": 0}
        wait_view(custom, "gc", {"node-a": [("gc-a", ip_a, False)]})
        # A Node that is gone: its slices go whatever pods they name (a pod of a deleted Node is deleted too).
        core.delete_node("node-b")
        b_slice = {"metadata": {"name": "gc.node-b.v4", "namespace": NS, "annotations": {"netcomp.io/node": "node-b"},
                   "labels": {"endpointslice.kubernetes.io/managed-by": "netcomp.io", "netcomp.io/node": "node-b",
                              "kubernetes.io/service-name": "gc"}},
                   "addressType": "IPv4", "endpoints": [{"addresses": ["10.66.0.250"],
                                                         "targetRef": {"kind": "Pod", "uid": pa["uid"]}}]}  # fmt: skip
        custom.create_namespaced_custom_object(*ES, NS, "endpointslices", b_slice)
        doc = a.daemon._gc_cluster()["endpointSlices"]
        assert doc == {"removed": [{"namespace": NS, "name": "gc.node-b.v4", "node": "node-b"}], "kept": 0}
    finally:
        with contextlib.suppress(Exception):
            core.create_node({"metadata": {"name": "node-b"}})
        restart(b)
    detach(b, ctr_b, pb)
    delete_service(core, "gc")
    wait_view(custom, "gc", {})
    detach(a, ctr_a, pa)
    core.delete_namespaced_pod("gc-a", NS, grace_period_seconds=0)
