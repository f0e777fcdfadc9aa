"""IPAMClaims that nobody on a live node finishes, against a real kube-apiserver and etcd, node daemons each serving
its own lab netns with the real plugins, the tests playing the runtime: a claim of a node gone for good (its Node
deleted) that is deleted, finished by the cluster's GC once no running pod uses its address (its finalizer taken
off, its address freed, the gone node's block deleted once empty), and a claim whose first ADD's label and
finalizer write lost its answer, taken off again by that node so that another node's ADD gives it its address."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from netcomp.ipam.ipamclaimapi import FINALIZER, Away
from netcomp.kube.group import NODE, node_label
from tests.lab.addrs import BLOCKS
from tests.lab.claimlab import (
    CLAIMS,
    add,
    block_entry,
    claim_entries,
    claim_gone,
    delete,
    gone,
    ipam_claim,
    launcher,
    read_claim,
)
from tests.lab.clusternodes import addresses, flushed, network, nodes, shared_network
from tests.lab.daemonlab import DaemonLab
from tests.lab.kubeapi import ApiServer
from tests.lab.poll import until

pytestmark = pytest.mark.root


@contextlib.contextmanager
def cluster_nodes(core: Any, names: list[str]) -> Iterator[None]:
    """Node objects of those names (the GC judges a node gone only when it was one)."""
    for n in names:
        core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": n}})
    try:
        yield
    finally:
        for n in names:
            with contextlib.suppress(Exception):
                core.delete_node(n)


def blocks_of(custom: Any, node: str) -> list[str]:
    got = custom.list_cluster_custom_object(*BLOCKS, label_selector=f"{NODE}={node_label(node)}")["items"]
    return [b["metadata"]["name"] for b in got]


def given_then_gone(
    core: Any, custom: Any, x: DaemonLab, y: DaemonLab, claim: str, net: str, before_gc: Callable[[], None]
) -> tuple[str, dict[str, Any]]:
    """The claim given its address on node x by a pod whose DEL ran (its pod object stays, on x), then x gone for
    good (its daemon stopped, its Node deleted), the claim deleted, `before_gc` and the cluster's GC run on node
    y: the address, read inside the pod's namespace, and the GC's report."""
    x_name = x.daemon.settings.nodeName
    with launcher(core, f"{claim}-1", x_name, claim, net) as p1:
        ctr1, rc, res = add(x, p1)
        assert rc == 0, res
        [addr] = addresses(x, ctr1, "net1")
        delete(x, ctr1, p1)
        flushed([x, y])
        assert blocks_of(custom, x_name) != []
        x.daemon.stop(drain=5)
        core.delete_node(x_name)
        custom.delete_namespaced_custom_object(*CLAIMS, claim)
        got = read_claim(custom, claim)  # the finalizer holds it
        assert got["metadata"].get("deletionTimestamp") and FINALIZER in got["metadata"]["finalizers"]
        before_gc()
        report = y.daemon.addresses.gc_cluster()  # the pod's object is on the gone node: no pod uses it
    assert "error" not in report, report
    return addr, report


def test_a_deleted_claim_of_a_gone_node_is_finished_by_the_gc(
    api: ApiServer, admin: Any, core: Any, custom: Any, claim_crd: None, tmp_path: Path
) -> None:
    """node-p gives a claim its address and goes for good; the claim is deleted: one run of the cluster's GC on
    node-q takes netcomp's finalizer off (the claim goes), frees the address and deletes node-p's emptied block,
    and a pod on node-q may get that address. A claim node-p was giving its first address (its label and the
    finalizer, no status) is let go by the same run, and node-q's ADD naming it then gives it one."""
    with (
        cluster_nodes(core, ["node-p", "node-q"]),
        shared_network(custom, network("gcnet", "10.131.0.0/28", blockSize=16)),
        nodes(tmp_path, api, ["node-p", "node-q"], "gcnet", ipamGrace=0.1) as (p, q),
        ipam_claim(custom, "vm-p", "gcnet") as claim,
        ipam_claim(custom, "vm-p0", "gcnet"),
    ):
        mark = {"metadata": {"labels": {NODE: "node-p"}, "finalizers": [FINALIZER]}}
        addr, report = given_then_gone(
            core, custom, p, q, "vm-p", "gcnet", lambda: custom.patch_namespaced_custom_object(*CLAIMS, "vm-p0", mark)
        )
        assert unmarked(custom, "vm-p0")
        assert [f["address"] for f in report["freed"]] == [addr], report
        until(lambda: claim_gone(custom, "vm-p"), "the claim gone", 30)
        assert claim_entries(custom, claim["metadata"]["uid"]) == []
        assert block_entry(custom, "gcnet", addr) is None
        assert blocks_of(custom, "node-p") == [] and len(report["freedBlocks"]) == 1, report
        ctr = q.lab.container()
        rc, res = q.shim("ADD", ctr, args="NETCOMP_NETWORKS=gcnet", ready_timeout=30)  # the /28 is q's now
        assert rc == 0, res
        assert addresses(q, ctr) == [addr]  # the lowest usable address, free again
        assert q.shim("DEL", ctr, args="NETCOMP_NETWORKS=gcnet", ready_timeout=30)[0] == 0
        with launcher(core, "vm-p0-1", "node-q", "vm-p0", "gcnet") as p0:
            ctr0, rc, res = add(q, p0)
            assert rc == 0, res
            [addr0] = addresses(q, ctr0, "net1")
            assert read_claim(custom, "vm-p0")["status"]["ips"] == [f"{addr0}/28"]
            delete(q, ctr0, p0)


