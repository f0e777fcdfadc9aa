"""What used to rest on every node following every block of its networks, shown with nodes that follow only their
own blocks (the AddressBlock objects labelled with their node's name) against a real kube-apiserver: two nodes
taking the last free block at once, neither watching the other; borrowing when every block is held; a block
moved to another node behind its node's back found and handed over; a gone node's blocks freed by the cluster
GC's read. Each node's view holds its own blocks only. The /27 filled to its last address by three nodes:
tests/integration/test_ipam_blocks.py."""

from __future__ import annotations

import concurrent.futures
import ipaddress
from pathlib import Path
from typing import Any

import pytest

from netcomp.ipam.blocks import block_name
from netcomp.ipam.claimobjects import labels_of
from tests.lab.addrs import BLOCKS
from tests.lab.clusternodes import (
    addresses,
    cached_claims,
    flushed,
    network,
    nodes,
    object_claims,
    only_own,
    shared_network,
)
from tests.lab.daemonlab import DaemonLab
from tests.lab.kubeapi import ApiServer
from tests.lab.poll import until

pytestmark = pytest.mark.root


def block_obj(net: str, cidr: str, node: str, **spec: Any) -> dict[str, Any]:
    """Another node's block as that node writes it (labelled with its name)."""
    name = block_name(net, ipaddress.ip_network(cidr))
    return {"apiVersion": "netcomp.io/v1", "kind": "AddressBlock",
            "metadata": {"name": name, "labels": labels_of(net, node)},
            "spec": {"network": net, "cidr": cidr, "node": node, "nodeInCluster": True, **spec}}  # fmt: skip


def full(cidr: str) -> dict[str, Any]:
    """A `used` naming every address of the block."""
    return {str(a): {"containerID": f"x-{a}", "interface": "net1"} for a in ipaddress.ip_network(cidr)}


def blocks(custom: Any, net: str) -> dict[str, dict[str, Any]]:
    return {b["metadata"]["name"]: b for b in custom.list_cluster_custom_object(*BLOCKS)["items"]
            if b["spec"]["network"] == net}  # fmt: skip


def add(dl: DaemonLab, net: str) -> tuple[str, int, Any]:
    ctr = dl.lab.container()
    rc, res = dl.shim("ADD", ctr, args=f"NETCOMP_NETWORKS={net}", ready_timeout=30)
    return ctr, rc, res


def entries(custom: Any, net: str) -> list[str]:
    """Every address the network's blocks give (used or lent), with repeats."""
    return [a for b in blocks(custom, net).values() for k in ("used", "lent") for a in (b["spec"].get(k) or {})]


def test_two_nodes_take_the_last_free_block_at_once(api: ApiServer, custom: Any, tmp_path: Path) -> None:
    """A /28 in blocks of 4, three of them held (full) by another node: node-a and node-b, neither watching the
    other, both need a block at once and both reach for the last one. The API server's refusal of a second
    object of its name decides: one holds it, the other borrows from it; four ADDs at once from both fill it to
    its last address, each address once, and the fifth is refused."""
    with shared_network(custom, network("race", "10.130.0.0/28", blockSize=4)):
        for cidr in ("10.130.0.0/30", "10.130.0.4/30", "10.130.0.12/30"):
            custom.create_cluster_custom_object(*BLOCKS, block_obj("race", cidr, "node-x", used=full(cidr)))
        with nodes(tmp_path, api, ["node-a", "node-b"], "race") as labs:
            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                results = list(pool.map(lambda dl: (dl, *add(dl, "race")), labs * 2))
            assert [r[2] for r in results] == [0] * 4, [r[3] for r in results]
            got = [a for dl, ctr, _, _ in results for a in addresses(dl, ctr)]
            assert sorted(got, key=ipaddress.ip_address) == [f"10.130.0.{i}" for i in range(8, 12)]
            _, rc, res = add(labs[0], "race")
            assert rc != 0 and res["code"] == 11, res
            flushed(labs)
            last = blocks(custom, "race")[block_name("race", ipaddress.ip_network("10.130.0.8/30"))]
            holder = last["spec"]["node"]
            assert holder in ("node-a", "node-b")
            lent = last["spec"].get("lent") or {}
            assert lent and {e["node"] for e in lent.values()} == {"node-a", "node-b"} - {holder}
            assert sorted(entries(custom, "race")) == sorted({*entries(custom, "race")})
            assert object_claims(custom, "race") >= cached_claims(labs)
            only_own(custom, labs)
            for dl, ctr, _, _ in results:
                assert dl.shim("DEL", ctr)[0] == 0
            flushed(labs)
            assert not (blocks(custom, "race")[last["metadata"]["name"]]["spec"].get("lent") or {})
        for name in blocks(custom, "race"):
            custom.delete_cluster_custom_object(*BLOCKS, name)


