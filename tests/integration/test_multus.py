"""Pods moving over from Multus, against a real kube-apiserver and etcd (tests/lab/kubeapi.py) with the
real plugins in network namespaces this test makes: every field of Multus's network selection element a
bare-metal node can honour, read back from the pod's namespace (addresses, MACs, routes), its network-status and
its events; the default network a pod chooses; NetworkAttachmentDefinitions in namespaces, with and without
isolation; and every bad input refused before any plugin runs, naming the pod, the annotation and the item,
leaving nothing behind. The daemon runs with the packaged ClusterRole's rights only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.lab.addrs import in_use
from tests.lab.daemonlab import DaemonLab, kube_lab, wait_for
from tests.lab.kubeapi import ApiServer
from tests.lab.labpods import annotated, attach, detach, events_of, nothing_left, pod, status_of
from tests.lab.multus import NAD, NADS
from tests.lab.netlab import ip

pytestmark = pytest.mark.root


def default_routes(ctr: str) -> list[str]:
    lines = (
        ip("route", "show", "default", netns=ctr).splitlines()
        + ip("-6", "route", "show", "default", netns=ctr).splitlines()
    )
    return sorted(" ".join(line.split()[:5]) for line in lines)


# ------------------------------------------------------------------------------------------------ the fields


def test_a_cnf_pod_gets_its_address_mac_and_default_route(admin: Any, multus_node: DaemonLab) -> None:
    """The issue's pod: a static address, a fixed MAC and the default route on a secondary network."""
    ask = [{"name": "storage", "ips": ["10.79.0.50/24"], "mac": "02:00:00:00:00:50", "default-route": ["10.79.0.1"]}]
    with pod(admin, multus_node, "cnf", **annotated(ask)) as p:
        ctr, rc, res = attach(multus_node, p)
        assert rc == 0, res
        assert sorted(multus_node.lab.links(ctr)) == ["eth0", "lo", "net1"]
        assert multus_node.lab.addrs(ctr, "net1") == ["10.79.0.50/24"]
        assert multus_node.lab.mac(ctr, "net1") == "02:00:00:00:00:50"
        assert default_routes(ctr) == ["default via 10.79.0.1 dev net1"]
        eth0 = multus_node.lab.addrs(ctr, "eth0")[0]
        status = status_of(admin, multus_node, p)
        assert status == [
            {
                "name": "mgmt",
                "interface": "eth0",
                "ips": [eth0.split("/")[0]],
                "mac": multus_node.lab.mac(ctr, "eth0"),
                "default": True,
            },
            {
                "name": "storage",
                "interface": "net1",
                "ips": ["10.79.0.50"],
                "mac": "02:00:00:00:00:50",
                "gateway": ["10.79.0.1"],
            },
        ]
        assert events_of(admin, multus_node, p) == [  # one event for the ADD, every interface in it
            ("Normal", "AddedInterface", f"Add eth0 [{eth0}] from mgmt, net1 [10.79.0.50/24] from storage"),
        ]
        detach(multus_node, ctr, p)


def test_the_default_network_annotation_and_a_default_route_elsewhere(admin: Any, multus_node: DaemonLab) -> None:
    """v1.multus-cni.io/default-network (a definition in multusNamespace, kube-system) takes the node default's
    place on eth0; a default-route on another network takes the default route from it, in the namespace and in
    the results (the runtime's answer included)."""
    ask = [{"name": "backup", "interface": "bk0", "default-route": ["10.80.0.1"]}]
    with pod(admin, multus_node, "choosy", **annotated(ask, default="gw-net")) as p:
        ctr, rc, res = attach(multus_node, p)
        assert rc == 0, res
        assert multus_node.lab.addrs(ctr, "eth0")[0].startswith("10.88.0.")  # gw-net, not mgmt's 10.77.0.0/24
        assert default_routes(ctr) == ["default via 10.80.0.1 dev bk0"]  # gw-net's own default moved off eth0
        assert not [r for r in res.get("routes", []) if r["dst"] == "0.0.0.0/0"], res  # the answer says so too
        status = {s["name"]: s for s in status_of(admin, multus_node, p)}
        assert status["kube-system/gw-net"]["default"] is True and "gateway" not in status["kube-system/gw-net"]
        assert status["backup"]["gateway"] == ["10.80.0.1"]
        detach(multus_node, ctr, p)


