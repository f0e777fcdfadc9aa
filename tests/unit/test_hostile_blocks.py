"""AddressBlock and AddressClaim objects written by a hostile node (any node's credentials may write them): what
ipam/blockobjects.py and ipam/claimobjects.py take of them, and what a node's view of its networks' blocks
(ipam/blockview.py) does with what is left. Nothing such an object says makes a node give an address twice,
build an integer wider than a block, raise out of a watch, or walk a block's range under the allocator's lock.
The same against a real kube-apiserver with two daemons: tests/integration/test_hostile_blocks.py."""

from __future__ import annotations

import ipaddress
import json
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from netcomp.errors import DelegateError
from netcomp.ipam import blockobjects, claimobjects
from netcomp.ipam import pool as poolmod
from netcomp.ipam.allocator import Holder
from netcomp.ipam.blockalloc import BlockAllocator
from netcomp.ipam.blocks import Layout, block_name
from netcomp.ipam.blockstate import BlockRecord, Held, LocalRecord, Seen
from netcomp.ipam.pool import Pool
from netcomp.ipam.store import Claim
from tests.lab.hostile import JSON, Ignored, nested, pool
from tests.lab.pools import NoStore

MINE, THEIRS = "n.v4-10-0-0-0-28", "n.v4-10-0-0-16-28"


