"""Blocks of a pool (ipam/blocks.py), a node's record of the blocks it holds (ipam/blockstate.py; written off
the allocator's lock, ipam/blockview.py) and the AddressBlock objects' shape (ipam/blockobjects.py): pure, or on
files in a temp dir. What the allocator does with
them runs against a real kube-apiserver in tests/integration/test_ipam_blocks.py and test_cluster_ipam.py."""

from __future__ import annotations

import concurrent.futures
import ipaddress
import logging
import threading
from pathlib import Path

import pytest

from netcomp.ipam import blockobjects
from netcomp.ipam.allocator import Holder
from netcomp.ipam.blockalloc import BlockAllocator
from netcomp.ipam.blocks import Layout, block_name, block_size, lowest, parse_block_name
from netcomp.ipam.blockstate import BlockRecord, Held, LocalRecord
from netcomp.ipam.blockview import BlockAsk
from netcomp.ipam.pool import Pool, network_label
from netcomp.ipam.store import Claim, Taken
from tests.lab.pools import NoStore, pool


def test_the_default_block_size_follows_the_pool() -> None:
    sizes = {
        s: block_size(pool({"subnet": s}), 0) for s in ("10.0.0.0/30", "10.0.0.0/27", "10.0.0.0/24", "10.0.0.0/16")
    }
    assert sizes == {"10.0.0.0/30": 4, "10.0.0.0/27": 4, "10.0.0.0/24": 8, "10.0.0.0/16": 64}
    assert block_size(pool({"subnet": "10.0.0.0/16"}, block=256), 0) == 256
    assert pool({"subnet": "10.0.0.0/24"}, block=1).per_address and not pool({"subnet": "10.0.0.0/24"}).per_address


def test_blocks_cover_what_the_pool_hands_out_once() -> None:
    p = pool({"subnet": "10.0.0.0/26", "gateway": "10.0.0.1", "rangeEnd": "10.0.0.50", "exclude": ["10.0.0.16/28"]})
    lay = Layout(p, 0)
    nets = list(lay.blocks("node-a"))
    assert all(n.prefixlen == 30 for n in nets) and len(set(nets)) == len(nets)
    given = {n.network_address + off for n in nets for off in range(4) if lay.usable(n) >> off & 1}
    assert given == {a for a in ipaddress.ip_network("10.0.0.0/26") if p.range_of(a) is not None}
    assert ipaddress.ip_network("10.0.0.16/30") not in nets  # excluded whole: never claimed
    assert lay.usable(ipaddress.ip_network("10.0.0.0/30")) == 0b1100  # not the network's address, not the gateway
    assert next(Layout(p, 0).blocks("node-a")) != next(Layout(p, 0).blocks("node-b"))  # nodes mostly start apart
    assert lay.block_of(ipaddress.ip_address("10.0.0.45")) == ipaddress.ip_network("10.0.0.44/30")


def test_a_subnet_smaller_than_a_block_is_one_block() -> None:
    lay = Layout(pool({"subnet": "10.9.0.0/29"}, block=64), 0)
    assert list(lay.blocks("x")) == [ipaddress.ip_network("10.9.0.0/29")]
    six = Layout(pool({"subnet": "fd00::/120"}, block=16), 0)
    assert next(six.blocks("x")).prefixlen == 124


def test_block_names_are_distinct_and_say_network_family_and_prefix() -> None:
    names = {
        block_name("n", ipaddress.ip_network("10.0.0.0/28")),
        block_name("n", ipaddress.ip_network("10.0.0.0/27")),
        block_name("m", ipaddress.ip_network("10.0.0.0/28")),
        block_name("ns/n", ipaddress.ip_network("10.0.0.0/28")),
        block_name("n", ipaddress.ip_network("fd00::a:0/124")),
    }
    assert names == {
        "n.v4-10-0-0-0-28",
        "n.v4-10-0-0-0-27",
        "m.v4-10-0-0-0-28",
        "ns.n.v4-10-0-0-0-28",
        "n.v6-fd00--a-0-124",
    }


