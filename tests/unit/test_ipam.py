"""The address pool and the allocator's logic, on a real node-local store in a temp dir (the same code runs on the
Kubernetes API's store in tests/integration/test_cluster_ipam.py). The node and pod lookups of the cluster GC are
functions here: what the API server would answer for them is the input under test."""

from __future__ import annotations

import ipaddress
import threading
from pathlib import Path

import pytest

from netcomp.errors import DelegateError
from netcomp.ipam.allocator import Allocator, Holder, PodState
from netcomp.ipam.localstore import LocalStore
from netcomp.ipam.pool import Range, claim_name
from netcomp.ipam.store import Claim, Taken
from tests.lab.pools import pool


def test_range_bounds_and_sizes() -> None:
    r = Range.parse({"subnet": "10.0.0.0/29", "gateway": "10.0.0.1"})
    assert (str(r.address(r.first)), str(r.address(r.last)), r.size) == ("10.0.0.1", "10.0.0.6", 5)
    r = Range.parse({"subnet": "10.0.0.0/26", "gateway": "10.0.0.1", "exclude": ["10.0.0.32/29", "10.0.0.0/30"]})
    assert r.size == 64 - 2 - 8 - 3  # network, broadcast; the /29; the /30's .1 (the gateway), .2, .3
    six = Range.parse({"subnet": "fd00::/126", "gateway": "fd00::1"})
    assert six.size == 2 and str(six.address(six.last)) == "fd00::3"  # no broadcast in IPv6
    narrow = Range.parse({"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.10", "rangeEnd": "10.0.0.12"})
    assert narrow.size == 3


def test_an_ipv6_range_low_in_its_space_keeps_its_gateway_and_exclusions_out() -> None:
    """A range inside ::/96 holds addresses whose integers fit in 32 bits: they are still IPv6 addresses, so the
    gateway and the excluded ones are not handed out."""
    r = Range.parse({"subnet": "::/120", "gateway": "::1", "exclude": ["::10/124"]})
    assert not r.usable(1) and not r.usable(0x10) and not r.usable(0x1F)
    assert r.usable(2) and r.usable(0x20)
    assert r.size == 255 - 1 - 16  # ::1 to ::ff (no broadcast in IPv6), less the gateway and the /124


def test_candidates_cover_the_pool_once_from_a_seeded_start() -> None:
    p = pool({"subnet": "10.0.0.0/27", "gateway": "10.0.0.1", "exclude": ["10.0.0.16/30"]})
    for seed in ("a", "b", "node-1/ctr/eth0"):
        got = [str(a) for _, a in p.candidates(0, seed)]
        assert len(got) == len(set(got)) == p.size(0) == 25
        assert "10.0.0.1" not in got and "10.0.0.17" not in got
    assert next(p.candidates(0, "a"))[1] != next(p.candidates(0, "b"))[1]  # nodes mostly start apart


def test_claim_names_are_distinct_per_network_and_family() -> None:
    names = {
        claim_name("n", ipaddress.ip_address("10.0.0.5")),
        claim_name("n", ipaddress.ip_address("fd00::a:0:5")),
        claim_name("m", ipaddress.ip_address("10.0.0.5")),
        claim_name("ns/n", ipaddress.ip_address("10.0.0.5")),
    }
    assert names == {"n.v4-10-0-0-5", "n.v6-fd00--a-0-5", "m.v4-10-0-0-5", "ns.n.v4-10-0-0-5"}


def allocator(tmp_path: Path, node: str = "node-a", grace: float = 60.0) -> Allocator:
    a = Allocator(LocalStore(tmp_path / "claims"), node, grace=grace)
    a.load()
    return a


def test_a_race_lost_is_the_next_address(tmp_path: Path) -> None:
    """Another node (another allocator, the same store) claims the address this one wants: its create is refused,
    the address goes into the view, and the next one is claimed."""
    p = pool({"subnet": "10.0.0.0/29", "gateway": "10.0.0.1"})
    a, b = allocator(tmp_path), allocator(tmp_path, "node-b")
    first = next(p.candidates(0, "node-a/c1/net0"))[1]
    b.claim(p, 0, Holder("c9", "net0"), first)  # b took a's first choice (a's view does not know yet)
    got = a.claim(p, 0, Holder("c1", "net0"))
    assert got.address != str(first) and claim_name("n", first) in {c.name for c in a.claims()}