def test_a_deleted_claim_of_a_gone_node_waits_for_its_running_pod(
    api: ApiServer, admin: Any, core: Any, custom: Any, claim_crd: None, tmp_path: Path
) -> None:
    """The same, but the claim's pod was made again on live node-v first and still runs: the claim's deletion
    waits (its finalizer stays, the address stays that pod's, in its namespace and in the block) through GC runs,
    until the pod is gone (its DEL, its object deleted); the next GC run finishes it."""
    with (
        cluster_nodes(core, ["node-u", "node-v"]),
        shared_network(custom, network("waitnet", "10.132.0.0/24", blockSize=16)),
        nodes(tmp_path, api, ["node-u", "node-v"], "waitnet", ipamGrace=0.1) as (u, v),
        ipam_claim(custom, "vm-u", "waitnet") as claim,
    ):
        with launcher(core, "vm-u-1", "node-u", "vm-u", "waitnet") as p1:
            ctr1, rc, res = add(u, p1)
            assert rc == 0, res
            [addr] = addresses(u, ctr1, "net1")
            delete(u, ctr1, p1)
            gone(core, p1)
        flushed([u, v])
        u.daemon.stop(drain=5)
        core.delete_node("node-u")
        entry = block_entry(custom, "waitnet", addr)
        with launcher(core, "vm-u-2", "node-v", "vm-u", "waitnet") as p2:
            ctr2, rc, res = add(v, p2)
            assert rc == 0, res
            assert addresses(v, ctr2, "net1") == [addr]
            until(lambda: read_claim(custom, "vm-u")["status"]["ownerPod"] == {"name": "vm-u-2"}, "ownerPod", 30)
            custom.delete_namespaced_custom_object(*CLAIMS, "vm-u")
            for _ in range(2):
                report = mine(v.daemon.addresses.gc_cluster(), "waitnet")
                assert report["freed"] == [] and report["freedBlocks"] == [], report
            got = read_claim(custom, "vm-u")
            assert got["metadata"].get("deletionTimestamp") and FINALIZER in got["metadata"]["finalizers"]
            assert block_entry(custom, "waitnet", addr) == entry
            assert addresses(v, ctr2, "net1") == [addr]
            delete(v, ctr2, p2)
            gone(core, p2)
        report = mine(v.daemon.addresses.gc_cluster(), "waitnet")
        assert [f["address"] for f in report["freed"]] == [addr], report
        until(lambda: claim_gone(custom, "vm-u"), "the claim gone", 30)
        assert claim_entries(custom, claim["metadata"]["uid"]) == []
        assert blocks_of(custom, "node-u") == [] and len(report["freedBlocks"]) == 1, report


def mine(report: dict[str, Any], net: str) -> dict[str, Any]:
    """A GC report, only what it says of network `net` (an earlier test's nodes are gone too)."""
    assert "error" not in report, report
    freed = [f for f in report["freed"] if f["network"] == net]
    return {"freed": freed, "freedBlocks": [b for b in report["freedBlocks"] if b.startswith(f"{net}.")]}


def unmarked(custom: Any, name: str) -> bool:
    meta = read_claim(custom, name)["metadata"]
    return NODE not in (meta.get("labels") or {}) and FINALIZER not in (meta.get("finalizers") or [])