def block(name: str, cidr: str, node: str, rv: str = "1", token: str = "", **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": f"u-{name}", "resourceVersion": rv}
    meta["managedFields"] = [{"manager": "hostile"}]
    if token:
        meta["annotations"] = {blockobjects.TOKEN: token}
    return {"kind": "AddressBlock", "metadata": meta, "spec": {"network": "n", "cidr": cidr, "node": node, **spec}}


def node_a(tmp_path: Path, p: Pool | None = None) -> BlockAllocator:
    """node-a holding 10.0.0.0/28 of network n (blocks of 16 in 10.0.0.0/24), its list seen, nothing else."""
    record = LocalRecord(tmp_path / "blocks.json", "node-a")
    record.write(record.encode([Held(MINE, "n", 0, ipaddress.ip_network("10.0.0.0/28"), uid="u1")]))
    alloc = BlockAllocator(NoStore(), "node-a", record)  # type: ignore[arg-type]
    alloc.serve({"n": p or pool()})
    alloc.load([])
    alloc.seen(BlockRecord(MINE, "n", "10.0.0.0/28", "node-a", uid="u1", rv="1"), "list")
    alloc.listed({MINE}, {"n"})
    return alloc


def seen(alloc: BlockAllocator, obj: dict[str, Any], source: str = "watch") -> None:
    rec = blockobjects.from_object(obj)
    if rec is not None:
        alloc.seen(rec, source)


def test_a_lent_entry_outside_its_block_is_never_borrowed(tmp_path: Path, ignored: Ignored) -> None:
    """node-b's block lends node-a an address of node-a's own block, which node-a gave already: node-a never
    takes it as borrowed (it would give it a second time), and says so once, naming the writer."""
    alloc = node_a(tmp_path)
    p = pool()
    given = alloc.claim(p, 0, Holder("c1", "net0"))
    alloc.settle([given])
    lent = {given.address: {"node": "node-a", "request": "node-a.x"}}
    seen(alloc, block(THEIRS, "10.0.0.16/28", "node-b", lent=lent))
    assert alloc.borrowed == {}
    assert "AddressBlock" in ignored.kinds
    # the view's own defence, for a record that did not come through the decoder
    alloc.seen(BlockRecord(THEIRS, "n", "10.0.0.16/28", "node-b", lent=lent, rv="2"), "watch")
    assert alloc.borrowed == {}
    assert [c.address for c in alloc.claims("n")].count(given.address) == 1


def test_a_forged_block_with_a_live_blocks_cidr_is_never_adopted(tmp_path: Path, ignored: Ignored) -> None:
    """An object under a new name with the CIDR of node-b's live block and `node: node-a`: node-a never holds it
    (the legitimate object of a CIDR is the one named block_name(network, cidr)); nor a correctly named block of
    another size that overlaps node-b's; nor one of the network's size that node-b's block of another size
    covers, whichever order a list shows them in."""
    alloc = node_a(tmp_path)
    seen(alloc, block(THEIRS, "10.0.0.16/28", "node-b", used={"10.0.0.17": {"containerID": "b1"}}))
    for forged in ("n.stolen", "n.v4-10-0-0-16-27", THEIRS.upper()):
        seen(alloc, block(forged, "10.0.0.16/28", "node-a"))
        alloc.seen(BlockRecord(forged, "n", "10.0.0.16/28", "node-a", rv="3"), "watch")  # not through the decoder
    wide = "10.0.0.0/26"
    seen(alloc, block(block_name("n", ipaddress.ip_network(wide)), wide, "node-a"))
    assert set(alloc.held) == {MINE}
    # a list that shows the block of the network's size first, node-b's /26 over it after
    fresh = node_a(tmp_path / "b")
    inside = "10.0.0.32/28"
    seen(fresh, block(block_name("n", ipaddress.ip_network(inside)), inside, "node-a"), "list")
    seen(fresh, block("n.v4-10-0-0-0-26", "10.0.0.0/26", "node-b"), "list")
    fresh.listed({MINE, block_name("n", ipaddress.ip_network(inside)), "n.v4-10-0-0-0-26"}, {"n"})
    assert set(fresh.held) == {MINE}
    assert "AddressBlock" in ignored.kinds


def test_another_nodes_block_repointed_here_is_never_adopted(tmp_path: Path, ignored: Ignored) -> None:
    """node-b's block, its `node` re-pointed to node-a by a hostile writer, with its `used` kept or emptied (and
    listing node-a's own container, as one lent to it would): node-a never holds it, since its record does not say
    it was creating that block (it would give node-b's containers' addresses again). A block the record says
    node-a was creating (killed between the create and recording it held) is held again."""
    alloc = node_a(tmp_path)
    used = {"10.0.0.17": {"containerID": "b1", "interface": "net0"}}
    seen(alloc, block(THEIRS, "10.0.0.16/28", "node-b", used=used))
    seen(alloc, block(THEIRS, "10.0.0.16/28", "node-a", rv="2", used=used))
    seen(alloc, block(THEIRS, "10.0.0.16/28", "node-a", rv="3"))
    assert set(alloc.held) == {MINE} and "AddressBlock" in ignored.kinds
    other = "n.v4-10-0-0-32-28"
    mine = Claim(other, "n", "10.0.0.33", "node-a", "a1", "net0", block=other)
    again = node_a(tmp_path / "again")
    again.load([mine])
    seen(again, block(other, "10.0.0.32/28", "node-a", used={"10.0.0.33": {"containerID": "a1"}}))
    assert set(again.held) == {MINE}  # its container's address is in it, but node-a never recorded creating it
    made = written_ahead(tmp_path / "made", other, "t0k")
    seen(made, block(other, "10.0.0.32/28", "node-a"))  # no token: not the object node-a made
    seen(made, block(other, "10.0.0.32/28", "node-a", rv="2", token="guess"))
    assert set(made.held) == {MINE}
    seen(made, block(other, "10.0.0.32/28", "node-a", rv="3", token="t0k"))
    assert set(made.held) == {MINE, other} and made.claiming_ahead == {}


def written_ahead(tmp_path: Path, name: str, token: str) -> BlockAllocator:
    """node-a as node_a, whose record says it was creating block `name` with `token` (killed before the answer)."""
    record = LocalRecord(tmp_path / "blocks.json", "node-a")
    record.write(record.encode([Held(MINE, "n", 0, ipaddress.ip_network("10.0.0.0/28"), uid="u1")], {name: token}))
    alloc = BlockAllocator(NoStore(), "node-a", record)  # type: ignore[arg-type]
    alloc.serve({"n": pool()})
    alloc.load([])
    return alloc


def test_a_write_ahead_whose_create_never_took_adopts_nothing(tmp_path: Path, ignored: Ignored) -> None:
    """node-a's record says it was creating a block (its create never reached the API server); node-b made that
    block since and uses it; a hostile writer re-points it at node-a and empties its used: node-a does not hold
    it (the object carries node-b's token, or none), and once it has seen node-b's block its write-ahead is gone."""
    other = "n.v4-10-0-0-32-28"
    a = written_ahead(tmp_path, other, "t0k")
    seen(a, block(other, "10.0.0.32/28", "node-b", rv="2", token="b-t0k", used={"10.0.0.33": {"containerID": "b1"}}))
    assert a.claiming_ahead == {}
    seen(a, block(other, "10.0.0.32/28", "node-a", rv="3", token="b-t0k"))
    assert set(a.held) == {MINE} and "AddressBlock" in ignored.kinds
    a.write_record()
    assert json.loads((tmp_path / "blocks.json").read_text())["claiming"] == {}


def test_an_address_far_outside_its_block_costs_nothing(tmp_path: Path) -> None:
    """`used` holding 255.255.255.255 (and other addresses outside the block, other spellings, IPv6 in an IPv4
    block): ignored, and no integer wider than the block is built on the way."""
    alloc = node_a(tmp_path)
    bad = {
        a: {"containerID": "x"}
        for a in ("255.255.255.255", "0.0.0.0", "10.0.0.15", "fd00::1", "::ffff:10.0.0.17", "010.0.0.17", "nope")
    }
    tracemalloc.start()
    try:
        seen(alloc, block(THEIRS, "10.0.0.16/28", "node-b", used=bad, lent=bad, requests={"k": {"node": "z",
             "addresses": list(bad)}}))  # fmt: skip
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
    assert alloc.view[THEIRS].used == 0 and alloc.view[THEIRS].lent == {}


def test_an_ipv6_entry_in_an_ipv4_block_does_not_stop_the_watch(tmp_path: Path) -> None:
    """A record read as it is (not through the decoder) with an IPv6 key in an IPv4 block: the view takes the
    rest of it and raises nothing (the watch of every block of the network goes on)."""
    alloc = node_a(tmp_path)
    rec = BlockRecord(THEIRS, "n", "10.0.0.16/28", "node-b", used={"fd00::ffff:ffff": {}, "10.0.0.18": {}}, rv="4")
    alloc.seen(rec, "watch")
    assert alloc.view[THEIRS].used == 1 << 2


def test_a_blocks_usable_addresses_are_not_walked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Which offsets of a block are handed out comes from its ranges' bounds, gateway and exclusions, not from a
    question per address; a block larger than any gives none."""
    r = {"subnet": "10.0.0.0/24", "gateway": "10.0.0.1", "rangeEnd": "10.0.0.20", "exclude": ["10.0.0.4/31"]}
    p = Pool.of("n", {"netcomp": {"pool": {"type": "cluster", "blockSize": 16, "ranges": [[r]]}}})
    assert p is not None

    def asked(self: poolmod.Range, value: int) -> bool:
        raise AssertionError("asked per address")

    lay = Layout(p, 0)
    monkeypatch.setattr(poolmod.Range, "usable", asked)
    assert lay.usable(ipaddress.ip_network("10.0.0.0/28")) == 0xFFFF & ~0b110011
    assert lay.usable(ipaddress.ip_network("10.0.0.16/28")) == 0b11111
    assert lay.usable(ipaddress.ip_network("10.0.0.0/8")) == 0


def test_the_claims_of_other_nodes_blocks_are_counted_from_what_is_used(tmp_path: Path) -> None:
    """explain and ipam show list the addresses other nodes use from their used bits: a view holding a huge block
    with one address used lists one claim at once (a walk over its range would not end)."""
    alloc = node_a(tmp_path)
    net = ipaddress.ip_network("fd00::/64")
    alloc.view["n.v6-fd00---64"] = Seen("n.v6-fd00---64", "n", net, "node-b", "u", "1", 1 << 40, {3: "node-c"})
    got = {(c.address, c.node) for c in alloc.claims("n")}
    assert got == {(str(net.network_address + 40), "node-b"), (str(net.network_address + 3), "node-c")}


# ------------------------------------------------------------------------------------------------ AddressClaim


def claim(name: str, address: str, **spec: Any) -> dict[str, Any]:
    s = {"network": "n", "address": address, "node": "node-b", "containerID": "c", **spec}
    return {"kind": "AddressClaim", "metadata": {"name": name, "uid": "u"}, "spec": s}


def test_an_address_claim_is_taken_only_under_its_name(ignored: Ignored) -> None:
    """An AddressClaim whose name is not claim_name(network, address), whose address is spelled otherwise, or
    whose holder's fields are not strings is ignored (and counted); the right one is read."""
    assert claimobjects.from_object(claim("n.v4-10-0-0-5", "10.0.0.5")) is not None
    bad = [
        claim("n.v4-10-0-0-6", "10.0.0.5"),
        claim("n.v6-fd00--1", "fd00:0::1"),
        claim("n.v4-10-0-0-5", "10.0.0.5", containerID={"a": 1}),
        claim("n.v4-10-0-0-5", "10.0.0.5", pod=["x"]),
        claim("n.v4-10-0-0-5", "10.0.0.5", node=None),
    ]
    for i, obj in enumerate(bad):
        obj["metadata"]["resourceVersion"] = str(i)  # each a version of its own: each reported
        assert claimobjects.from_object(obj) is None, obj
    assert ignored.kinds.count("AddressClaim") == len(bad)


# ------------------------------------------------------------------------------------------------ fuzz

_addr = st.one_of(
    st.ip_addresses().map(str),
    st.sampled_from(["255.255.255.255", "10.0.0.17", "10.0.0.16", "fd00::1", "::ffff:10.0.0.17", "010.0.0.1", "", "x"]),
    st.text(max_size=50),
)
_entries = st.one_of(JSON, st.dictionaries(_addr, JSON, max_size=40))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.one_of(st.just(THEIRS), st.text(max_size=30), JSON),
    network=st.one_of(st.just("n"), JSON),
    cidr=st.one_of(st.sampled_from(["10.0.0.16/28", "10.0.0.0/8", "0.0.0.0/0", "fd00::/100", "10.0.0.17/28"]), JSON),
    node=st.one_of(st.just("node-b"), st.just("node-a"), JSON),
    used=_entries,
    lent=_entries,
    requests=_entries,
    deep=st.integers(0, 3000),
)
def test_the_decoders_take_anything_and_stay_bounded(
    tmp_path_factory: pytest.TempPathFactory, name: Any, network: Any, cidr: Any, node: Any, used: Any, lent: Any,
    requests: Any, deep: int,
) -> None:  # fmt: skip
    """Random and adversarial AddressBlock and AddressClaim specs (wrong types, addresses far outside, IPv6,
    deep nesting, many entries): the decoders and the view raise nothing, and what the view keeps of a block is
    never wider than the block."""
    obj = {"kind": "AddressBlock", "metadata": {"name": name, "resourceVersion": "1", "uid": nested(deep)},
           "spec": {"network": network, "cidr": cidr, "node": node, "used": used, "lent": lent,
                    "requests": requests, "nodeInCluster": nested(deep)}}  # fmt: skip
    rec = blockobjects.from_object(obj)
    if rec is not None:
        assert rec.net.num_addresses <= 4096
        assert len(rec.used) <= rec.net.num_addresses and len(rec.lent) <= rec.net.num_addresses
        alloc = node_a(tmp_path_factory.mktemp("a"))
        alloc.seen(rec, "watch")
        s = alloc.view.get(rec.name)
        if s is not None:
            assert s.used.bit_length() <= s.net.num_addresses and all(0 <= o < s.net.num_addresses for o in s.lent)
        alloc.claims()
    for address in (cidr, "10.0.0.5", name):
        spec = {"network": network, "address": address, "node": node, "containerID": used, "pod": lent}
        c = {"kind": "AddressClaim", "metadata": {"name": name, "uid": nested(deep)}, "spec": spec}
        got = claimobjects.from_object(c)
        assert got is None or ipaddress.ip_address(got.address)