def test_lowest_wraps_around() -> None:
    assert (lowest(0), lowest(0b1010), lowest(0b1010, 2), lowest(0b1010, 4)) == (-1, 1, 3, 1)


def test_network_labels_fit_a_label_value() -> None:
    assert network_label("team-a/storage") == "team-a.storage"
    long = network_label("a" * 40 + "/" + "b" * 40)
    assert len(long) <= 63 and long.startswith("h-") and long == network_label("a" * 40 + "/" + "b" * 40)


def test_a_claim_of_a_block_says_so_and_one_of_its_own_reads_as_before() -> None:
    c = Claim("n.v4-10-0-0-0-28", "n", "10.0.0.5", "node-a", "c1", "net0", block="n.v4-10-0-0-0-28")
    assert Claim.from_doc(c.to_doc()) == c
    old = Claim("n.v4-10-0-0-5", "n", "10.0.0.5", "node-a", "c1", "net0")
    assert "block" not in old.to_doc() and Claim.from_doc(old.to_doc()).block == ""


def test_the_node_record_of_its_blocks_round_trips(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rec = LocalRecord(tmp_path / "ipam" / "blocks.json", "node-a")
    h = Held("n.v4-10-0-0-0-28", "n", 0, ipaddress.ip_network("10.0.0.0/28"), uid="u1")
    h.lent = {3: {"node": "node-b", "request": "node-b.1"}}
    h.lending = {4: ["17", True]}
    h.taken = {5}
    rec.write(rec.encode([h]))
    assert (tmp_path / "ipam" / "blocks.json").stat().st_mode & 0o777 == 0o600
    [back] = rec.load()
    assert (back.name, back.uid, back.lent, back.taken) == (h.name, "u1", h.lent, {5})
    assert back.lending == {4: ["17", False]}  # whether the watch showed that version: not across a restart
    assert LocalRecord(tmp_path / "ipam" / "blocks.json", "node-b").load() == []  # another node's: not this one's
    (tmp_path / "ipam" / "blocks.json").write_text("{nope")
    with caplog.at_level(logging.ERROR):
        assert rec.load() == []
    assert "found again on the API server" in caplog.text


def test_an_address_block_object_round_trips() -> None:
    rec = BlockRecord("n.v4-10-0-0-0-28", "n", "10.0.0.0/28", "node-a", True,
                 used={"10.0.0.2": {"containerID": "c", "interface": "net0"}},
                 lent={"10.0.0.3": {"node": "node-b", "request": "r"}},
                 requests={"node-c.1": {"node": "node-c"}})  # fmt: skip
    obj = blockobjects.to_object(rec)
    assert obj["metadata"]["labels"] == {"netcomp.io/network": "n", "netcomp.io/node": "node-a"}
    obj["metadata"].update(uid="u", resourceVersion="9", creationTimestamp="2026-01-01T00:00:00Z")
    back = blockobjects.from_object(obj)
    assert back is not None and (back.used, back.lent, back.requests) == (rec.used, rec.lent, rec.requests)
    assert (back.uid, back.rv, back.created > 0) == ("u", "9", True)
    assert (
        blockobjects.from_object({"kind": "AddressBlock", "spec": {"network": "n", "cidr": "nope", "node": "a"}})
        is None
    )
    assert blockobjects.from_object({"kind": "AddressClaim", "spec": {}}) is None
    assert blockobjects._pointer("lent", "a/b~c") == "/spec/lent/a~1b~0c"


def test_a_block_size_is_a_power_of_two() -> None:
    from pydantic import ValidationError

    from netcomp.intent.model import ClusterIPAM

    assert ClusterIPAM.model_validate({"type": "cluster", "subnet": "10.0.0.0/24", "blockSize": 16}).blockSize == 16
    for bad in (3, 0, 8192):
        with pytest.raises(ValidationError, match=r"power of two|greater than|less than"):
            ClusterIPAM.model_validate({"type": "cluster", "subnet": "10.0.0.0/24", "blockSize": bad})


# ------------------------------------------------------------------------------------------------ the record's writes

BLOCK = "n.v4-10-0-0-0-28"


class HeldWrite(LocalRecord):
    """blocks.json whose write waits for `go`: a disk whose fsync takes as long as the test says (a slow disk
    cannot be made here on demand). Records whether the writer held the allocator's lock."""

    def __init__(self, path: Path, node: str) -> None:
        super().__init__(path, node)
        self.entered, self.go = threading.Event(), threading.Event()
        self.under_lock: list[bool] = []
        self.alloc: BlockAllocator | None = None

    def write(self, data: bytes) -> None:
        assert self.alloc is not None
        self.under_lock.append(self.alloc._lock._is_owned())  # type: ignore[attr-defined]
        self.entered.set()
        assert self.go.wait(60), "the test never let the write finish"
        super().write(data)


def holding(tmp_path: Path, record: LocalRecord, taken: dict[str, str]) -> tuple[BlockAllocator, Pool]:
    """An allocator of node-a holding 10.0.0.0/28 of network n, its list seen; `taken`: AddressClaim holders by
    address."""
    mine = LocalRecord(record.path, "node-a")
    mine.write(mine.encode([Held(BLOCK, "n", 0, ipaddress.ip_network("10.0.0.0/28"), uid="u1")]))
    p = pool({"subnet": "10.0.0.0/24"}, block=16)
    alloc = BlockAllocator(NoStore(), "node-a", record, taken=lambda network, a: taken.get(str(a)))  # type: ignore[arg-type]
    alloc.serve({"n": p})
    alloc.load([])
    alloc.seen(BlockRecord(BLOCK, "n", "10.0.0.0/28", "node-a", uid="u1", rv="1"), "list")
    alloc.listed({BLOCK}, {"n"})
    return alloc, p


def test_an_add_takes_an_address_while_the_blocks_record_is_written(tmp_path: Path) -> None:
    """An AddressClaim object taking an address of a block held makes the node write blocks.json (two fsyncs);
    an ADD's allocation (the allocator's lock) goes on while that write waits, and the write never holds it."""
    record = HeldWrite(tmp_path / "ipam" / "blocks.json", "node-a")
    taken: dict[str, str] = {}
    alloc, p = holding(tmp_path, record, taken)
    record.alloc = alloc
    taken["10.0.0.9"] = "pod default/old on node-x"
    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        try:
            saving = ex.submit(alloc.retake, "n")  # as the AddressClaim watch calls it
            assert record.entered.wait(30), "no write of the record"
            add = ex.submit(alloc.claim, p, 0, Holder("c1", "net0"))
            got = add.result(timeout=30)  # blocked behind the write: fails here
        finally:
            record.go.set()
        saving.result(timeout=30)
    assert got.block == BLOCK and got.address == "10.0.0.1"
    assert record.under_lock == [False]
    [back] = LocalRecord(record.path, "node-a").load()
    assert back.taken == {9}


def test_an_older_snapshot_of_the_record_never_lands_after_a_newer_one(tmp_path: Path) -> None:
    """Two writers of blocks.json: the one whose snapshot is older, writing last, writes nothing; a retake for a
    network without blocks held writes nothing either."""
    record = LocalRecord(tmp_path / "ipam" / "blocks.json", "node-a")
    alloc, _ = holding(tmp_path, record, {})
    with alloc._lock:
        alloc.held[BLOCK].taken = {5}
        alloc.save()
    older = alloc.snapshot()
    with alloc._lock:
        alloc.held[BLOCK].taken = {6}
        alloc.save()
    newer = alloc.snapshot()
    assert older is not None and newer is not None and older[0] < newer[0]
    alloc.write_snapshot(*newer)
    alloc.write_snapshot(*older)
    assert [h.taken for h in record.load()] == [{6}]
    assert alloc.snapshot() is None  # what is on disk is what the node holds
    before = record.path.stat().st_mtime_ns
    alloc.retake("other")
    assert alloc.snapshot() is None and record.path.stat().st_mtime_ns == before


def test_a_holder_reads_the_same_in_a_claim_object_and_a_blocks_entry() -> None:
    """An AddressClaim object's spec and an AddressBlock's entry say who holds an address the same way
    (store.holder_doc), and both read back to the same claim."""
    from netcomp.ipam import claimobjects
    from netcomp.ipam.blockstate import claim_of
    from netcomp.ipam.store import holder_doc

    c = Claim("n.v4-10-0-0-5", "n", "10.0.0.5", "node-a", "c1", "net0", "default/web", "pu", True)
    obj = claimobjects.to_object(c)
    assert {k: obj["spec"][k] for k in holder_doc(c)} == holder_doc(c)
    assert obj["spec"]["pod"] == {"namespace": "default", "name": "web", "uid": "pu"}
    obj["metadata"].update(uid="u", creationTimestamp="2026-01-01T00:00:00Z")
    back = claimobjects.from_object(obj)
    assert back is not None and back == Claim(**{**c.to_doc(), "uid": "u", "created": back.created})
    assert back.created == blockobjects.created({"creationTimestamp": "2026-01-01T00:00:00Z"}) > 0
    rec = BlockRecord("n.v4-10-0-0-0-28", "n", "10.0.0.0/28", "node-a", True)
    entry = claim_of(rec, "10.0.0.5", holder_doc(c), "node-a")
    assert (entry.container_id, entry.ifname, entry.pod, entry.pod_uid) == ("c1", "net0", "default/web", "pu")
    assert claimobjects.created({}) == 0.0 and claimobjects.created({"creationTimestamp": "nope"}) == 0.0


def test_a_block_is_claimed_from_the_names_of_the_networks_blocks(tmp_path: Path) -> None:
    """A node claiming a block reads the names of the network's blocks, never their records (it follows only its
    own): it creates no block a name is, nor one a block of another size overlaps, and when the API server refuses
    a create (another node was faster) it creates the next free one."""
    held = "n.v4-10-0-0-0-28"
    wide = block_name("n", ipaddress.ip_network("10.0.0.64/26"))  # of an earlier blockSize: covers 4 blocks
    tried: list[str] = []

    class Names(NoStore):
        kind = "fake"

        def names(self, network: str) -> set[str]:
            assert network == "n"
            return {held, wide, "n.not-a-block-name"}

        def create(self, rec: BlockRecord) -> BlockRecord:
            tried.append(rec.name)
            if len(tried) == 1:  # another node created it first
                raise Taken(BlockRecord(rec.name, "n", rec.cidr, "node-b", uid="ub", rv="7"))
            return BlockRecord(rec.name, "n", rec.cidr, "node-a", uid="ua", rv="8", token=rec.token)

    record = LocalRecord(tmp_path / "blocks.json", "node-a")
    p = pool({"subnet": "10.0.0.0/24"}, block=16)
    alloc = BlockAllocator(Names(), "node-a", record)  # type: ignore[arg-type]
    alloc.serve({"n": p})
    alloc.load([])
    alloc.listed(set(), {"n"})
    got = alloc.claim(p, 0, Holder("c1", "net0"))
    covered = {block_name("n", b) for b in ipaddress.ip_network("10.0.0.64/26").subnets(new_prefix=28)}
    assert len(tried) == 2 and not {*tried} & {held, *covered}, tried
    assert set(alloc.held) == {tried[1]} and got.block == tried[1]
    assert parse_block_name("n", wide) == ipaddress.ip_network("10.0.0.64/26")
    assert parse_block_name("n", "n.not-a-block-name") is None and parse_block_name("m", held) is None


def test_an_ask_a_killed_daemon_left_is_settled_by_the_next(tmp_path: Path) -> None:
    """A daemon killed after asking another node's block for an address (its record names the ask, written
    ahead) never used what was lent for it: the next daemon withdraws the ask, reads the block (it does not
    follow it) and gives that address back; one lent for it that a container of its cache uses stays."""
    theirs = "n.v4-10-0-0-16-28"
    lent = {"10.0.0.18": {"node": "node-a", "request": "node-a.k1"}, "10.0.0.19": {"node": "node-a", "request": "k1"}}
    given_back: list[tuple[str, str, str, object]] = []
    asked: list[tuple[str, str, object]] = []

    class Lender(NoStore):
        kind = "fake"

        def get(self, name: str) -> BlockRecord:
            requests = {} if asked else {"node-a.k1": {"node": "node-a"}}
            return BlockRecord(theirs, "n", "10.0.0.16/28", "node-b", lent=dict(lent), requests=requests, uid="ub")

        def ask(self, name: str, uid: str, key: str, request: object) -> None:
            asked.append((name, key, request))

        def update_lent(self, name: str, address: str, node: str, entry: object) -> bool:
            given_back.append((name, address, node, entry))
            return True

    record = LocalRecord(tmp_path / "blocks.json", "node-a")
    record.write(record.encode([], asking={"node-a.k1": theirs}))
    alloc = BlockAllocator(Lender(), "node-a", record)  # type: ignore[arg-type]
    alloc.serve({"n": pool({"subnet": "10.0.0.0/24"}, block=16)})
    used = Claim(theirs, "n", "10.0.0.19", "node-a", "c9", "net0", block=theirs)
    alloc.load([used])
    assert alloc.asking == {"node-a.k1": theirs}
    from netcomp.ipam.background import Worker

    worker = Worker(alloc)
    alloc.worker = worker
    assert worker._round({"write": False}, set())
    assert asked == [(theirs, "node-a.k1", None)]
    assert (theirs, "10.0.0.18", "node-a", None) in given_back
    assert [entry["containerID"] for _, addr, _, entry in given_back if addr == "10.0.0.19"] == ["c9"]  # type: ignore[index]
    assert alloc.asking == {} and LocalRecord(record.path, "node-a").load() == []
    assert "asking" in record.path.read_text() and '"node-a.k1"' not in record.path.read_text()


def test_a_read_begun_before_an_ask_or_a_loan_is_no_answer_to_it(tmp_path: Path) -> None:
    """Several ADDs read a lender's block at once, and a read may be taken in after this node wrote its ask, or
    after another read showed a loan. A record lacking the ask is its answer only from a read begun after the ask
    was written (a stale one made the ADD give up and the late grant was given back: 28 of a /27's 29), and a
    record lacking a loan takes it away only from a read begun after the loan was seen."""
    theirs = "n.v4-10-0-0-16-28"
    alloc = BlockAllocator(NoStore(), "node-a", LocalRecord(tmp_path / "blocks.json", "node-a"))  # type: ignore[arg-type]
    alloc.serve({"n": pool({"subnet": "10.0.0.0/24"}, block=16)})
    alloc.load([])
    alloc.listed(set(), {"n"})

    def record(lent: dict[str, dict[str, str]], requests: dict[str, dict[str, str]]) -> BlockRecord:
        return BlockRecord(theirs, "n", "10.0.0.16/28", "node-b", lent=lent, requests=requests, uid="ub", rv="5")

    stale = alloc.begin_read()  # another ADD's read, begun before the ask
    ask = BlockAsk("node-a.k1", theirs)
    alloc.asks[ask.key] = ask
    ask.written = alloc.reads  # as _borrow records it once the ask is written
    alloc.seen(record({}, {}), "read", stale)
    assert not ask.answered and theirs not in alloc.denied
    alloc.seen(record({}, {ask.key: {"node": "node-a"}}), "read", alloc.begin_read())
    assert not ask.answered
    grant = record({"10.0.0.18": {"node": "node-a", "request": ask.key}}, {})
    alloc.seen(grant, "read", alloc.begin_read())
    assert ask.answered and ask.granted == [(theirs, 2)]
    alloc.seen(record({}, {}), "read", stale)  # taken in last, begun first
    assert (theirs, 2) in alloc.borrowed
    alloc.seen(record({}, {}), "read", alloc.begin_read())  # begun after: it is not lent any more
    assert (theirs, 2) not in alloc.borrowed