def first_mark_answer_lost(core: Any, dl: DaemonLab, claim: str, net: str) -> tuple[str, int, Any]:
    """An ADD on dl naming the claim whose first mark (label and finalizer) reaches the API server and whose answer
    is lost: the container, the shim's code and answer."""
    claims = dl.daemon.addresses.ipam_claims
    assert claims is not None
    mark = claims.api.mark

    def answer_lost(*args: Any, **kwargs: Any) -> Any:
        claims.api.mark = mark  # type: ignore[method-assign]
        mark(*args, **kwargs)
        raise Away("the answer was lost")

    claims.api.mark = answer_lost  # type: ignore[method-assign]
    with launcher(core, f"{claim}-1", dl.daemon.settings.nodeName, claim, net) as p1:
        return add(dl, p1)


def test_a_lost_answer_to_the_first_mark_is_taken_off_by_its_node(
    api: ApiServer, admin: Any, core: Any, custom: Any, claim_crd: None, tmp_path: Path
) -> None:
    """node-r's write of its label and netcomp's finalizer on a fresh claim reaches the API server and its answer
    is lost (its ADD answers 11, nothing taken): node-r takes both off again by itself, and node-s's ADD naming
    the claim then gives it its address, read in the pod's namespace. The same for a claim given node-r's label
    and the finalizer through the API while node-r runs."""
    with (
        shared_network(custom, network("lostnet", "10.133.0.0/24", blockSize=16)),
        nodes(tmp_path, api, ["node-r", "node-s"], "lostnet") as (r, s),
        ipam_claim(custom, "vm-r", "lostnet"),
        ipam_claim(custom, "vm-r2", "lostnet"),
    ):
        ctr1, rc, res = first_mark_answer_lost(core, r, "vm-r", "lostnet")
        assert rc != 0 and res["code"] == 11 and "the answer was lost" in res["msg"], res
        assert r.lab.links(ctr1) == ["lo"]
        until(lambda: unmarked(custom, "vm-r"), "node-r taking its label and finalizer off", 60)
        custom.patch_namespaced_custom_object(
            *CLAIMS, "vm-r2", {"metadata": {"labels": {NODE: "node-r"}, "finalizers": [FINALIZER]}}
        )
        until(lambda: unmarked(custom, "vm-r2"), "node-r taking its label and finalizer off", 60)
        for name in ("vm-r", "vm-r2"):
            with launcher(core, f"{name}-2", "node-s", name, "lostnet") as p2:
                ctr2, rc, res = add(s, p2)
                assert rc == 0, res
                [addr] = addresses(s, ctr2, "net1")
                got = read_claim(custom, name)
                assert got["status"]["ips"] == [f"{addr}/24"] and got["metadata"]["labels"][NODE] == "node-s"
                delete(s, ctr2, p2)


def test_a_lost_answer_left_while_the_daemon_was_down_is_taken_off_at_start(
    api: ApiServer, admin: Any, core: Any, custom: Any, claim_crd: None, tmp_path: Path
) -> None:
    """A node that has marked a claim once follows the claims it marks from every start on, even holding none:
    a claim that got its label and the finalizer while its daemon was down (a mark whose answer a crash lost) is
    taken off by the daemon started again, with no ADD of it."""
    with (
        shared_network(custom, network("restartnet", "10.134.0.0/24", blockSize=16)),
        nodes(tmp_path, api, ["node-t"], "restartnet") as (t,),
        ipam_claim(custom, "vm-t", "restartnet"),
        ipam_claim(custom, "vm-t2", "restartnet"),
    ):
        claims = t.daemon.addresses.ipam_claims
        assert claims is not None
        ctr1, rc, res = first_mark_answer_lost(core, t, "vm-t", "restartnet")
        assert rc != 0 and res["code"] == 11 and t.lab.links(ctr1) == ["lo"], res
        until(lambda: unmarked(custom, "vm-t"), "node-t taking its label and finalizer off", 60)
        assert not any(k.held for k in claims.kept.values())  # it holds nothing: only its marks make it follow
        t.daemon.stop(drain=5)
        custom.patch_namespaced_custom_object(
            *CLAIMS, "vm-t2", {"metadata": {"labels": {NODE: "node-t"}, "finalizers": [FINALIZER]}}
        )
        t.restart(follow=True)
        until(lambda: unmarked(custom, "vm-t2"), "node-t, started again, taking its label and finalizer off", 60)