def test_a_block_the_view_cannot_take_stops_no_watch(ignored: Ignored) -> None:
    """Whatever a record makes the view raise is that object's failure (reported), not the watch's: the list or
    watch goes on to the next object."""

    class Raising:
        def seen(self, rec: BlockRecord, source: str) -> None:
            raise OverflowError("too wide")

    blockobjects._take(Raising(), BlockRecord(THEIRS, "n", "10.0.0.16/28", "node-b", rv="7"), "watch")  # type: ignore[arg-type]
    assert ignored.kinds == ["AddressBlock"]


class Blocks:
    """Other nodes' blocks as a store shows them to a node that reads them (names, records), nothing else."""

    kind = "fake"

    def __init__(self) -> None:
        self.records: dict[str, BlockRecord] = {}

    def names(self, network: str) -> set[str]:
        return {MINE, *self.records}

    def pages(self, networks: list[str] | None) -> Any:
        yield list(self.records.values())

    def get(self, name: str) -> BlockRecord | None:
        return self.records.get(name)

    def put(self, obj: dict[str, Any]) -> None:
        rec = blockobjects.from_object(obj)
        assert rec is not None
        self.records[rec.name] = rec

    def __getattr__(self, _: str) -> Any:
        return lambda *a, **k: None


class GrantStore(Blocks):
    """A block store whose first ask is answered by a hostile writer (any node's credentials may patch any block):
    on block `name` it writes a lent entry for `address`, with the ask's own request key, as a grant."""

    def __init__(self, name: str, cidr: str, address: str, used: dict[str, Any]) -> None:
        super().__init__()
        self.name, self.cidr, self.address, self.used = name, cidr, address, used
        self.asked = 0

    def ask(self, name: str, uid: str, key: str, request: dict[str, Any] | None) -> None:
        self.asked += request is not None
        if self.asked != 1 or request is None:
            return
        lent = {self.address: {"node": "node-a", "request": key}}
        self.put(block(self.name, self.cidr, "node-x", rv="9", used=self.used, lent=lent))