def test_an_exact_address_from_a_cluster_pool(admin: Any, multus_node: DaemonLab) -> None:
    """ips on a pool network is an exact claim: the cluster's record of the address names the pod; another pod
    asking for it is refused naming the holder, before any plugin, claiming nothing."""
    from kubernetes import client

    custom = client.CustomObjectsApi(admin)
    with (
        pod(admin, multus_node, "holder", **annotated([{"name": "pool", "ips": ["10.86.0.7/24"]}])) as p1,
        pod(admin, multus_node, "late", **annotated([{"name": "pool", "ips": ["10.86.0.7"]}])) as p2,
    ):
        ctr1, rc, res = attach(multus_node, p1)
        assert rc == 0, res
        assert multus_node.lab.addrs(ctr1, "net1") == ["10.86.0.7/24"]  # Multus's name: the annotation's first element
        assert multus_node.daemon.addresses.flush(30)  # the cluster's record of addresses is written behind
        (claim,) = in_use(custom, "pool")
        assert (claim["spec"]["address"], claim["spec"]["pod"]["name"]) == ("10.86.0.7", "holder")

        ctr2, rc, res = attach(multus_node, p2)
        assert rc == 1 and res["code"] == 11, res
        assert res["msg"].startswith("pod team-a/late: annotation k8s.v1.cni.cncf.io/networks: item 0 ('pool'): ")
        assert "10.86.0.7" in res["msg"] and "team-a/holder" in res["msg"] + res.get("details", ""), res
        assert multus_node.lab.links(ctr2) == ["lo"]
        assert multus_node.daemon.addresses.flush(30)
        assert len(in_use(custom, "pool")) == 1
        assert ("Warning", "FailedAddNetworks") in [e[:2] for e in events_of(admin, multus_node, p2)]
        detach(multus_node, ctr1, p1)
        assert multus_node.daemon.addresses.flush(30)
        assert not in_use(custom, "pool")


def test_capabilities_and_cni_args_reach_the_plugins(admin: Any, multus_node: DaemonLab) -> None:
    """portMappings and bandwidth as runtimeConfig to the plugins that declare them (portmap's DNAT and
    bandwidth's qdisc appear in the node's namespace); cni-args in every plugin's args.cni (the conflist the
    delegates were given, as the cache records it)."""
    ask = [
        {
            "name": "shaped",
            "portMappings": [{"hostPort": 18080, "containerPort": 80, "protocol": "tcp"}],
            "bandwidth": {"ingressRate": 1000000, "ingressBurst": 100000},
            "cni-args": {"team": "a"},
        }
    ]
    with pod(admin, multus_node, "shaped", **annotated(ask)) as p:
        ctr, rc, res = attach(multus_node, p)
        assert rc == 0, res
        nat = ip("netns", "exec", multus_node.lab.host, "iptables", "-t", "nat", "-S")
        assert "--dport 18080" in nat and "10.91.0." in nat, nat
        (entry,) = multus_node.daemon.records.entries()
        (shaped_att,) = [a for a in entry.attachments if a.network == "team-a.shaped"]
        assert shaped_att.result is not None
        (veth,) = [i["name"] for i in shaped_att.result["interfaces"] if i["name"].startswith("veth")]
        qdisc = ip("netns", "exec", multus_node.lab.host, "tc", "qdisc", "show", "dev", veth)
        assert "tbf" in qdisc and "rate 1Mbit" in qdisc, qdisc
        assert [pl.get("args") for pl in shaped_att.conflist["plugins"]] == [{"cni": {"team": "a"}}] * 3
        assert shaped_att.capability_args["portMappings"] == ask[0]["portMappings"]
        detach(multus_node, ctr, p)
        assert "--dport 18080" not in ip("netns", "exec", multus_node.lab.host, "iptables", "-t", "nat", "-S")