def test_exhaustion_and_exact_claims_name_what_is_wrong(tmp_path: Path) -> None:
    p = pool({"subnet": "10.0.0.0/30", "gateway": "10.0.0.1"})
    a = allocator(tmp_path)
    c = a.claim(p, 0, Holder("c1", "net0", "ns/p1"))
    with pytest.raises(DelegateError) as e:
        a.claim(p, 0, Holder("c2", "net0"))
    assert e.value.code == 11 and "no free address in 10.0.0.0/30 (1 addresses, all claimed)" in e.value.msg
    with pytest.raises(DelegateError) as e:
        allocator(tmp_path, "node-b").claim(p, 0, Holder("c3", "net0"), ipaddress.ip_address(c.address))
    assert (
        e.value.code == 11 and f"address {c.address} of network 'n' is held by pod ns/p1 on node node-a" in e.value.msg
    )
    with pytest.raises(DelegateError) as e:
        a.claim(p, 0, Holder("c4", "net0"), ipaddress.ip_address("10.9.9.9"))
    assert e.value.code == 7 and "address 10.9.9.9 cannot be claimed on network 'n': outside its subnets" in e.value.msg
    for addr, why in (("10.0.0.0", "the network address"), ("10.0.0.3", "the broadcast"), ("10.0.0.1", "gateway")):
        with pytest.raises(DelegateError, match=why):
            a.claim(p, 0, Holder("c5", "net0"), ipaddress.ip_address(addr))


def test_an_exact_address_may_be_outside_the_range_handed_out(tmp_path: Path) -> None:
    """DANM's static addresses (anywhere in the CIDR) and Multus's ips outside a dynamic range: claimed exactly,
    never handed out dynamically."""
    p = pool(
        {"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.100", "rangeEnd": "10.0.0.101", "exclude": ["10.0.0.8/29"]}
    )
    a = allocator(tmp_path)
    got = a.claim(p, 0, Holder("c1", "net0"), ipaddress.ip_address("10.0.0.7"))
    assert got.address == "10.0.0.7"
    with pytest.raises(DelegateError, match="excluded from it"):
        a.claim(p, 0, Holder("c2", "net0"), ipaddress.ip_address("10.0.0.9"))
    assert {a.claim(p, 0, Holder(f"d{i}", "net0")).address for i in range(2)} == {"10.0.0.100", "10.0.0.101"}


def test_release_is_only_of_the_same_claim(tmp_path: Path) -> None:
    """A stale release (the address freed and claimed again since) removes nothing: the uid must match."""
    p = pool({"subnet": "10.0.0.0/30", "gateway": "10.0.0.1"})
    a = allocator(tmp_path)
    old = a.claim(p, 0, Holder("c1", "net0"))
    a.release([old])
    new = a.claim(p, 0, Holder("c2", "net0"))
    assert new.address == old.address and new.uid != old.uid
    a.release([old])  # stale
    assert [c.container_id for c in LocalStore(tmp_path / "claims").list()] == ["c2"]


def test_store_refuses_a_second_claim_of_a_name(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "claims")
    c = Claim("n.v4-10-0-0-2", "n", "10.0.0.2", "node-a", "c1", "net0")
    store.create(c)
    results: list[str] = []

    def race() -> None:
        try:
            store.create(c)
            results.append("won")
        except Taken:
            results.append("taken")

    threads = [threading.Thread(target=race) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == ["taken"] * 8


def test_gc_own_frees_orphans_after_the_grace_never_what_is_recorded_or_in_flight(tmp_path: Path) -> None:
    p = pool({"subnet": "10.0.0.0/28", "gateway": "10.0.0.1"})
    a = allocator(tmp_path, grace=0.0)
    recorded, orphan, in_flight = (a.claim(p, 0, Holder(f"c{i}", "net0")) for i in range(3))
    a.settle([recorded, orphan])  # in_flight stays as an ADD in flight holds it
    other = allocator(tmp_path, "node-b", grace=0.0).claim(p, 0, Holder("x", "net0"))
    a.load()
    freed = a.gc_own({recorded.name})
    assert [c.name for c in freed] == [orphan.name]
    assert {c.name for c in a.claims()} == {recorded.name, in_flight.name, other.name}
    assert allocator(tmp_path, grace=3600).gc_own(set()) == []  # within the grace period: kept


def test_gc_cluster_frees_only_with_proof(tmp_path: Path) -> None:
    p = pool({"subnet": "10.0.0.0/28", "gateway": "10.0.0.1"})
    b = allocator(tmp_path, "node-b")
    b.node_in_cluster = True
    gone = b.claim(p, 0, Holder("c1", "net0", "ns/gone", "u1"))
    alive = b.claim(p, 0, Holder("c2", "net0", "ns/alive", "u2"))
    reborn = b.claim(p, 0, Holder("c3", "net0", "ns/reborn", "u3"))
    moved = b.claim(p, 0, Holder("c4", "net0", "ns/moved"))
    podless = b.claim(p, 0, Holder("c5", "net0"))
    pods = {
        "ns/alive": PodState("node-b", "u2"),
        "ns/reborn": PodState("node-b", "u9"),
        "ns/moved": PodState("node-c", ""),
    }
    a = allocator(tmp_path, "node-a", grace=0.0)
    freed = a.gc_cluster(lambda n: True, pods.get)
    assert {c.name for c in freed} == {gone.name, reborn.name, moved.name}
    assert {c.name for c in a.claims()} == {alive.name, podless.name}
    assert a.gc_cluster(lambda n: n != "node-b", pods.get) == [podless]  # its node is gone (and was in the cluster)
    assert [c.name for c in a.claims()] == [alive.name]  # a pod on its node: never, node gone or not
