"""Addresses unique across nodes (ipam: {type: cluster}) against a real kube-apiserver and etcd: several daemons
with their own node names, each serving its own lab netns ("node") with the real plugins, sharing one Network
object whose pool is small enough to be contended; the address claims are AddressClaim objects the daemons make
with the packaged ClusterRole's rights. Also: exhaustion, a daemon killed between claiming and recording, the API
server gone mid-storm, the cluster GC (a pod gone while its node is down freed, a pod still on its node never),
and an object of another network at a claim's name (never touched)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import ipaddress
import threading
from pathlib import Path
from typing import Any

import pytest

from netcomp.kube.group import GROUP, VERSION
from tests.lab.addrs import BLOCKS, CLAIMS
from tests.lab.clusternodes import (
    addresses,
    cached_claims,
    claims,
    flushed,
    network,
    nodes,
    object_claims,
    shared_network,
)
from tests.lab.daemonlab import DaemonLab, daemon_lab
from tests.lab.kubeapi import ApiServer
from tests.lab.poll import until

pytestmark = pytest.mark.root


# ------------------------------------------------------------------------------------------------ the storm


def test_three_nodes_share_one_pool_without_a_duplicate(api: ApiServer, custom: Any, tmp_path: Path) -> None:
    """A /26 (61 addresses to give) served by three nodes: filled at once from all three, every address unique
    and every container attached; one more ADD is refused with the numbers; then 200 more ADDs (and DELs)
    churning through the pool from all three at once, never an address twice; DEL of everything leaves no
    object."""
    with (
        shared_network(custom, network("shared", "10.97.0.0/26")),
        nodes(tmp_path, api, ["node-a", "node-b", "node-c"], "shared") as labs,
    ):
        live: dict[str, tuple[DaemonLab, str]] = {}  # address -> (node, container)
        lock = threading.Lock()
        problems: list[str] = []

        def add(i: int) -> tuple[DaemonLab, str] | None:
            dl = labs[i % 3]
            ctr = dl.lab.container()
            rc, res = dl.shim("ADD", ctr, args="NETCOMP_NETWORKS=shared", ready_timeout=30)
            if rc != 0:
                problems.append(f"ADD {ctr}: {res}")
                return None
            got = addresses(dl, ctr)
            answered = [x["address"].split("/")[0] for x in res["ips"]]
            with lock:
                if got != answered:
                    problems.append(f"{ctr}: answered {answered}, has {got}")
                for a in got:
                    if a in live:
                        problems.append(f"{a} held by {ctr} and {live[a][1]}")
                    live[a] = (dl, ctr)
            return dl, ctr

        def delete(dl: DaemonLab, ctr: str) -> None:
            rc, res = dl.shim("DEL", ctr, ready_timeout=30)
            if rc != 0:
                problems.append(f"DEL {ctr}: {res}")
            with lock:
                for a, (_, c) in list(live.items()):
                    if c == ctr:
                        del live[a]

        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            held = [x for x in pool.map(add, range(61)) if x is not None]
            assert problems == [] and len(held) == 61 and len(live) == 61
            flushed(labs)
            assert object_claims(custom, "shared") == cached_claims(labs)
            extra = labs[0].lab.container()
            rc, err = labs[0].shim("ADD", extra, args="NETCOMP_NETWORKS=shared")
            assert rc == 1 and err["code"] == 11, err
            assert "no free address in 10.97.0.0/26 (61 addresses, all claimed)" in err["msg"]
            assert labs[0].lab.links(extra) == ["lo"] and len(claims(custom, "shared")) == 61

            list(pool.map(lambda x: delete(*x), held[:30]))

            def cycle(i: int) -> None:
                x = add(i)
                if x is not None:
                    delete(*x)

            list(pool.map(cycle, range(200)))
            assert problems == [], problems[:5]
            list(pool.map(lambda x: delete(*x), held[30:]))
        assert problems == [], problems[:5]
        flushed(labs)
        assert claims(custom, "shared") == [] and cached_claims(labs) == set()
        for dl in labs:  # what the others wrote reaches each node through its watch
            assert dl.daemon.addresses.allocator.wait_for(lambda cs: not any(c.network == "shared" for c in cs), 30)


def test_show_names_who_holds_what(api: ApiServer, custom: Any, tmp_path: Path) -> None:
    from netcomp.cli.ask import _print_ipam

    with (
        shared_network(custom, network("showme", "10.98.0.0/29")),
        nodes(tmp_path, api, ["node-a", "node-b"], "showme") as labs,
    ):
        ctrs = [labs[i].lab.container() for i in range(2)]
        for dl, ctr in zip(labs, ctrs, strict=True):
            assert dl.shim("ADD", ctr, args="NETCOMP_NETWORKS=showme")[0] == 0
        assert labs[0].daemon.addresses.allocator.synced.wait(30)
        # node-a does not follow node-b's block: show reads the whole pool from the API server, once node-b's
        # record is written behind.
        flushed(labs)
        assert [c.node for c in labs[0].daemon.addresses.allocator.claims("showme")] == ["node-a"]
        doc = labs[0].daemon.addresses.show(labs[0].daemon.state.networks())
        [net] = [n for n in doc["networks"] if n["network"] == "showme"]
        assert net["store"] == "Kubernetes" and net["pools"] == [
            {"ranges": "10.98.0.0/29", "size": 5, "claimed": 2, "free": 3}
        ]
        assert sorted(c["node"] for c in net["claims"]) == ["node-a", "node-b"]
        import io

        out = io.StringIO()
        _print_ipam({"networks": [net]}, out)
        assert out.getvalue().startswith("showme (Kubernetes store): 10.98.0.0/29: 5 addresses, 2 claimed, 3 free\n")
        status = labs[0].daemon.status()
        assert next(n for n in status["networks"] if n["name"] == "showme")["addresses"] == "cluster (Kubernetes store)"
        # Over the socket, as `netcomp ipam show showme` asks: only that network is read and answered.
        from netcomp.daemon.server.client import call

        code, one = call(labs[0].sock, "GET", "/ipam?network=showme")
        assert code == 200 and [n["network"] for n in one["networks"]] == ["showme"], one
        assert sorted(c["node"] for c in one["networks"][0]["claims"]) == ["node-a", "node-b"]
        code, none = call(labs[0].sock, "GET", "/ipam?network=nosuch")
        assert code == 200 and none["networks"] == [], none
        for dl, ctr in zip(labs, ctrs, strict=True):
            assert dl.shim("DEL", ctr)[0] == 0
        flushed(labs)
        assert claims(custom, "showme") == []


# ------------------------------------------------------------------------------------------------ faults


def test_api_server_gone_mid_storm(api: ApiServer, custom: Any, tmp_path: Path) -> None:
    """With the API server away, ADDs fail with 11 before any plugin runs and claim nothing; a DEL cannot free
    its addresses and says so (11), keeping them recorded; once the server is back, everything is freed and
    nothing is left."""
    with (
        shared_network(custom, network("flaky", "10.99.0.0/27", blockSize=1)),
        nodes(tmp_path, api, ["node-a"], "flaky") as labs,
    ):
        dl = labs[0]
        before = [dl.lab.container() for _ in range(4)]
        for ctr in before:
            assert dl.shim("ADD", ctr, args="NETCOMP_NETWORKS=flaky")[0] == 0
        api.stop_apiserver()
        try:
            during = [dl.lab.container() for _ in range(3)]
            for ctr in during:
                rc, err = dl.shim("ADD", ctr, args="NETCOMP_NETWORKS=flaky")
                assert rc == 1 and err["code"] == 11 and "cannot claim an address" in err["msg"], err
                assert dl.lab.links(ctr) == ["lo"]
            rc, err = dl.shim("DEL", before[0])
            assert rc == 1 and err["code"] == 11 and "cannot free address" in err["msg"], err
            assert dl.lab.links(before[0]) == ["lo"]  # the interface went; the address is still recorded
        finally:
            api.start_apiserver()
        assert {o["spec"]["containerID"] for o in claims(custom, "flaky")} == {f"ctr-{c}" for c in before}
        for ctr in before:
            assert dl.shim("DEL", ctr)[0] == 0
        assert claims(custom, "flaky") == [] and dl.cache_files() == []
        ctr = dl.lab.container()
        assert dl.shim("ADD", ctr, args="NETCOMP_NETWORKS=flaky")[0] == 0  # and it works again
        assert dl.shim("DEL", ctr)[0] == 0


def test_a_claim_nothing_records_is_freed_after_the_grace_period(api: ApiServer, custom: Any, tmp_path: Path) -> None:
    """The daemon killed between claiming an address and recording it (crash point after-claim): the claim is an
    orphan. The restarted daemon gives the shim's retry another address at once, and frees the orphan once the
    grace period has passed, never the address the container holds."""
    from tests.lab.procdaemon import kube_proc_node

    extra = {"defaultNetwork": None, "ipamGrace": 3}
    with (
        shared_network(custom, network("crashy", "10.100.0.0/28", blockSize=1)),
        kube_proc_node(api, tmp_path, "node-k", extra=extra, env={"NETCOMP_CRASH_AT": "after-claim"}) as node,
    ):
        assert (tmp_path / "out" / "crashy.conflist").exists()  # the daemon listed the cluster before READY=1
        ctr = node.lab.container()
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            add = pool.submit(node.shim, "ADD", ctr, args="NETCOMP_NETWORKS=crashy")
            assert node.proc is not None and node.proc.wait(timeout=60) == -9, node.logs()
            orphan = claims(custom, "crashy")
            assert len(orphan) == 1 and orphan[0]["spec"]["containerID"] == f"ctr-{ctr}"
            node.env.pop("NETCOMP_CRASH_AT")
            node.start(wait=False)
            rc, res = add.result(timeout=120)
        assert rc == 0, (res, node.logs())
        held = res["ips"][0]["address"].split("/")[0]
        assert held != orphan[0]["spec"]["address"]
        until(  # the daemon's maintenance frees it on its own schedule: polled
            lambda: {o["spec"]["address"] for o in claims(custom, "crashy")} == {held},
            lambda: (claims(custom, "crashy"), node.logs()),
            60,
            0.5,
        )
        assert "recorded nowhere" in node.logs()
        assert node.shim("DEL", ctr)[0] == 0
        assert claims(custom, "crashy") == []


# ------------------------------------------------------------------------------------------------ GC


def test_cluster_gc_frees_a_gone_pods_address_never_a_live_one(
    api: ApiServer, custom: Any, core: Any, tmp_path: Path
) -> None:
    """Node b goes down holding addresses of two pods. One pod is deleted meanwhile: `netcomp ipam gc` on node a
    frees its address. The other pod still exists on node b: its address is never freed, node down or not."""
    for n in ("node-a", "node-b"):
        core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": n}})
    pods = []
    for name in ("gone", "alive"):
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {"nodeName": "node-b", "containers": [{"name": "c", "image": "registry.invalid/none"}]},
        }
        pods.append(core.create_namespaced_pod("default", pod))
    try:
        with (
            shared_network(custom, network("gcnet", "10.101.0.0/28")),
            nodes(tmp_path, api, ["node-a", "node-b"], "gcnet", ipamGrace=0.1) as labs,
        ):
            a, b = labs
            assert b.daemon.addresses.allocator.node_in_cluster
            for p in pods:
                args = f"IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={p.metadata.name};" \
                       f"K8S_POD_UID={p.metadata.uid};NETCOMP_NETWORKS=gcnet"  # fmt: skip
                assert b.shim("ADD", b.lab.container(), args=args)[0] == 0
            b.daemon.stop(drain=5)  # node b is down; its claims stay, written behind as it stopped
            core.delete_namespaced_pod("gone", "default", grace_period_seconds=0)
            assert len(claims(custom, "gcnet")) == 2  # node a does not follow node b's block: the GC reads it
            report = a.daemon.addresses.gc_cluster()
            assert [(f["pod"], f["node"]) for f in report["freed"]] == [("default/gone", "node-b")], report
            left = claims(custom, "gcnet")
            assert [o["spec"]["pod"]["name"] for o in left] == ["alive"]
            core.delete_node("node-b")  # even with its node gone, a pod that exists keeps its address
            assert a.daemon.addresses.gc_cluster()["freed"] == []
            for o in claims(custom, "gcnet"):  # what is left, whatever kind of object records it
                for kind in (CLAIMS, BLOCKS):
                    with contextlib.suppress(Exception):
                        custom.delete_cluster_custom_object(*kind, o["metadata"]["name"])
    finally:
        for name in ("gone", "alive"):
            with contextlib.suppress(Exception):
                core.delete_namespaced_pod(name, "default", grace_period_seconds=0)
        for n in ("node-a", "node-b"):
            with contextlib.suppress(Exception):
                core.delete_node(n)


def test_an_object_of_another_network_at_a_claims_name_is_never_touched(
    api: ApiServer, custom: Any, tmp_path: Path
) -> None:
    squatter = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "AddressClaim",
        "metadata": {"name": "owned.v4-10-102-0-2"},
        "spec": {"network": "someone-else", "address": "10.102.0.2", "node": "x", "containerID": "y"},
    }
    custom.create_cluster_custom_object(*CLAIMS, squatter)
    try:
        with (
            shared_network(custom, network("owned", "10.102.0.0/29", rangeEnd="10.102.0.3")),
            nodes(tmp_path, api, ["node-a"], "owned") as labs,
        ):
            dl = labs[0]
            ctr = dl.lab.container()
            rc, res = dl.shim("ADD", ctr, args="NETCOMP_NETWORKS=owned")
            assert rc == 0 and addresses(dl, ctr) == ["10.102.0.3"], res  # .2 is the squatter's, .1 the gateway
            other = dl.lab.container()
            rc, err = dl.shim("ADD", other, args="NETCOMP_NETWORKS=owned")
            assert rc == 1 and err["code"] == 11 and "no free address" in err["msg"]
            assert dl.shim("DEL", ctr)[0] == 0
            left = custom.get_cluster_custom_object(*CLAIMS, "owned.v4-10-102-0-2")
            assert left["spec"]["network"] == "someone-else"  # never touched
    finally:
        custom.delete_cluster_custom_object(*CLAIMS, "owned.v4-10-102-0-2")


def test_a_node_without_a_cluster_keeps_claims_in_a_local_store(tmp_path: Path) -> None:
    """No cluster: the same allocation, claims as files in ipamDir; exhaustion names the pool; nothing left."""
    from tests.lab.intents import intent

    with daemon_lab(tmp_path, extra={"ipamDir": str(tmp_path / "claims"), "defaultNetwork": None}) as dl:
        spec = f"{{type: macvlan, hostDevice: {dl.lab.master}, ipam: {{type: cluster, subnet: 10.103.0.0/29}}}}"
        (dl.base / "networks.d" / "80-local.yaml").write_text(intent("local", spec))
        assert "local" in dl.daemon.reload().networks
        ctrs = [dl.lab.container() for _ in range(6)]
        got = []
        for ctr in ctrs[:5]:
            assert dl.shim("ADD", ctr, args="NETCOMP_NETWORKS=local")[0] == 0
            got += addresses(dl, ctr)
        assert sorted(got, key=ipaddress.ip_address) == [f"10.103.0.{i}" for i in range(2, 7)]
        rc, err = dl.shim("ADD", ctrs[5], args="NETCOMP_NETWORKS=local")
        assert rc == 1 and "no free address in 10.103.0.0/29 (5 addresses, all claimed)" in err["msg"]
        assert len(list((tmp_path / "claims").glob("*.claim"))) == 5
        local = next(n for n in dl.daemon.status()["networks"] if n["name"] == "local")
        assert local["addresses"] == "cluster (node-local store)"
        for ctr in ctrs:
            assert dl.shim("DEL", ctr)[0] == 0
        assert list((tmp_path / "claims").glob("*.claim")) == []
        assert dl.daemon.addresses.show(dl.daemon.state.networks())["store"] == "node-local"


def test_the_node_registered_after_the_daemon_started_is_followed(
    api: ApiServer, custom: Any, core: Any, tmp_path: Path
) -> None:
    """A daemon usually starts before its kubelet registers the Node: once the Node exists the node's records (its
    block's object) say it is a Node of the cluster (so other nodes may free what it held when it is gone), with no
    restart; a Node deleted again is followed too."""
    with (
        shared_network(custom, network("latenode", "10.102.0.0/28")),
        nodes(tmp_path, api, ["late"], "latenode") as labs,
    ):
        (dl,) = labs
        seen: list[bool] = []
        changed = threading.Condition()

        def note(exists: bool) -> None:
            with changed:
                seen.append(exists)
                changed.notify_all()

        node_watch = dl.daemon.cluster.node if dl.daemon.cluster is not None else None
        assert node_watch is not None
        node_watch.on_change(note)
        assert seen == [False] and not dl.daemon.addresses.allocator.node_in_cluster
        args = "IgnoreUnknown=1;NETCOMP_NETWORKS=latenode"

        def blocks_say() -> set[bool]:
            """What the node's block objects say of it, once its writes behind are done."""
            assert dl.daemon.addresses.flush(30)
            items = custom.list_cluster_custom_object(*BLOCKS)["items"]
            return {b["spec"]["nodeInCluster"] for b in items if b["spec"]["network"] == "latenode"}

        assert dl.shim("ADD", "before", netns=f"/var/run/netns/{dl.lab.container()}", args=args)[0] == 0
        assert blocks_say() == {False}
        core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "late"}})
        try:
            with changed:
                assert changed.wait_for(lambda: seen[-1] is True, 30), seen
            assert dl.daemon.addresses.allocator.node_in_cluster
            assert dl.shim("ADD", "after", netns=f"/var/run/netns/{dl.lab.container()}", args=args)[0] == 0
            assert blocks_say() == {True}  # the block's record, written again, says so now
        finally:
            core.delete_node("late")
        with changed:
            assert changed.wait_for(lambda: seen[-1] is False, 30), seen
        assert not dl.daemon.addresses.allocator.node_in_cluster
        for cid in ("before", "after"):
            assert dl.shim("DEL", cid)[0] == 0