def test_multus_names_elements_by_position(admin: Any, multus_node: DaemonLab) -> None:
    """An element without `interface` is net<position>, counted from 1 (the cluster default is 0) over every
    element, named or not, whatever prefix its network has: what pods and scripts written for Multus expect, in
    the namespace, network-status and events alike."""
    with pod(admin, multus_node, "positions", **annotated("storage@st9, backup, team-a/fast")) as p:
        ctr, rc, res = attach(multus_node, p)
        assert rc == 0, res
        assert sorted(multus_node.lab.links(ctr)) == ["eth0", "lo", "net2", "net3", "st9"]
        status = status_of(admin, multus_node, p)
        assert [(s["name"], s["interface"]) for s in status] == [
            ("mgmt", "eth0"),
            ("storage", "st9"),
            ("backup", "net2"),
            ("team-a/fast", "net3"),
        ]
        (added,) = (m for _, r, m in events_of(admin, multus_node, p) if r == "AddedInterface")  # one for the ADD
        assert [part.split(" [")[0] for part in added.removeprefix("Add ").split(", ")] == [
            "eth0",
            "st9",
            "net2",
            "net3",
        ]
        detach(multus_node, ctr, p)


# ------------------------------------------------------------------------------------------------ namespaces


def test_two_namespaces_definitions_of_one_name_are_two_networks(admin: Any, multus_node: DaemonLab) -> None:
    with pod(admin, multus_node, "ns-own", **annotated("fast, team-b/fast@other0")) as p:
        ctr, rc, res = attach(multus_node, p)
        assert rc == 0, res
        assert multus_node.lab.addrs(ctr, "net1")[0].startswith("10.89.0.")  # team-a/fast: the pod's own namespace
        assert multus_node.lab.addrs(ctr, "other0")[0].startswith("10.90.0.")  # team-b/fast, asked for by namespace
        assert [s["name"] for s in status_of(admin, multus_node, p)] == ["mgmt", "team-a/fast", "team-b/fast"]
        detach(multus_node, ctr, p)


def test_namespace_isolation_refuses_another_namespaces_definition(admin: Any, api: ApiServer, tmp_path: Path) -> None:
    from kubernetes import client

    custom = client.CustomObjectsApi(admin)
    with kube_lab(tmp_path, api.node_kubeconfig, networkAttachmentDefinitions=True, namespaceIsolation=True) as dl:
        wait_for(dl, lambda: "team-b.fast" in dl.daemon.state.networks(), "the definitions compiled")
        assert custom.list_namespaced_custom_object(*NAD, "team-b", NADS)["items"]
        with pod(admin, dl, "nosy", **annotated("team-b/fast")) as p:
            ctr, rc, res = attach(dl, p)
            assert rc == 1 and res["code"] == 7, res
            assert res["msg"] == (
                "pod team-a/nosy: annotation k8s.v1.cni.cncf.io/networks: item 0 ('team-b/fast'): namespace "
                "isolation: pod team-a/nosy is in namespace 'team-a' and may not use team-b/fast of namespace 'team-b'"
            )
            nothing_left(dl, ctr)
        with pod(admin, dl, "modest", **annotated("fast")) as p:
            ctr, rc, res = attach(dl, p)
            assert rc == 0, res
            detach(dl, ctr, p)


# ------------------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("value", "code", "words"),
    [
        ('[{"name": "storage"', 7, "annotation k8s.v1.cni.cncf.io/networks: is not JSON"),
        (
            [{"name": "storage", "ips": ["10.99.0.5"]}],
            7,
            "item 0 ('storage'): ips: 10.99.0.5 is outside network storage",
        ),
        (
            [{"name": "storage", "mac": "02:00:00:00:00:61"}, {"name": "backup", "mac": "02:00:00:00:00:61"}],
            7,
            "item 1 ('backup'): mac 02:00:00:00:00:61 is asked for twice",
        ),
        (
            [{"name": "storage", "default-route": ["10.79.0.1"]}, {"name": "backup", "default-route": ["10.80.0.1"]}],
            7,
            "item 1 ('backup'): default-route: a second IPv4 default route",
        ),
        ([{"name": "storage", "colour": "blue"}], 7, "item 0 ('storage'): 'colour': not something netcomp can do"),
        ("storage@dup0, backup@dup0", 7, "item 1 ('backup@dup0'): interface 'dup0' is also item 0 ('storage@dup0')'s"),
        ("storage@eth0", 7, "item 0 ('storage@eth0'): interface 'eth0' is the runtime's interface, which the pod's"),
        ("storage@net2, backup", 7, "item 1 ('backup'): interface 'net2' is also item 0 ('storage@net2')'s"),
        (
            [{"name": "storage", "portMappings": [{"hostPort": 8080, "containerPort": 80}]}],
            7,
            "portMappings: none of network storage's plugins takes the 'portMappings' capability",
        ),
        ([{"name": "signal", "mac": "02:00:00:00:00:62"}], 7, "mac: network signal is ipvlan"),
        ("nope", 7, "item 0 ('nope'): no network team-a/nope"),
        ([{"name": "p2p", "mac": "02:00:00:00:00:63"}], 7, "mac: network team-a/p2p's plugins gave net1 the MAC"),
        ([{"name": "storage", "default-route": ["10.79.0.1", "10.79.0.2"]}], 7, "a second IPv4 default route"),
    ],
)
def test_bad_input_is_a_cni_error_naming_the_pod_and_leaves_nothing(
    admin: Any, multus_node: DaemonLab, value: Any, code: int, words: str
) -> None:
    """Each refused naming the pod, the annotation and the item; nothing left: no interface, no lease, no
    record; a warning event on the pod. (The MAC ptp does not set is found after its plugins ran: rolled back.)"""
    with pod(admin, multus_node, "bad", **annotated(value)) as p:
        ctr, rc, res = attach(multus_node, p)
        assert rc == 1 and res["code"] == code, res
        assert res["msg"].startswith("pod team-a/bad: annotation "), res
        assert words in res["msg"], res
        nothing_left(multus_node, ctr)
        reasons = [e[:2] for e in events_of(admin, multus_node, p)]
        assert reasons and all(kind == "Warning" for kind, _ in reasons)
        assert ("NoNetworkFound" if value == "nope" else "FailedAddNetworks") in [r for _, r in reasons]