def borrowing(tmp_path: Path, store: Blocks, others: list[dict[str, Any]]) -> BlockAllocator:
    """node-a holding 10.0.0.0/28 of a /26, every address of it given, the other blocks as `others` say (read
    when node-a borrows: it follows only its own)."""
    p = pool("10.0.0.0/26")
    record = LocalRecord(tmp_path / "blocks.json", "node-a")
    record.write(record.encode([Held(MINE, "n", 0, ipaddress.ip_network("10.0.0.0/28"), uid="u1")]))
    alloc = BlockAllocator(store, "node-a", record, timeout=2)  # type: ignore[arg-type]
    alloc.serve({"n": p})
    alloc.load([])
    alloc.seen(BlockRecord(MINE, "n", "10.0.0.0/28", "node-a", uid="u1", rv="1"), "list")
    alloc.listed({MINE}, {"n"})
    for obj in others:
        store.put(obj)
    layout, n = Layout(p, 0), 0
    while alloc.free_count(layout):
        alloc.settle([alloc.claim(p, 0, Holder(f"a{n}", "net0"))])
        n += 1
    return alloc


def given_or_refused(alloc: BlockAllocator) -> str:
    try:
        return alloc.claim(pool("10.0.0.0/26"), 0, Holder("victim", "net0")).address
    except DelegateError as e:
        return e.msg


