"""`netcomp explain` against the real daemon (daemonlab.py, following a real kube-apiserver: kubeapi.py) with the
real plugins: what explain says of a pod before it starts is what its ADD then does (the interfaces in its
namespace, its network-status, its addresses), for a Multus annotation, a DANM annotation, a cluster pool and a
refusal (the same CNI error, word for word, and nothing attached); after the ADD, the record beside what the
annotation asks; and a runtime without Kubernetes (CNI_ARGS)."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.lab.daemonlab import DaemonLab, kube_lab, wait_for
from tests.lab.danm import DANM, DANM_GROUP, danmnet
from tests.lab.kubeapi import NETS, ApiServer
from tests.lab.labpods import annotated, attach, detach, explain, nothing_left, pod, status_of

pytestmark = pytest.mark.root
NODE = "node-e"


@pytest.fixture(scope="module")
def explain_node(api: ApiServer, admin: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonLab]:
    """node-e, following a cluster pool network (pool) and two DANM ClusterNetworks (dfront, dback)."""
    from kubernetes import client

    custom = client.CustomObjectsApi(admin)
    pool = {"type": "macvlan", "hostDevice": "ncm0", "ipam": {"type": "cluster", "subnet": "10.86.0.0/24"}}
    network = {"apiVersion": "netcomp.io/v1", "kind": "Network", "metadata": {"name": "pool"}, "spec": pool}
    custom.create_cluster_custom_object(*NETS, network)
    for obj in (
        danmnet("dfront", None, "10.63.0.0/24", "ClusterNetwork"),
        danmnet("dback", None, "10.64.0.0/24", "ClusterNetwork", container_prefix="dx"),
    ):
        custom.create_cluster_custom_object(*DANM_GROUP, "clusternetworks", obj)
    base = tmp_path_factory.mktemp("explain")
    with kube_lab(base, api.node_kubeconfig, danm=True, settings={"nodeName": NODE}) as dl:
        wait_for(dl, lambda: {"pool", "dfront", "dback"} <= set(dl.daemon.state.networks()), "the networks compiled")
        yield dl


def planned(doc: dict[str, Any]) -> list[tuple[str, str]]:
    return [(n["interface"], n["network"]) for n in doc["networks"]]


def test_a_multus_pod_and_a_cluster_pool(admin: Any, explain_node: DaemonLab) -> None:
    """Before: the networks, their names and why, the pool and the address asked. The ADD then gives exactly
    that. After: the record beside the annotation, as asked; and another pod asking for the same address is
    told who holds it."""
    ask = [{"name": "storage"}, {"name": "backup", "interface": "bk0"}, {"name": "pool", "ips": ["10.86.0.9/24"]}]
    with pod(admin, explain_node, "why", **annotated(ask)) as p:
        rc, before = explain(explain_node, "--pod", "team-a/why")
        assert rc == 0 and before["running"] is False and before["refusal"] is None, before
        want = [("eth0", "mgmt"), ("net1", "storage"), ("bk0", "backup"), ("net3", "pool")]
        assert planned(before) == want
        eth0, net1, bk0, net3 = before["networks"]
        assert eth0["why"] == "the node's defaultNetwork (mgmt, netcomp.yaml)"
        assert net1["why"] == "pod team-a/why: annotation k8s.v1.cni.cncf.io/networks: item 0 ('storage')"
        assert net1["nameWhy"] == (
            "Multus: item 0 of the annotation is net1 (the cluster default network is net0), whatever the network's "
            "interfacePrefix"
        )
        assert bk0["nameWhy"] == "the item's own interface"
        assert net1["addresses"] == {"asked": [], "from": "the host-local IPAM plugin: 10.79.0.0/24 from 10.79.0.10"}
        assert net3["addresses"]["asked"] == ["10.86.0.9/24"]
        assert net3["addresses"]["from"] == "netcomp's cluster pool: 10.86.0.0/24 (253 of 253 free)"
        ctr, rc, res = attach(explain_node, p)
        assert rc == 0, res
        assert sorted(explain_node.lab.links(ctr)) == sorted(["lo", *(i for i, _ in want)])
        assert [(s["interface"], s["name"]) for s in status_of(admin, explain_node, p)] == want
        assert explain_node.lab.addrs(ctr, "net3") == ["10.86.0.9/24"]
        rc, after = explain(explain_node, "--pod", "team-a/why")
        assert rc == 0 and after["running"] is True and after["container"] == f"ctr-{ctr}"
        assert [(r["interface"], r["name"]) for r in after["record"]] == want
        assert planned(after) == want
        assert after["networks"][3]["addresses"]["held"] == []  # its own address is not another's
        assert after["changes"] == {
            "attach": [],
            "detach": [],
            "refusal": None,
            "why": "the record is what the annotation asks",
        }
        assert explain(explain_node, "--container", f"ctr-{ctr}")[1]["record"] == after["record"]
        rc, text = explain(explain_node, "--pod", "team-a/why", text=True)
        assert text.splitlines()[0] == f"pod team-a/why container ctr-{ctr}: attached on this node (eth0)"
        assert "  net3            pool                     10.86.0.9 " in text
        with pod(admin, explain_node, "rival", **annotated([{"name": "pool", "ips": ["10.86.0.9/24"]}])) as rival:
            rc, doc = explain(explain_node, "--pod", "team-a/rival")
            assert doc["networks"][1]["addresses"]["held"] == [f"10.86.0.9 is held by pod team-a/why on node {NODE}"]
            ctr2, rc, res = attach(explain_node, rival)
            assert rc != 0 and f"is held by pod team-a/why on node {NODE}" in res["msg"], res
            nothing_left_but(explain_node, ctr2)
        detach(explain_node, ctr, p)


def nothing_left_but(dl: DaemonLab, ctr: str) -> None:
    assert dl.lab.links(ctr) == ["lo"]
    assert not any(f.startswith(f"ctr-{ctr}") for f in dl.cache_files())


def test_a_danm_pod(admin: Any, explain_node: DaemonLab) -> None:
    """DANM's rules: the first connection on eth0 in the default's place, the others container_prefix (or eth)
    and their position; DANM's cidr is a cluster pool: the address the ADD gives is in it."""
    conns = [{"clusterNetwork": "dfront", "ip": "dynamic"}, {"clusterNetwork": "dback", "ip": "dynamic"}]
    with pod(admin, explain_node, "telco", **{DANM: json.dumps(conns)}) as p:
        rc, before = explain(explain_node, "--pod", "team-a/telco")
        assert rc == 0, before
        assert planned(before) == [("eth0", "dfront"), ("dx1", "dback")]
        eth0, dx1 = before["networks"]
        assert (
            eth0["why"] == "pod team-a/telco: annotation danm.k8s.io/interfaces: connection 0 (clusterNetwork 'dfront')"
        )
        assert dx1["nameWhy"] == "DANM: connection 1 of the annotation is dx1 (the network's container_prefix 'dx')"
        assert dx1["addresses"]["from"].startswith("netcomp's cluster pool: 10.64.0.0/24 (")
        ctr, rc, res = attach(explain_node, p)
        assert rc == 0, res
        assert sorted(explain_node.lab.links(ctr)) == ["dx1", "eth0", "lo"]
        given = explain_node.lab.addrs(ctr, "dx1")[0]
        assert ipaddress.ip_interface(given) in ipaddress.ip_network("10.64.0.0/24")
        rc, after = explain(explain_node, "--pod", "team-a/telco")
        assert [(r["interface"], r["name"], r["ips"]) for r in after["record"]][1] == (
            "dx1",
            "dback",
            [given.split("/")[0]],
        )
        detach(explain_node, ctr, p)