def test_borrowing_when_every_block_is_held(api: ApiServer, custom: Any, tmp_path: Path) -> None:
    """A /29 in blocks of 4, one held by each of two nodes: node-a, its own block full, reads node-b's block
    (it does not follow it) and borrows until the pool is full, exactly its five addresses given in all; what it
    borrowed is in node-b's record as lent to it, and its DELs give it back."""
    with (
        shared_network(custom, network("lend", "10.131.0.0/29", blockSize=4)),
        nodes(tmp_path, api, ["node-a", "node-b"], "lend") as labs,
    ):
        a, b = labs
        first_b = add(b, "lend")
        assert first_b[1] == 0, first_b[2]
        mine = []
        while (got := add(a, "lend"))[1] == 0:
            mine.append(got[0])
        assert got[2]["code"] == 11 and "all claimed" in got[2]["msg"], got[2]
        given = [x for c in mine for x in addresses(a, c)] + addresses(b, first_b[0])
        assert len(given) == len(set(given)) == 5, given
        flushed(labs)
        held_b = next(x for x in blocks(custom, "lend").values() if x["spec"]["node"] == "node-b")
        lent = held_b["spec"].get("lent") or {}
        assert lent and {e["node"] for e in lent.values()} == {"node-a"}
        assert object_claims(custom, "lend") == cached_claims(labs)
        only_own(custom, labs)
        for c in mine:
            assert a.shim("DEL", c)[0] == 0
        flushed(labs)
        held_b = blocks(custom, "lend")[held_b["metadata"]["name"]]
        assert not (held_b["spec"].get("lent") or {})


def test_a_block_moved_to_another_node_is_found_and_handed_over(api: ApiServer, custom: Any, tmp_path: Path) -> None:
    """An admin moves node-a's block to node-z, labels and all (etcd restored from a backup, say): the block
    leaves node-a's watch, node-a finds by its create's refusal that node-z holds it, gives nothing from it any
    more and records its containers' addresses there as lent to it; its DELs give them back."""
    with (
        shared_network(custom, network("moved", "10.132.0.0/24", blockSize=16)),
        nodes(tmp_path, api, ["node-a"], "moved") as labs,
    ):
        (dl,) = labs
        ctrs = [add(dl, "moved")[0] for _ in range(2)]
        mine = {x for c in ctrs for x in addresses(dl, c)}
        flushed(labs)
        [(name, block)] = blocks(custom, "moved").items()
        moved = {**block, "metadata": {**block["metadata"], "labels": labels_of("moved", "node-z")},
                 "spec": {**block["spec"], "node": "node-z", "used": {}, "lent": {}, "requests": {}}}  # fmt: skip
        custom.replace_cluster_custom_object(*BLOCKS, name, moved)

        def lent() -> set[str]:
            return set(blocks(custom, "moved")[name]["spec"].get("lent") or {})

        until(lambda: lent() == mine, lambda: blocks(custom, "moved")[name], 30, 0.2)
        ctr, rc, res = add(dl, "moved")
        assert rc == 0, res
        assert ipaddress.ip_address(addresses(dl, ctr)[0]) not in ipaddress.ip_network(block["spec"]["cidr"])
        for c in [*ctrs, ctr]:
            assert dl.shim("DEL", c)[0] == 0
        flushed(labs)
        assert lent() == set()
        custom.delete_cluster_custom_object(*BLOCKS, name)


def test_a_gone_nodes_blocks_are_freed(api: ApiServer, custom: Any, core: Any, tmp_path: Path) -> None:
    """The cluster GC reads the blocks (no node follows them) and frees those of a node that was a Node of the
    cluster and is gone: its addresses in use, then its emptied block; a live Node's block is left whole."""
    gone_cidr, live_cidr = "10.133.0.0/28", "10.133.0.16/28"
    core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "live-node"}})
    try:
        with shared_network(custom, network("gcb", "10.133.0.0/24", blockSize=16)):
            used = {"10.133.0.5": {"containerID": "c-gone", "interface": "net1"}}
            custom.create_cluster_custom_object(*BLOCKS, block_obj("gcb", gone_cidr, "gone-node", used=used))
            live = {"10.133.0.20": {"containerID": "c-live", "interface": "net1"}}
            custom.create_cluster_custom_object(*BLOCKS, block_obj("gcb", live_cidr, "live-node", used=live))
            with nodes(tmp_path, api, ["node-a"], "gcb") as labs:
                (dl,) = labs

                def collected() -> dict[str, Any] | None:
                    doc = dl.daemon.addresses.gc_cluster()
                    return doc if [b for b in doc.get("freedBlocks", []) if b.startswith("gcb.")] else None

                doc = until(collected, "the gone node's block freed", 30, 0.5)
                assert doc["freedBlocks"] == [block_name("gcb", ipaddress.ip_network(gone_cidr))], doc
                assert [f["address"] for f in doc["freed"] if f["network"] == "gcb"] == ["10.133.0.5"], doc
                left = blocks(custom, "gcb")
                assert [b["spec"]["node"] for b in left.values()] == ["live-node"]
                assert set(next(iter(left.values()))["spec"]["used"]) == {"10.133.0.20"}
                only_own(custom, labs)
    finally:
        core.delete_node("live-node")
        for name in blocks(custom, "gcb"):
            custom.delete_cluster_custom_object(*BLOCKS, name)