def test_a_grant_of_an_address_its_block_uses_is_never_taken(tmp_path: Path, ignored: Ignored) -> None:
    """node-a asks node-b's block; a forged grant lends it 10.0.0.17, which the same record's `used` gives node-b's
    container: node-a never gives it."""
    used = {"10.0.0.17": {"containerID": "b1", "interface": "net0"}}
    store = GrantStore(THEIRS, "10.0.0.16/28", "10.0.0.17", used)
    full = {f"10.0.0.{i}": {"containerID": f"d{i}"} for i in range(32, 64)}
    others = [block(THEIRS, "10.0.0.16/28", "node-b", rv="2", used=used),
              block("n.v4-10-0-0-32-27", "10.0.0.32/27", "node-d", rv="2", used=full)]  # fmt: skip
    alloc = borrowing(tmp_path, store, others)
    assert "10.0.0.17" not in given_or_refused(alloc)
    assert "AddressBlock" in ignored.kinds


def test_a_grant_on_a_block_never_asked_is_never_taken(tmp_path: Path) -> None:
    """node-a's ask on node-b's block answered by a forged grant, with that ask's key, on node-c's block, of an
    address node-c's container uses and its `used` does not say: node-a never gives it."""
    other = "n.v4-10-0-0-32-28"
    store = GrantStore(other, "10.0.0.32/28", "10.0.0.33", {})
    full = {f"10.0.0.{i}": {"containerID": f"d{i}"} for i in range(48, 64)}
    others = [block(THEIRS, "10.0.0.16/28", "node-b", rv="2"),
              block(other, "10.0.0.32/28", "node-c", rv="2", used={"10.0.0.33": {"containerID": "c1"}}),
              block("n.v4-10-0-0-48-28", "10.0.0.48/28", "node-d", rv="2", used=full)]  # fmt: skip
    alloc = borrowing(tmp_path, store, others)
    assert "10.0.0.33" not in given_or_refused(alloc)


def test_an_empty_block_naming_this_node_that_it_never_made_is_deleted(tmp_path: Path, ignored: Ignored) -> None:
    """An empty block naming node-a that node-a never made (a hostile create, or node-a's record lost): never
    held, and deleted past the grace period (only while it is the version seen empty), so that no CIDR of the pool
    is lost for good; one that is not empty is left to whoever uses it."""
    deleted: list[tuple[str, str, str]] = []

    class Deleting(NoStore):
        def delete(self, name: str, uid: str, rv: str) -> bool:
            deleted.append((name, uid, rv))
            return True

    record = LocalRecord(tmp_path / "blocks.json", "node-a")
    alloc = BlockAllocator(Deleting(), "node-a", record, grace=0)  # type: ignore[arg-type]
    alloc.serve({"n": pool()})
    alloc.load([])
    stray, used = "n.v4-10-0-0-32-28", "n.v4-10-0-0-48-28"
    seen(alloc, block(stray, "10.0.0.32/28", "node-a", rv="4"))
    seen(alloc, block(used, "10.0.0.48/28", "node-a", rv="5", used={"10.0.0.49": {"containerID": "x"}}))
    alloc.release_empty()
    assert deleted == [(stray, f"u-{stray}", "4")] and set(alloc.held) == set()