def test_a_refusal_in_the_adds_words(admin: Any, explain_node: DaemonLab) -> None:
    with pod(admin, explain_node, "lost", **annotated("storage, nosuchnet")) as p:
        rc, doc = explain(explain_node, "--pod", "team-a/lost")
        assert rc == 1 and doc["networks"] == []
        refusal = doc["refusal"]
        assert refusal["msg"].startswith(
            "pod team-a/lost: annotation k8s.v1.cni.cncf.io/networks: item 1 ('nosuchnet'): "
        )
        ctr, rc, res = attach(explain_node, p)
        assert rc != 0
        assert (res["code"], res["msg"], res.get("details", "")) == (
            refusal["code"],
            refusal["msg"],
            refusal["details"],
        )
        nothing_left(explain_node, ctr)
        rc, text = explain(explain_node, "--pod", "team-a/lost", text=True)
        assert f"REFUSED (CNI error {refusal['code']}): {refusal['msg']}" in text


def test_a_runtime_without_kubernetes(explain_node: DaemonLab) -> None:
    """CNI_ARGS as podman or cnitool pass them: interfacePrefix and index; an explicit name."""
    args = "NETCOMP_NETWORKS=storage,backup@bk0"
    rc, doc = explain(explain_node, "--cni-args", args)
    assert rc == 0 and planned(doc) == [("eth0", "mgmt"), ("stor0", "storage"), ("bk0", "backup")]
    assert doc["networks"][1]["why"] == "CNI_ARGS NETCOMP_NETWORKS: storage"
    assert (
        doc["networks"][1]["nameWhy"] == "the network's interfacePrefix 'stor' and the next index free for that prefix"
    )
    ctr = explain_node.lab.container()
    rc, res = explain_node.shim("ADD", ctr, args=args)
    assert rc == 0, res
    assert sorted(explain_node.lab.links(ctr)) == ["bk0", "eth0", "lo", "stor0"]
    rc, doc = explain(explain_node, "--container", f"ctr-{ctr}")
    assert rc == 0 and doc["pod"] is None and doc["networks"] == []  # CNI_ARGS are not recorded: the record says
    assert [(r["interface"], r["name"]) for r in doc["record"]] == [
        ("eth0", "mgmt"),
        ("stor0", "storage"),
        ("bk0", "backup"),
    ]
    assert doc["changes"]["why"] == "not a pod's container: only its runtime changes its networks"
    assert explain_node.shim("DEL", ctr, args=args)[0] == 0
    rc, doc = explain(explain_node, "--cni-args", "NETCOMP_NETWORKS=storage@eth0")
    assert rc == 1 and doc["refusal"]["msg"] == "interface name 'eth0' is asked for twice"