def test_an_address_another_pod_holds_on_a_host_local_network(admin: Any, multus_node: DaemonLab) -> None:
    with (
        pod(admin, multus_node, "first", **annotated([{"name": "storage", "ips": ["10.79.0.60"]}])) as p1,
        pod(admin, multus_node, "second", **annotated([{"name": "storage", "ips": ["10.79.0.60/24"]}])) as p2,
    ):
        ctr1, rc, res = attach(multus_node, p1)
        assert rc == 0 and multus_node.lab.addrs(ctr1, "net1") == ["10.79.0.60/24"], res
        ctr2, rc, res = attach(multus_node, p2)
        assert rc == 1 and res["code"] == 7, res
        assert "item 0 ('storage'): ips: 10.79.0.60 on network storage is held by another container" in res["msg"]
        assert multus_node.lab.links(ctr2) == ["lo"]
        detach(multus_node, ctr1, p1)


def test_pods_come_from_the_nodes_watch(admin: Any, multus_node: DaemonLab) -> None:
    """A pod bound to the node is delivered by the watch before its ADD: the ADD reads nothing from the API
    server (the lookups metric says where each came from)."""
    assert multus_node.daemon.cluster is not None
    pods = multus_node.daemon.cluster.pods
    lookups = multus_node.daemon.metrics.pod_lookups
    with pod(admin, multus_node, "watched", **annotated("backup")) as p:
        with pods.changed:
            assert pods.changed.wait_for(lambda: pods.has("team-a", "watched"), 30)
        before = (lookups.labels("watch").value(), lookups.labels("api").value())
        ctr, rc, res = attach(multus_node, p)
        assert rc == 0, res
        after = (lookups.labels("watch").value(), lookups.labels("api").value())
        assert (after[0] - before[0], after[1] - before[1]) == (1, 0)
        detach(multus_node, ctr, p)


def test_a_failure_reading_the_pods_namespace_rolls_the_add_back(
    admin: Any, multus_node: DaemonLab, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Netlink trouble while checking what the pod asked for (made to happen: a kernel that refuses netlink on
    demand does not exist here, so the read is replaced by one that fails as pyroute2 does): the ADD is rolled
    back like any delegate's failure, a CNI error and nothing left."""
    from netcomp.errors import HostError
    from netcomp.host import container

    def broken(netns: Any, ifname: str) -> Any:
        raise HostError(f"cannot read interface {ifname} in {netns}: [Errno 105] No buffer space available")

    monkeypatch.setattr(container, "link_state", broken)
    with pod(admin, multus_node, "netlink", **annotated([{"name": "storage", "mac": "02:00:00:00:00:71"}])) as p:
        ctr, rc, res = attach(multus_node, p)
        assert rc == 1 and res["code"] == 5 and "No buffer space available" in res["msg"], res
        nothing_left(multus_node, ctr)
