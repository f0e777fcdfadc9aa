"""Pods and networks moving over from DANM, against a real kube-apiserver and etcd (tests/lab/kubeapi.py,
with DANM's CRDs) and the real plugins in network namespaces this test makes: DanmNets, ClusterNetworks,
TenantNetworks and a TenantConfig followed from the cluster; a pod's danm.k8s.io/interfaces annotation field by
field, its interfaces, DANM's names, addresses, policy routes read back from its namespace, its network-status
and events; tenancy (a DanmNet of another namespace, AllowedTenants) refused naming the namespaces; a
TenantNetwork compiled on two nodes with the device and VXLAN id one TenantConfig gave it once; an exhausted
range reported in status and on the object, and served once an id is free again."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from netcomp.ipam.claimobjects import ID_PLURAL
from netcomp.kube.group import GROUP, VERSION
from tests.lab.addrs import in_use
from tests.lab.daemonlab import DaemonLab, kube_lab, wait_for
from tests.lab.danm import DANM, DANM_API, DANM_GROUP, danmnet
from tests.lab.kubeapi import ApiServer
from tests.lab.labpods import NETWORKS, attach, detach, events_of, nothing_left, pod, status_of
from tests.lab.netlab import ip

pytestmark = pytest.mark.root


KEYS = ["team-a.management", "external", "team-a.internal"]


@contextlib.contextmanager
def danm_lab(api: ApiServer, base: Path, node: str = "node-a", keys: list[str] = KEYS) -> Iterator[DaemonLab]:
    with kube_lab(base, api.node_kubeconfig, danm=True, settings={"nodeName": node, "ipamGrace": 1.0}) as dl:
        wait_for(dl, lambda: all(k in dl.daemon.state.networks() for k in keys), "the DANM objects compiled")
        yield dl


@pytest.fixture(scope="module")
def danm_node(api: ApiServer, admin: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonLab]:
    """node-a, following DANM's objects: a TenantConfig (ncm0, VXLAN ids 5100-5101), team-a's DanmNet
    management, the ClusterNetwork external (team-a's only), team-a's TenantNetwork internal."""
    from kubernetes import client

    custom = client.CustomObjectsApi(admin)
    tconf = {
        "apiVersion": DANM_API,
        "kind": "TenantConfig",
        "metadata": {"name": "tconf"},
        "hostDevices": [{"name": "ncm0", "vniType": "vxlan", "vniRange": "5100-5101"}],
    }
    custom.create_cluster_custom_object(*DANM_GROUP, "tenantconfigs", tconf)
    management = danmnet("management", "team-a", "10.62.0.0/24")
    custom.create_namespaced_custom_object(*DANM_GROUP, "team-a", "danmnets", management)
    external = danmnet("external", None, "10.61.0.0/24", kind="ClusterNetwork", container_prefix="ext", rt_tables=300)
    external["spec"]["AllowedTenants"] = ["team-a"]
    custom.create_cluster_custom_object(*DANM_GROUP, "clusternetworks", external)
    internal = danmnet("internal", "team-a", None, kind="TenantNetwork", container_prefix="int")
    del internal["spec"]["Options"]["host_device"]  # the TenantConfig gives it
    custom.create_namespaced_custom_object(*DANM_GROUP, "team-a", "tenantnetworks", internal)
    with danm_lab(api, tmp_path_factory.mktemp("danm-node")) as dl:
        yield dl


def danm_pod(admin: Any, dl: DaemonLab, name: str, value: Any, ns: str = "team-a") -> Any:
    return pod(admin, dl, name, ns, **{DANM: json.dumps(value)})


# ------------------------------------------------------------------------------------------------ the fields


def test_a_danm_pod_field_by_field(admin: Any, danm_node: DaemonLab) -> None:
    conns = [
        {"network": "management", "ip": "dynamic"},
        {"clusterNetwork": "external", "ip": "10.61.0.50/24", "proutes": {"10.70.0.0/16": "10.61.0.1"}},
        {"tenantNetwork": "internal", "ip": "none"},
    ]
    with danm_pod(admin, danm_node, "telco", conns) as p:
        ctr, rc, res = attach(danm_node, p)
        assert rc == 0, res
        # DANM's names: eth0 (the first connection, in the node default's place), ext1, int2.
        assert sorted(danm_node.lab.links(ctr)) == ["eth0", "ext1", "int2", "lo"]
        assert danm_node.lab.addrs(ctr, "eth0")[0].startswith("10.62.0.")
        assert danm_node.lab.addrs(ctr, "ext1") == ["10.61.0.50/24"]
        assert danm_node.lab.addrs(ctr, "int2") == []  # ip: none
        assert "from 10.61.0.50/24 lookup 300" in ip("rule", netns=ctr)  # tables are 32-bit: DANM's example
        # svcwatcher_demo uses 300
        assert ip("route", "show", "table", "300", netns=ctr).split()[:5] == [
            "10.70.0.0/16",
            "via",
            "10.61.0.1",
            "dev",
            "ext1",
        ]
        # The TenantNetwork's link: the TenantConfig's device and the first VXLAN id of its range.
        tconf = danm_node.daemon.state.networks()["team-a.internal"]["netcomp"]
        assert tconf["hostLink"]["name"] == "vx5100" and tconf["tenantConfig"]["name"] == "tconf"
        status = status_of(admin, danm_node, p)
        assert [(s["name"], s["interface"], s.get("default", False)) for s in status] == [
            ("team-a/management", "eth0", True),
            ("external", "ext1", False),
            ("team-a/internal", "int2", False),
        ]
        assert status[1]["ips"] == ["10.61.0.50"] and status[2]["ips"] == []
        (added,) = (m for _, r, m in events_of(admin, danm_node, p) if r == "AddedInterface")  # one for the ADD
        assert added.removeprefix("Add ").split(", ")[1:] == [
            "ext1 [10.61.0.50/24] from external",
            "int2 [] from team-a/internal",
        ]
        detach(danm_node, ctr, p)


def test_an_exact_danm_address_is_claimed_for_the_cluster(admin: Any, danm_node: DaemonLab) -> None:
    from kubernetes import client

    custom = client.CustomObjectsApi(admin)
    with (
        danm_pod(admin, danm_node, "first", [{"network": "management", "ip": "10.62.0.9"}]) as p1,
        danm_pod(admin, danm_node, "second", [{"network": "management", "ip": "10.62.0.9/24"}]) as p2,
    ):
        ctr1, rc, res = attach(danm_node, p1)
        assert rc == 0 and danm_node.lab.addrs(ctr1, "eth0") == ["10.62.0.9/24"], res
        assert danm_node.daemon.addresses.flush(30)  # the cluster's record of addresses is written behind
        holders = [o["spec"]["pod"]["name"] for o in in_use(custom)]
        assert holders == ["first"]
        ctr2, rc, res = attach(danm_node, p2)
        assert rc == 1 and res["code"] == 11 and "team-a/first" in res["msg"], res
        assert res["msg"].startswith("pod team-a/second: annotation danm.k8s.io/interfaces: connection 0")
        assert danm_node.lab.links(ctr2) == ["lo"]
        detach(danm_node, ctr1, p1)


@pytest.mark.parametrize(
    ("ns", "value", "words"),
    [
        ("team-b", [{"network": "management"}], "no DanmNet team-b/management is compiled on this node"),
        ("team-b", [{"clusterNetwork": "external"}], "ClusterNetwork external allows the pods of team-a; pod team-b"),
        ("team-a", [{"network": "management", "clusterNetwork": "external"}], "exactly one of network"),
        ("team-a", [{"tenantNetwork": "internal", "ip": "dynamic"}], "no cidr or net6 (an L2 network)"),
        ("team-a", [{"network": "management", "ip": "10.99.0.1"}], "10.99.0.1 is outside network team-a/management"),
        (
            "team-a",
            [{"network": "management", "ip": "dynamic", "proutes": {"10.9.0.0/16": "10.62.0.1"}}],
            "no rt_tables",
        ),
    ],
)
def test_danm_refusals_name_the_pod_and_leave_nothing(
    admin: Any, danm_node: DaemonLab, ns: str, value: Any, words: str
) -> None:
    with danm_pod(admin, danm_node, "refused", value, ns=ns) as p:
        ctr, rc, res = attach(danm_node, p)
        assert rc == 1 and res["code"] == 7, res
        assert res["msg"].startswith(f"pod {ns}/refused: annotation danm.k8s.io/interfaces: connection 0"), res
        assert words in res["msg"] + res.get("details", ""), res
        if "management is compiled" in words:
            assert "is in namespace team-a, not the pod's ('team-b')" in res["details"]
        nothing_left(danm_node, ctr)
        assert [r for _, r, _ in events_of(admin, danm_node, p)] in (["NoNetworkFound"], ["FailedAddNetworks"])


def test_a_pod_with_both_annotations_is_refused(admin: Any, danm_node: DaemonLab) -> None:
    notes = {DANM: '[{"network": "management"}]', NETWORKS: "storage"}
    with pod(admin, danm_node, "both", "team-a", **notes) as p:
        ctr, rc, res = attach(danm_node, p)
        assert rc == 1 and "annotations danm.k8s.io/interfaces (DANM's) and k8s.v1.cni.cncf.io/networks" in res["msg"]
        nothing_left(danm_node, ctr)


# ------------------------------------------------------------------------------------------------ TenantConfig


def test_a_tenant_network_gets_one_device_and_id_on_every_node(
    api: ApiServer, admin: Any, danm_node: DaemonLab, tmp_path: Path
) -> None:
    """A second node compiles team-a/internal with the device and VXLAN id the first one claimed: one
    TenantClaim object, the same host link in both compiled files."""
    from kubernetes import client

    with danm_lab(api, tmp_path / "b", "node-b") as other:
        here, there = danm_node.daemon.state.networks(), other.daemon.state.networks()
        assert here["team-a.internal"]["netcomp"]["hostLink"] == there["team-a.internal"]["netcomp"]["hostLink"]
        claims = client.CustomObjectsApi(admin).list_cluster_custom_object(GROUP, VERSION, ID_PLURAL)["items"]
        assert [c["spec"]["vni"] for c in claims if c["spec"]["network"]["name"] == "internal"] == [5100]


def test_an_exhausted_range_is_reported_and_served_once_an_id_is_free(admin: Any, danm_node: DaemonLab) -> None:
    from kubernetes import client

    custom = client.CustomObjectsApi(admin)
    core = client.CoreV1Api(admin)
    made = []
    try:
        for name in ("second", "third"):
            obj = danmnet(name, "team-a", None, kind="TenantNetwork")
            del obj["spec"]["Options"]["host_device"]
            custom.create_namespaced_custom_object(*DANM_GROUP, "team-a", "tenantnetworks", obj)
            made.append(name)
        wait_for(
            danm_node, lambda: "team-a.second" in danm_node.daemon.state.networks(), "the second one compiled (5101)"
        )
        copy = str(danm_node.base / "cluster.d" / "team-a.third.tenantnetwork.yaml")
        wait_for(
            danm_node,
            lambda: any(
                d["file"] == copy and "whole range is already reserved" in d["message"]
                for d in danm_node.daemon.status()["diagnostics"]
            ),
            "the third one reported",
        )
        assert "team-a.third" not in danm_node.daemon.state.networks()
        # On the object too: kubectl describe tenantnetwork third shows it.
        assert danm_node.daemon.cluster is not None and danm_node.daemon.cluster.pods.flush(30)
        events = core.list_namespaced_event("team-a", field_selector="involvedObject.name=third").items
        assert [(e.type, e.reason, e.involved_object.kind) for e in events] == [
            ("Warning", "FailedCompile", "TenantNetwork")
        ]
        assert "whole range is already reserved" in events[0].message and "node node-a" in events[0].message
        # The second one deleted: its id is freed (confirmed gone by the API server), the third compiles with it.
        custom.delete_namespaced_custom_object(*DANM_GROUP, "team-a", "tenantnetworks", "second")
        made.remove("second")
        wait_for(
            danm_node, lambda: "team-a.third" in danm_node.daemon.state.networks(), "the third one served with 5101"
        )
        assert danm_node.daemon.state.networks()["team-a.third"]["netcomp"]["hostLink"]["name"] == "vx5101"
    finally:
        for name in made:
            with contextlib.suppress(Exception):
                custom.delete_namespaced_custom_object(*DANM_GROUP, "team-a", "tenantnetworks", name)