def test_a_node_named_longer_than_a_label_value_can_claim(custom: Any) -> None:
    """A node's name may be a 253-character DNS name; a label value holds 63. An AddressClaim (and an
    AddressBlock) of such a node is labelled with a hash of the name, as its EndpointSlices are, the name in its
    spec, and the API server takes it (with the name as the label it answered 422: the node could claim no
    address at all)."""
    from netcomp.ipam import blockobjects, claimobjects
    from netcomp.ipam.blockstate import BlockRecord
    from netcomp.ipam.store import Claim
    from netcomp.kube.group import node_label

    node = "worker-" + "x" * 60 + ".rack-7.dc-east.example.internal"
    claim = Claim("longnode.v4-10-9-0-5", "longnode", "10.9.0.5", node, "c1", "net0")
    block = BlockRecord("longnode.v4-10-9-0-0-28", "longnode", "10.9.0.0/28", node, True)
    made = []
    try:
        for plural, obj in (
            ("addressclaims", claimobjects.to_object(claim)),
            ("addressblocks", blockobjects.to_object(block)),
        ):
            got = custom.create_cluster_custom_object(GROUP, VERSION, plural, obj)
            made.append((plural, got["metadata"]["name"]))
            assert got["spec"]["node"] == node
            assert got["metadata"]["labels"] == {"netcomp.io/network": "longnode", "netcomp.io/node": node_label(node)}
            assert node_label(node).startswith("h-")
        back = claimobjects.from_object(custom.get_cluster_custom_object(GROUP, VERSION, "addressclaims", claim.name))
        assert back is not None and back.node == node
    finally:
        for plural, name in made:
            with contextlib.suppress(Exception):
                custom.delete_cluster_custom_object(GROUP, VERSION, plural, name)