class SilentStore(Blocks):
    """node-b's block lends at once; the stray block's holder never answers (it does not hold it)."""

    def __init__(self, lender: str) -> None:
        super().__init__()
        self.lender, self.asked = lender, []

    def ask(self, name: str, uid: str, key: str, request: dict[str, Any] | None) -> None:
        if request is None:
            return
        self.asked.append(name)
        if name == self.lender:
            lent = {"10.0.0.18": {"node": "node-a", "request": key}}
            self.put(block(name, "10.0.0.16/28", "node-b", rv="9", lent=lent))
        else:  # the request stays: nobody answers it
            rec = self.records[name]
            rec.requests = {**rec.requests, key: request}
            rec.rv = str(int(rec.rv) + 1)


def test_a_block_whose_holder_never_answers_costs_an_add_its_share_only(tmp_path: Path) -> None:
    """An empty block naming a node that does not hold it (its freest candidate) leaves node-a's ask unanswered:
    the ADD asks the next block in the time left (not after its whole deadline), and later ADDs do not ask the
    silent block again for a while."""
    store = SilentStore(THEIRS)
    stray = "n.v4-10-0-0-32-28"
    full = {f"10.0.0.{i}": {"containerID": f"d{i}"} for i in range(48, 64)}
    others = [block(THEIRS, "10.0.0.16/28", "node-b", rv="2", used={"10.0.0.17": {"containerID": "b1"}}),
              block(stray, "10.0.0.32/28", "node-c", rv="2"),
              block("n.v4-10-0-0-48-28", "10.0.0.48/28", "node-d", rv="2", used=full)]  # fmt: skip
    alloc = borrowing(tmp_path, store, others)  # type: ignore[arg-type]
    assert given_or_refused(alloc) == "10.0.0.18" and store.asked == [stray, THEIRS]
    given_or_refused(alloc)
    assert stray not in store.asked[2:]


def test_a_lender_never_lends_an_address_its_used_still_names(tmp_path: Path) -> None:
    """An address freed here whose removal from the block's `used` is not written yet is not lent: a borrower
    would see it in `used` and refuse the grant as forged."""
    from netcomp.ipam.background import Worker

    alloc = node_a(tmp_path)
    seen(alloc, block(MINE, "10.0.0.0/28", "node-a", rv="5", used={"10.0.0.1": {"containerID": "gone"}},
                      requests={"node-b.k": {"node": "node-b"}}))  # fmt: skip
    h = alloc.held[MINE]
    assert 1 in h.written and 1 not in h.local
    lent, _ = Worker(alloc)._grants(h)
    assert lent and "10.0.0.1" not in lent, lent


def test_a_tables_names_are_read_by_a_scan_no_value_can_forge() -> None:
    """The names of a network's blocks are read from a Table by a linear scan: a value another writer chose (a
    block's node or network shown in a cell) cannot add a row, however it is spelled, and the next page's token
    is found; a cell longer than a name is left out."""
    rows = [{"cells": ["n.v4-10-0-0-0-28", 'x","cells":["forged', "10.0.0.0/28"], "object": None},
            {"cells": ["n.v4-10-0-0-16-28", "n", '"continue":"no'], "object": None},
            {"cells": ["a" * 300, "n", "10.0.0.32/28"]}]  # fmt: skip
    doc = {"kind": "Table", "metadata": {"continue": "tok3n", "resourceVersion": "9"}, "rows": rows}
    data = json.dumps(doc, separators=(",", ":")).encode()
    assert set(blockobjects.table_strings(data, b'"cells":["')) == {"n.v4-10-0-0-0-28", "n.v4-10-0-0-16-28"}
    assert list(blockobjects.table_strings(data, b'"continue":"')) == ["tok3n"]
    assert list(blockobjects.table_strings(b'{"rows":[{"cells":["unterminated', b'"cells":["')) == []
