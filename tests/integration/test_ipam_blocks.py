"""Addresses from blocks (ipam: {type: cluster}, AddressBlock objects) against a real kube-apiserver and etcd,
daemons with their own node names each serving its own lab netns with the real plugins: a small pool filled to
its last address by three nodes at once (borrowing), ADDs and DELs while the API server is away, a block object
deleted or taken over behind its node's back, the daemon killed between claiming a block and recording it,
between releasing one and recording that, and in the middle of writing behind, an AddressClaim of an earlier
version honoured."""

from __future__ import annotations

import concurrent.futures
import contextlib
import ipaddress
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from netcomp.ipam.blocks import block_name
from netcomp.ipam.claimobjects import labels_of
from netcomp.kube.group import NETWORK as LABEL_NETWORK
from tests.lab.addrs import BLOCKS, CLAIMS
from tests.lab.clusternodes import (
    addresses,
    cached_claims,
    claims,
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


def blocks(custom: Any, net: str) -> list[dict[str, Any]]:
    return [b for b in custom.list_cluster_custom_object(*BLOCKS)["items"] if b["spec"]["network"] == net]


def in_block(address: str, block: dict[str, Any]) -> bool:
    return ipaddress.ip_address(address) in ipaddress.ip_network(block["spec"]["cidr"])


def test_a_small_pool_fills_to_its_last_address(api: ApiServer, custom: Any, tmp_path: Path) -> None:
    """A /27 (29 addresses, blocks of 4) served by three nodes: node-b and node-c take a block each, then 32 ADDs
    at once from all three, 30 on node-a: exactly 29 succeed, each address once, the other 3 refused with 11
    naming the pool and nothing left behind; node-a, whose blocks cannot hold 27, borrowed from the others' (lent
    entries in their records); DEL of everything empties every record."""
    with (
        shared_network(custom, network("tiny", "10.110.0.0/27")),
        nodes(tmp_path, api, ["node-a", "node-b", "node-c"], "tiny") as labs,
    ):
        results: list[tuple[DaemonLab, str, int, Any]] = []
        lock = threading.Lock()

        def add(dl: DaemonLab) -> None:
            ctr = dl.lab.container()
            rc, res = dl.shim("ADD", ctr, args="NETCOMP_NETWORKS=tiny", ready_timeout=30)
            with lock:
                results.append((dl, ctr, rc, res))

        add(labs[1]), add(labs[2])  # node-b and node-c hold a block each, with addresses to spare
        with concurrent.futures.ThreadPoolExecutor(20) as pool:  # node-a needs more than the blocks left
            list(pool.map(add, [labs[0]] * 15 + [labs[1], labs[2]] + [labs[0]] * 15))
        ok = [(dl, ctr) for dl, ctr, rc, _ in results if rc == 0]
        refused = [res for _, _, rc, res in results if rc != 0]
        got = [a for dl, ctr in ok for a in addresses(dl, ctr)]
        assert len(ok) == 29 and len(set(got)) == 29, refused[:4]
        for err in refused:
            assert err["code"] == 11 and "no free address in 10.110.0.0/27 (29 addresses, all claimed)" in err["msg"]
        for dl, ctr, rc, _ in results:
            if rc != 0:
                assert dl.lab.links(ctr) == ["lo"]
        flushed(labs)
        assert object_claims(custom, "tiny") == cached_claims(labs)
        lent = [a for b in blocks(custom, "tiny") for a in (b["spec"].get("lent") or {})]
        assert lent, "node-a borrowed"
        only_own(custom, labs)  # each node followed only its own blocks: node-a read the others' to borrow
        for dl, ctr in ok:
            assert dl.shim("DEL", ctr, ready_timeout=30)[0] == 0
        flushed(labs)
        assert claims(custom, "tiny") == []


def test_adds_and_dels_go_on_while_the_api_server_is_away(api: ApiServer, custom: Any, tmp_path: Path) -> None:
    """A node holding a block gives its addresses with the API server stopped, and takes them back at DEL, even
    once restarted meanwhile; the ADD that needs another block is refused with 11 saying why, nothing left;
    once the server is back, the records are what the node's cache says."""
    net = network("away", "10.111.0.0/24", blockSize=16)
    with shared_network(custom, net), nodes(tmp_path, api, ["node-a"], "away") as labs:
        dl = labs[0]
        first = dl.lab.container()
        assert dl.shim("ADD", first, args="NETCOMP_NETWORKS=away")[0] == 0
        flushed(labs)
        [block] = blocks(custom, "away")
        api.stop_apiserver()
        try:
            during = []
            for _ in range(4):
                ctr = dl.lab.container()
                rc, res = dl.shim("ADD", ctr, args="NETCOMP_NETWORKS=away")
                assert rc == 0, res
                during.append(ctr)
            assert dl.shim("DEL", during.pop(0))[0] == 0
            old = dl.daemon
            dl.restart()  # its record of the blocks it holds, and its cache: no API server needed
            # The stopped daemon writes nothing more and follows nothing: its record of the block, older than the
            # new daemon's, would otherwise undo entries the new one writes once the API server is back.
            worker = old.addresses.worker
            assert worker is not None and worker.closed and worker.thread is not None
            until(lambda: not worker.thread.is_alive(), "the stopped daemon's block worker ended", 30)  # type: ignore[union-attr]
            assert old.addresses.kube_blocks is not None and old.addresses.kube_blocks.selection.selector is None
            while True:  # until the block is full: the next ADD needs a block the API server would give
                ctr = dl.lab.container()
                rc, res = dl.shim("ADD", ctr, args="NETCOMP_NETWORKS=away", ready_timeout=30)
                if rc != 0:
                    break
                assert all(in_block(a, block) for a in addresses(dl, ctr))
                during.append(ctr)
            assert res["code"] == 11 and "cannot claim an address block" in res["msg"], res
            assert dl.lab.links(ctr) == ["lo"]
            held = {a for c in [first, *during] for a in addresses(dl, c)}
            net = ipaddress.ip_network(block["spec"]["cidr"])
            assert held == {str(a) for a in net if str(a) not in ("10.111.0.0", "10.111.0.1", "10.111.0.255")}
        finally:
            api.start_apiserver()
        # Restarted while the API server was away, the node has not read its block's record yet: what it gave
        # meanwhile is written behind once it has, and a flush waits for it.
        flushed(labs)
        assert object_claims(custom, "away") == cached_claims(labs)
        for ctr in [first, *during]:
            assert dl.shim("DEL", ctr)[0] == 0
        flushed(labs)
        assert claims(custom, "away") == []


def test_a_block_deleted_behind_a_nodes_back_is_claimed_again(api: ApiServer, custom: Any, tmp_path: Path) -> None:
    """An admin deletes a block a node holds: the node claims it again at once, with its containers' addresses;
    when another node holds it meanwhile, the node gives nothing from it any more and its containers' addresses
    are recorded there as lent to it."""
    with (
        shared_network(custom, network("lost", "10.112.0.0/24", blockSize=16)),
        nodes(tmp_path, api, ["node-a"], "lost") as labs,
    ):
        dl = labs[0]
        ctrs = [dl.lab.container() for _ in range(2)]
        for ctr in ctrs:
            assert dl.shim("ADD", ctr, args="NETCOMP_NETWORKS=lost")[0] == 0
        mine = {a for ctr in ctrs for a in addresses(dl, ctr)}
        flushed(labs)
        [block] = blocks(custom, "lost")
        name, uid = block["metadata"]["name"], block["metadata"]["uid"]
        custom.delete_cluster_custom_object(*BLOCKS, name)
        # The node reacts to the watch on its own schedule: polled.
        until(lambda: [b for b in blocks(custom, "lost") if b["metadata"]["uid"] != uid], "claimed again", 30, 0.2)
        flushed(labs)
        [block] = blocks(custom, "lost")
        assert block["spec"]["node"] == "node-a" and set(block["spec"]["used"]) == mine

        # Now another node takes it over (etcd restored from a backup where node-z held it, say).
        taken = {**block, "spec": {**block["spec"], "node": "node-z", "used": {}, "lent": {}, "requests": {}}}
        custom.replace_cluster_custom_object(*BLOCKS, name, taken)
        until(
            lambda: set(blocks_by_name(custom, "lost")[name]["spec"].get("lent") or {}) == mine,
            lambda: blocks_by_name(custom, "lost")[name],
            30,
            0.2,
        )
        lent = blocks_by_name(custom, "lost")[name]["spec"]["lent"]
        assert {e["node"] for e in lent.values()} == {"node-a"}
        ctr = dl.lab.container()
        assert dl.shim("ADD", ctr, args="NETCOMP_NETWORKS=lost")[0] == 0
        [new] = addresses(dl, ctr)
        assert not in_block(new, block)  # nothing given from the block node-z holds
        for c in [*ctrs, ctr]:
            assert dl.shim("DEL", c)[0] == 0
        flushed(labs)
        assert not blocks_by_name(custom, "lost")[name]["spec"].get("lent")  # given back to node-z
        custom.delete_cluster_custom_object(*BLOCKS, name)


def blocks_by_name(custom: Any, net: str) -> dict[str, dict[str, Any]]:
    return {b["metadata"]["name"]: b for b in blocks(custom, net)}


def test_an_address_claim_of_an_earlier_version_is_honoured(api: ApiServer, custom: Any, tmp_path: Path) -> None:
    """An AddressClaim made before blocks (a node upgraded in place) keeps its address: no block gives it, `ipam
    show` lists it; once deleted, the address is given again."""
    old = {
        "apiVersion": f"{CLAIMS[0]}/{CLAIMS[1]}",
        "kind": "AddressClaim",
        "metadata": {"name": "legacy.v4-10-113-0-2", "labels": {LABEL_NETWORK: "legacy"}},
        "spec": {"network": "legacy", "address": "10.113.0.2", "node": "old-node", "containerID": "c0",
                 "interface": "net0"},
    }  # fmt: skip
    custom.create_cluster_custom_object(*CLAIMS, old)
    try:
        net = network("legacy", "10.113.0.0/29", rangeEnd="10.113.0.3")
        with shared_network(custom, net), nodes(tmp_path, api, ["node-a"], "legacy") as labs:
            dl = labs[0]
            ctr, other = dl.lab.container(), dl.lab.container()
            assert dl.shim("ADD", ctr, args="NETCOMP_NETWORKS=legacy")[0] == 0
            assert addresses(dl, ctr) == ["10.113.0.3"]
            rc, err = dl.shim("ADD", other, args="NETCOMP_NETWORKS=legacy")
            assert rc == 1 and err["code"] == 11 and "no free address" in err["msg"], err
            flushed(labs)
            doc = dl.daemon.addresses.show(dl.daemon.state.networks())
            [shown] = [n for n in doc["networks"] if n["network"] == "legacy"]
            assert {(c["address"], c["node"]) for c in shown["claims"]} == {("10.113.0.2", "old-node"),
                                                                            ("10.113.0.3", "node-a")}  # fmt: skip
            custom.delete_cluster_custom_object(*CLAIMS, "legacy.v4-10-113-0-2")
            assert dl.daemon.addresses.allocator.wait_for(lambda cs: all(c.node != "old-node" for c in cs), 30)
            # The claim's deletion reaches the claims' view first, then the blocks (retake, on the same watch
            # thread, just after): the ADD is made once the block no longer takes the address.
            blocks, freed = dl.daemon.addresses.blocks, ipaddress.ip_address("10.113.0.2")
            assert blocks is not None
            until(lambda: not any(h.address(off) == freed for h in list(blocks.held.values()) for off in set(h.taken)),
                  "the block still takes 10.113.0.2")  # fmt: skip
            assert dl.shim("ADD", other, args="NETCOMP_NETWORKS=legacy")[0] == 0
            assert addresses(dl, other) == ["10.113.0.2"]
            for c in (ctr, other):
                assert dl.shim("DEL", c)[0] == 0
    finally:
        with contextlib.suppress(Exception):
            custom.delete_cluster_custom_object(*CLAIMS, "legacy.v4-10-113-0-2")


# ------------------------------------------------------------------------------------------------ crash points


@contextlib.contextmanager
def proc(api: ApiServer, tmp_path: Path, crash: str) -> Any:
    """A daemon as a process (node-k) in its lab's netns, reaching the API server through a forwarder, armed to
    kill itself at `crash`."""
    from tests.lab.procdaemon import kube_proc_node

    extra = {"defaultNetwork": None, "ipamGrace": 3}
    with kube_proc_node(api, tmp_path, "node-k", extra=extra, env={"NETCOMP_CRASH_AT": crash}) as node:
        yield node


def test_killed_between_claiming_a_block_and_recording_it(api: ApiServer, custom: Any, tmp_path: Path) -> None:
    """The daemon dies with the block's object made and its own record not written: the restarted daemon finds
    the block naming it, gives the shim's retry an address from it, and releases it once empty past the grace
    period."""
    with shared_network(custom, network("claimy", "10.114.0.0/24")), proc(api, tmp_path, "after-block-claim") as node:
        ctr = node.lab.container()
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            add = pool.submit(node.shim, "ADD", ctr, args="NETCOMP_NETWORKS=claimy")
            assert node.proc is not None and node.proc.wait(timeout=60) == -9, node.logs()
            [block] = blocks(custom, "claimy")
            assert block["spec"]["node"] == "node-k" and not block["spec"].get("used")
            node.env.pop("NETCOMP_CRASH_AT")
            node.start(wait=False)
            rc, res = add.result(timeout=120)
        assert rc == 0, (res, node.logs())
        assert in_block(res["ips"][0]["address"].split("/")[0], block)
        assert [b["metadata"]["uid"] for b in blocks(custom, "claimy")] == [block["metadata"]["uid"]]
        assert "which had no record of it: held again" in node.logs()
        assert node.shim("DEL", ctr)[0] == 0
        until(lambda: blocks(custom, "claimy") == [], lambda: (blocks(custom, "claimy"), node.logs()))


def test_killed_in_the_middle_of_writing_behind(api: ApiServer, custom: Any, tmp_path: Path) -> None:
    """The daemon dies after bringing one block's record up to date and before the next: the restarted daemon
    writes what its cache says into both."""
    with (
        shared_network(custom, network("wb-a", "10.115.0.0/24")),
        shared_network(custom, network("wb-b", "10.116.0.0/24")),
        proc(api, tmp_path, "mid-write-behind") as node,
    ):
        ctr = node.lab.container()
        rc, res = node.shim("ADD", ctr, args="NETCOMP_NETWORKS=wb-a,wb-b")
        assert rc == 0, (res, node.logs())
        assert node.proc is not None and node.proc.wait(timeout=60) == -9, node.logs()
        node.env.pop("NETCOMP_CRASH_AT")
        node.start()
        want = {(net, f"ctr-{ctr}") for net in ("wb-a", "wb-b")}

        def written() -> set[tuple[str, str]]:
            return {(o["spec"]["network"], o["spec"]["containerID"]) for o in claims(custom) if o["spec"]["network"]
                    in ("wb-a", "wb-b")}  # fmt: skip

        until(lambda: written() == want, lambda: (written(), node.logs()))
        assert node.shim("DEL", ctr)[0] == 0
        until(lambda: written() == set(), lambda: (written(), node.logs()))


def test_killed_with_an_ask_written_and_its_answer_not_taken(api: ApiServer, custom: Any, tmp_path: Path) -> None:
    """Every block of a /29 held (node-x's full, node-b's with one address free): node-k must borrow, writes its
    ask into node-b's block and dies before it reads the answer. The restarted daemon withdraws the ask it had
    recorded ahead and gives back a loan it does not use; the shim's retry borrows the free address, once; after
    the DEL nothing is lent and no ask is left in node-b's block."""
    x_cidr = "10.119.0.4/30"
    full = {str(a): {"containerID": f"x-{a}", "interface": "net1"} for a in ipaddress.ip_network(x_cidr)}
    x_block = {"apiVersion": "netcomp.io/v1", "kind": "AddressBlock",
               "metadata": {"name": block_name("asked", ipaddress.ip_network(x_cidr)),
                            "labels": labels_of("asked", "node-x")},
               "spec": {"network": "asked", "cidr": x_cidr, "node": "node-x", "nodeInCluster": True,
                        "used": full}}  # fmt: skip
    with shared_network(custom, network("asked", "10.119.0.0/29", blockSize=4)):
        custom.create_cluster_custom_object(*BLOCKS, x_block)
        with nodes(tmp_path, api, ["node-b"], "asked") as [b], proc(api, tmp_path, "mid-ask") as node:
            first = b.lab.container()
            assert b.shim("ADD", first, args="NETCOMP_NETWORKS=asked")[0] == 0
            assert addresses(b, first) == ["10.119.0.2"]
            ctr = node.lab.container()
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                add = pool.submit(node.shim, "ADD", ctr, args="NETCOMP_NETWORKS=asked")
                assert node.proc is not None and node.proc.wait(timeout=60) == -9, node.logs()
                node.env.pop("NETCOMP_CRASH_AT")
                node.start(wait=False)
                rc, res = add.result(timeout=120)
            assert rc == 0, (res, node.logs())
            assert [ip["address"] for ip in res["ips"]] == ["10.119.0.3/29"], res

            def b_block() -> dict[str, Any]:
                return next(x for x in blocks(custom, "asked") if x["spec"]["node"] == "node-b")["spec"]

            until(lambda: not b_block().get("requests") and list(b_block().get("lent") or {}) == ["10.119.0.3"],
                  lambda: (b_block(), node.logs()))  # fmt: skip
            assert b_block()["lent"]["10.119.0.3"]["node"] == "node-k"
            assert node.shim("DEL", ctr)[0] == 0
            until(lambda: not b_block().get("lent"), lambda: (b_block(), node.logs()))
            assert b.shim("DEL", first)[0] == 0
    for x in blocks(custom, "asked"):
        with contextlib.suppress(Exception):
            custom.delete_cluster_custom_object(*BLOCKS, x["metadata"]["name"])


def test_killed_between_releasing_a_block_and_recording_it(api: ApiServer, custom: Any, tmp_path: Path) -> None:
    """The daemon dies with an empty block's object deleted (released after the grace period) and its record of
    the blocks it holds still naming it: the restarted daemon finds the object gone and nothing of its own in
    the block, and drops it from its record instead of claiming it again."""
    with shared_network(custom, network("freed", "10.118.0.0/24")), proc(api, tmp_path, "after-block-release") as node:
        ctr = node.lab.container()
        rc, res = node.shim("ADD", ctr, args="NETCOMP_NETWORKS=freed")
        assert rc == 0, (res, node.logs())
        [block] = blocks(custom, "freed")
        name = block["metadata"]["name"]
        assert node.shim("DEL", ctr)[0] == 0
        assert node.proc is not None and node.proc.wait(timeout=60) == -9, node.logs()
        record = node.cache_dir / "ipam" / "blocks.json"
        assert blocks(custom, "freed") == [] and name in json.loads(record.read_text())["blocks"]
        node.env.pop("NETCOMP_CRASH_AT")
        node.start()
        until(lambda: "is gone from the API server and nothing here uses it" in node.logs(), node.logs)
        assert name not in json.loads(record.read_text())["blocks"]
        assert blocks(custom, "freed") == [], node.logs()


def test_an_exact_address_in_another_nodes_block_is_lent(
    api: ApiServer, admin: Any, custom: Any, tmp_path: Path
) -> None:
    """A pod asks for an address (Multus's `ips`) inside a block another node holds: that node lends exactly it,
    the lent entry names the pod; an address the other node's container has is refused with 11 before any plugin,
    saying it is taken and not by whom (the holder is no pod of the asking pod's namespace); after the DEL the
    address is given back."""
    from tests.lab.labpods import annotated, attach, detach, pod

    net = network("exact", "10.117.0.0/24", blockSize=16)
    with shared_network(custom, net), nodes(tmp_path, api, ["node-a", "node-b"], "exact") as labs:
        a, b = labs
        ctr = a.lab.container()
        assert a.shim("ADD", ctr, args="NETCOMP_NETWORKS=exact")[0] == 0  # node-a holds a block now
        [held] = addresses(a, ctr)
        flushed(labs)
        [block] = blocks(custom, "exact")
        wanted = str(ipaddress.ip_address(held) + 1)
        assert in_block(wanted, block)
        with (
            pod(admin, b, "wants", "default", **annotated([{"name": "exact", "ips": [f"{wanted}/24"]}])) as p1,
            pod(admin, b, "late", "default", **annotated([{"name": "exact", "ips": [held]}])) as p2,
        ):
            ctr1, rc, res = attach(b, p1)
            assert rc == 0, res
            assert [ip["address"] for ip in res["ips"]] == [f"{wanted}/24"]
            flushed(labs)
            lent = blocks_by_name(custom, "exact")[block["metadata"]["name"]]["spec"]["lent"]
            assert (lent[wanted]["node"], lent[wanted]["pod"]["name"]) == ("node-b", "wants")
            ctr2, rc, res = attach(b, p2)
            # Held by a container of node-a that is no pod of this namespace: taken, and by whom is not said.
            assert rc == 1 and res["code"] == 11 and f"address {held} of network 'exact' is taken" in res["msg"], res
            assert "node-a" not in res["msg"], res
            assert b.lab.links(ctr2) == ["lo"]
            detach(b, ctr1, p1)
        flushed(labs)
        assert not blocks_by_name(custom, "exact")[block["metadata"]["name"]]["spec"].get("lent")
        assert a.shim("DEL", ctr)[0] == 0


def test_a_record_whose_claims_cannot_be_read_is_kept_and_start_up_goes_on(
    api: ApiServer, custom: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A record whose claim is not whole (a hand edit: no address, an address that is not one, a block whose
    prefix no address has) cannot be read, as a record that is not JSON cannot: at start-up it is said in the log
    and left as it is, and the daemon starts and serves, the good record's address still held."""
    net = network("handed", "10.118.0.0/24", blockSize=16)
    with shared_network(custom, net), nodes(tmp_path, api, ["node-a"], "handed") as labs:
        dl = labs[0]
        ctr = dl.lab.container()
        assert dl.shim("ADD", ctr, args="NETCOMP_NETWORKS=handed")[0] == 0
        [held] = addresses(dl, ctr)
        flushed(labs)
        [good] = [e for e in dl.daemon.records.entries() if e.container_id == f"ctr-{ctr}"]
        doc = json.loads(good.to_json())
        [claim] = doc["attachments"][0]["claims"]
        hostile = [
            {k: v for k, v in claim.items() if k != "address"},
            claim | {"address": "garbage"},
            claim | {"block": claim["block"].rsplit("-", 1)[0] + "-999"},
        ]
        planted = {}
        for i, c in enumerate(hostile):
            cid = f"ctr-hostile{i}"
            one = json.loads(json.dumps(doc)) | {"containerID": cid}
            one["attachments"][0]["claims"] = [c]
            path = dl.daemon.records.path(cid, "eth0")
            path.write_text(json.dumps(one))
            planted[path] = path.read_bytes()
        with caplog.at_level("WARNING", logger="netcomp.cache"):
            dl.restart()
        for path, data in planted.items():
            assert path.read_bytes() == data
            assert f"attachment cache entry {path} cannot be read" in caplog.text
        other = dl.lab.container()
        assert dl.shim("ADD", other, args="NETCOMP_NETWORKS=handed", ready_timeout=30)[0] == 0
        assert addresses(dl, other) != [held]
        for c in (ctr, other):
            assert dl.shim("DEL", c)[0] == 0
