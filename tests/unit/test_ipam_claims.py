"""IPAMClaims without an API server: the network selection element's `ipam-claim-reference` read and refused as
the multi-network spec v1.3 and netcomp's rules say, an IPAMClaim object checked before anything of it is used,
the refusals of a claim of another network or interface, a claim on a network without a cluster pool, a pod's
use of a claim's address never settled or given back by it, the node's record of its claims read back, the
cluster's GC finishing a gone node's deleted claim (its finalizer first, once no running pod uses its address),
and a first ADD's label and finalizer whose answer was lost taken off by its node. The same with a real API
server, several nodes and real plugins: tests/integration/test_ipam_claims.py, test_ipam_claims_gc.py."""

from __future__ import annotations

import dataclasses
import ipaddress
import json
from pathlib import Path
from typing import Any, cast

import pytest

from netcomp import fsutil
from netcomp.delegate import poolclaims
from netcomp.errors import DelegateError
from netcomp.ipam import ipamclaimapi
from netcomp.ipam.allocator import Allocator
from netcomp.ipam.allocators import Allocators
from netcomp.ipam.blockalloc import BlockAllocator
from netcomp.ipam.blockstate import BlockRecord, Held, LocalRecord
from netcomp.ipam.claimrecord import Kept
from netcomp.ipam.ipamclaims import IPAMClaims
from netcomp.ipam.localstore import LocalStore
from netcomp.ipam.store import CLAIM_HOLDER, Claim, StoreUnavailable
from netcomp.pods.multus import Ask, AskRules, parse_networks
from netcomp.pods.naming import PodRef
from netcomp.records.record import Attachment
from tests.lab.pools import NoStore, pool

POD = PodRef("team-a", "vm-a")


def element(**fields: Any) -> list[Ask]:
    return parse_networks(json.dumps([{"name": "storage", **fields}]), POD)


def refused(**fields: Any) -> DelegateError:
    with pytest.raises(DelegateError) as e:
        element(**fields)
    assert e.value.code == 7
    return e.value


def test_the_element_names_its_claim() -> None:
    [ask] = element(interface="net1", **{"ipam-claim-reference": "vm-a.storage"})
    assert ask.ipam_claim == "vm-a.storage" and ask.ifname == "net1"
    [plain] = element()
    assert plain.ipam_claim is None


def test_static_ips_beside_a_claim_are_refused_naming_both() -> None:
    e = refused(ips=["10.1.0.5/24"], **{"ipam-claim-reference": "c"})
    assert "ips and ipam-claim-reference together" in e.msg and "item 0 ('storage')" in e.msg


@pytest.mark.parametrize(
    "value", ["", "Big", "a/b", 7, "x" * 254, "..", "team-b/c", "a\n", "\uff41", "x" * 10240, [], {}, True]
)
def test_a_reference_that_is_no_objects_name_is_refused(value: Any) -> None:
    e = refused(**{"ipam-claim-reference": value})
    assert "is not an IPAMClaim's name" in e.msg


def test_a_node_may_bar_the_field() -> None:
    fields = AskRules(fields=frozenset({"ips"})).fields
    with pytest.raises(DelegateError) as e:
        parse_networks(json.dumps([{"name": "s", "ipam-claim-reference": "c"}]), POD, fields)
    assert "'ipam-claim-reference': not allowed on this node" in e.value.msg


def claim_object(**status: Any) -> dict[str, Any]:
    meta = {"namespace": "team-a", "name": "vm-a.storage", "uid": "u-1", "resourceVersion": "7"}
    return {"metadata": meta, "spec": {"network": "storage", "interface": "net1"}, "status": status}


def test_a_claim_object_is_read_checked() -> None:
    c = ipamclaimapi.parse(claim_object(ips=["10.1.0.5/24", "fd00::5/64"], ownerPod={"name": "virt-launcher-x"}))
    assert [str(i) for i in c.ips] == ["10.1.0.5/24", "fd00::5/64"] and c.owner_pod == "virt-launcher-x"
    assert c.key == "team-a/vm-a.storage/u-1" and not c.deleting and c.node == ""
    cases: list[tuple[dict[str, Any], str]] = [
        ({"ips": ["10.1.0.5/24", "10.1.0.6/24"]}, "two addresses of one family"),
        ({"ips": ["nonsense"]}, "not an address in CIDR form"),
        ({"ips": "10.1.0.5/24"}, "not a list"),
        ({"ips": ["10.0.0.1/8"] * 3}, "at most 2"),
    ]
    for bad, why in cases:
        with pytest.raises(ValueError, match=why):
            ipamclaimapi.parse(claim_object(**bad))
    with pytest.raises(ValueError, match=r"spec\.interface"):
        ipamclaimapi.parse({**claim_object(), "spec": {"network": "storage", "interface": "x" * 16}})


def test_controller_and_running_read_a_pods_object() -> None:
    pod = {"metadata": {"ownerReferences": [{"uid": "a", "controller": False}, {"uid": "vmi", "controller": True}]},
           "status": {"phase": "Running"}}  # fmt: skip
    assert ipamclaimapi.controller_uid(pod) == "vmi" and ipamclaimapi.running(pod)
    assert ipamclaimapi.controller_uid({"metadata": {"ownerReferences": "x"}}) == ""
    assert not ipamclaimapi.running({"status": {"phase": "Succeeded"}})


def engine(tmp_path: Path) -> IPAMClaims:
    blocks = BlockAllocator(NoStore(), "node-a", LocalRecord(tmp_path / "blocks.json", "node-a"))
    return IPAMClaims(cast(Any, None), blocks, "node-a", tmp_path / "ipamclaims", 1.0)


def test_a_claim_of_another_network_or_interface_is_refused_naming_it(tmp_path: Path) -> None:
    e = engine(tmp_path)
    c = ipamclaimapi.parse(claim_object())
    with pytest.raises(DelegateError) as got:
        e._check(c, "backup", ("backup",), "net1", ("team-a/vm-a", ""))
    assert got.value.code == 7 and "is of network 'storage', not of 'backup'" in got.value.msg
    with pytest.raises(DelegateError) as got:
        e._check(c, "storage", ("storage",), "net2", ("team-a/vm-a", ""))
    assert "is for interface 'net1', not 'net2'" in got.value.msg
    e._check(c, "team-a.storage", ("team-a.storage", "storage"), "net1", ("team-a/vm-a", ""))  # the NAD's name


def attachment(conflist: dict[str, Any]) -> Attachment:
    return Attachment("storage", "net1", conflist)


def test_a_claim_on_a_network_without_a_cluster_pool_is_refused_clearly(tmp_path: Path) -> None:
    [ask] = element(interface="net1", **{"ipam-claim-reference": "c"})
    plain = {"name": "storage", "plugins": [{"type": "macvlan", "ipam": {"type": "host-local"}}]}
    with pytest.raises(DelegateError) as e:
        poolclaims.take(None, [attachment(plain)], "ctr", "team-a/vm-a", "u", {"net1": ask})
    assert e.value.code == 7 and "cannot honour an IPAMClaim: its addresses are not netcomp's" in e.value.msg
    alloc = Allocators(Allocator(LocalStore(tmp_path / "ipam"), "node-a"), None)  # a node without a cluster
    conf = {"name": "storage", "netcomp": {"pool": {"type": "cluster", "ranges": [[{"subnet": "10.1.0.0/24"}]]}},
            "plugins": [{"type": "macvlan", "ipam": {"type": "static"}}]}  # fmt: skip
    with pytest.raises(DelegateError) as e:
        poolclaims.take(alloc, [attachment(conf)], "ctr", "team-a/vm-a", "u", {"net1": ask})
    assert "gives no addresses from blocks of a cluster" in e.value.msg and "item 0 ('storage')" in e.value.msg


def test_a_pods_use_of_a_claims_address_is_never_settled_nor_given_back(tmp_path: Path) -> None:
    """The claim's own entry stays in its block whatever the pod's DEL gives back."""
    p = pool({"subnet": "10.1.0.0/24"}, network="storage", block=16)
    blocks = BlockAllocator(NoStore(), "node-a", LocalRecord(tmp_path / "blocks.json", "node-a"))
    blocks.serve({"storage": p})
    alloc = Allocators(Allocator(LocalStore(tmp_path / "ipam"), "node-a"), blocks)
    name = "storage.v4-10.1.0.0-28"
    own = Claim(name, "storage", "10.1.0.5", "node-a", CLAIM_HOLDER + "u-1", "net1", block=name,
                ipam_claim="team-a/c/u-1")  # fmt: skip
    use = Claim(name, "storage", "10.1.0.5", "node-a", "ctr", "net1", "team-a/vm-a", block=name,
                ipam_claim="team-a/c/u-1")  # fmt: skip
    assert use.uses_ipam_claim() and not own.uses_ipam_claim()
    assert "IPAMClaim team-a/c" in own.holder()
    blocks.held[name] = Held(name, "storage", 0, ipaddress.ip_network("10.1.0.0/28"))
    blocks.load([own, use])  # as a restart finds them: the claim's entry from its record, the pod's from the cache
    addr = ipaddress.ip_address("10.1.0.5")
    assert blocks.entry_of(name, addr) == (True, own)
    alloc.settle([use])
    alloc.release([use])
    assert blocks.entry_of(name, addr) == (True, own)
    assert blocks.held[name].busy() >> 5 & 1  # never given to anyone else
    alloc.release([own])  # the claim's own entry goes only when the claim does
    assert blocks.entry_of(name, addr) == (True, None)


def test_the_record_of_claims_is_read_back(tmp_path: Path) -> None:
    e = engine(tmp_path)
    own = Claim("b", "storage", "10.1.0.5", "node-a", CLAIM_HOLDER + "u-1", "net1", block="b",
                ipam_claim="team-a/c/u-1")  # fmt: skip
    e.keep(Kept("team-a/c/u-1", "storage", "net1", [own], held=True))
    e.keep(Kept("team-a/d/u-2", "storage", "net1", [own], held=False, status=True))
    assert sorted(f.name for f in (tmp_path / "ipamclaims").iterdir()) == ["u-1.json", "u-2.json"]  # one a claim
    again = engine(tmp_path)
    assert again.load() == [own]  # only the entries it holds go to its blocks
    assert {k.ref for k in again.kept.values()} == {"team-a/c", "team-a/d"}
    again.forget("u-2")
    assert fsutil.settle(5.0) and [f.name for f in (tmp_path / "ipamclaims").iterdir()] == ["u-1.json"]
    (tmp_path / "ipamclaims" / "u-1.json").write_text('{"kind": "other"}')
    assert engine(tmp_path).load() == []


def test_the_record_of_the_version_before_is_taken_in(tmp_path: Path) -> None:
    """One file for every claim (the version before): read, written as files per claim, then removed."""
    own = Claim("b", "storage", "10.1.0.5", "node-a", CLAIM_HOLDER + "u-1", "net1", block="b",
                ipam_claim="team-a/c/u-1").to_doc()  # fmt: skip
    old = {"key": "team-a/c/u-1", "network": "storage", "interface": "net1", "held": True, "status": True,
           "entries": [own]}  # fmt: skip
    legacy = tmp_path / "ipamclaims.json"
    legacy.write_text(json.dumps({"kind": "netcompIPAMClaimsV1", "node": "node-a", "claims": [old, {"key": 1}]}))
    e = engine(tmp_path)
    [entry] = e.load()
    assert entry.address == "10.1.0.5" and entry.ipam_claim == "team-a/c/u-1"
    assert not legacy.exists() and [f.name for f in (tmp_path / "ipamclaims").iterdir()] == ["u-1.json"]
    assert [k.ref for k in engine_loaded(tmp_path).kept.values()] == ["team-a/c"]


def engine_loaded(tmp_path: Path) -> IPAMClaims:
    e = engine(tmp_path)
    e.load()
    return e


def test_a_claims_file_is_never_named_by_a_path_its_uid_spells(tmp_path: Path) -> None:
    e = engine(tmp_path)
    e.keep(Kept("team-a/c/..", "storage", "net1", [], held=False, status=True))
    [f] = (tmp_path / "ipamclaims").iterdir()
    assert len(f.stem) == 64 and not (tmp_path / "..json").exists()
    assert [k.key for k in engine_loaded(tmp_path).kept.values()] == ["team-a/c/.."]


def test_netcomps_own_claims_are_named_after_the_pod_and_interface() -> None:
    conf = {"name": "storage", "netcomp": {"pool": {"type": "cluster", "ranges": [[{"subnet": "10.1.0.0/24"}]]}},
            "plugins": [{"type": "macvlan", "ipam": {"type": "static"}}]}  # fmt: skip
    plain = {"name": "other", "plugins": [{"type": "macvlan", "ipam": {"type": "host-local"}}]}
    pod = PodRef("team-a", "db-0")
    atts = [Attachment("storage", "net1", conf), Attachment("other", "net2", plain),
            Attachment("storage2", "net3", conf), Attachment("storage3", "net4", conf)]  # fmt: skip
    asks = {"net1": Ask("storage", "team-a", "item 0"), "net2": Ask("other", "team-a", "item 1"),
            "net3": Ask("storage2", "team-a", "item 2", ipam_claim="mine"),
            "net4": Ask("storage3", "team-a", "item 3", ips=(ipaddress.ip_interface("10.1.0.9/24"),))}  # fmt: skip
    got = poolclaims.own_claims(atts, asks, pod)
    assert (got["net1"].ipam_claim, got["net1"].own_claim) == ("db-0.net1", True)
    assert got["net2"].ipam_claim is None  # no cluster pool: nothing to claim
    assert (got["net3"].ipam_claim, got["net3"].own_claim) == ("mine", False)  # the element's own claim wins
    assert got["net4"].ipam_claim is None  # static addresses asked for: no claim
    with pytest.raises(DelegateError) as e:
        poolclaims.own_claims([Attachment("storage", "Net_1", conf)], {"Net_1": asks["net1"]}, pod)
    assert "'db-0.Net_1' is no IPAMClaim's name" in e.value.msg


class OneBlock:
    """A block store that has one block, read by name (what a node reads of another node's block)."""

    kind = "test"

    def __init__(self, rec: BlockRecord) -> None:
        self.rec = rec

    def get(self, name: str) -> BlockRecord | None:
        return self.rec if name == self.rec.name else None


def test_a_status_pointing_at_another_pods_address_is_refused_naming_it(tmp_path: Path) -> None:
    """Whoever can write a claim's status cannot take a live address with it: the block's record says who holds
    it, and the ADD is refused naming that pod; an object at the block's name that is not that block is never
    trusted."""
    p = pool({"subnet": "10.1.0.0/24"}, network="storage", block=16)
    name = "storage.v4-10.1.0.0-28"
    rec = BlockRecord(name, "storage", "10.1.0.0/28", "node-b",
                      used={"10.1.0.5": {"containerID": "ctr-x", "interface": "net1",
                                         "pod": {"namespace": "team-b", "name": "db-9"}},
                            "10.1.0.6": {"containerID": CLAIM_HOLDER + "u-1", "interface": "net1"}})  # fmt: skip
    blocks = BlockAllocator(cast(Any, OneBlock(rec)), "node-a", LocalRecord(tmp_path / "b.json", "node-a"))
    blocks.serve({"storage": p})
    e = IPAMClaims(cast(Any, None), blocks, "node-a", tmp_path / "ipamclaims", 1.0)
    c = ipamclaimapi.parse(claim_object(ips=["10.1.0.5/24"]))
    with pytest.raises(DelegateError) as got:
        e._entry(c, p, ipaddress.ip_address("10.1.0.5"), name)
    assert got.value.code == 7 and "10.1.0.5, which is held by pod team-b/db-9 on node node-b" in got.value.msg
    ours = e._entry(c, p, ipaddress.ip_address("10.1.0.6"), name)
    assert ours is not None and ours.node == "node-b" and ours.container_id == CLAIM_HOLDER + "u-1"
    rec.network = "other"
    with pytest.raises(DelegateError) as got:
        e._entry(c, p, ipaddress.ip_address("10.1.0.6"), name)
    assert "is not the block of 10.1.0.6" in got.value.msg


def test_a_gone_nodes_claim_entry_is_freed_only_with_its_claim() -> None:
    """The cluster's GC frees an IPAMClaim's entry in a gone node's block only when the claims labelled with that
    node are known and its claim is not among them, or is deleted and finished; a live node's, never."""
    from netcomp.ipam import blockgc

    c = Claim("b", "storage", "10.0.0.5", "node-x", CLAIM_HOLDER + "u1", "net1", node_in_cluster=True, block="b")

    def gone(exists: bool, uids: set[str] | None) -> str | None:
        got = None if uids is None else Api().gone(uids)
        return blockgc._gone(c, lambda n: exists, lambda p: None, lambda n: got)

    assert gone(True, set()) is None
    assert gone(False, {"u1"}) is None and gone(False, None) is None
    assert gone(False, {"u2"}) == "its IPAMClaim is gone (node node-x is gone)"
    c = Claim(**{**c.to_doc(), "node_in_cluster": False})
    assert gone(False, {"u2"}) is None  # a node that was no Node of the cluster is never judged gone


class Api:
    """A ClaimApi's calls the GC and the watch make, answered from dicts: pods by name, marks recorded."""

    def __init__(self, pods: dict[str, Any] | None = None, fail: Exception | None = None) -> None:
        self.pods, self.fail = pods or {}, fail
        self.marks: list[tuple[str, str | None]] = []

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        if isinstance(self.fail, ipamclaimapi.Away):
            raise self.fail
        return self.pods.get(name)

    def mark(self, c: ipamclaimapi.ClaimObject, node: str | None) -> ipamclaimapi.ClaimObject:
        if self.fail is not None:
            raise self.fail
        self.marks.append((c.ref, node))
        return c

    def gone(self, uids: set[str], **meta: Any) -> ipamclaimapi.GoneNodeClaims:
        objs = [ipamclaimapi.parse(deleting(uid, **meta)) for uid in uids]
        return ipamclaimapi.GoneNodeClaims(cast(Any, self), "node-x", {c.uid: c for c in objs})


def deleting(uid: str, owner: str = "", deleted: bool = False) -> dict[str, Any]:
    """A claim labelled with node-x with netcomp's finalizer (being deleted when `deleted`)."""
    obj = claim_object(**({"ownerPod": {"name": owner}} if owner else {}))
    obj["metadata"] |= {"uid": uid, "finalizers": [ipamclaimapi.FINALIZER, "other.io/x"],
                        "labels": {"netcomp.io/node": "node-x"}}  # fmt: skip
    if deleted:
        obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return obj


def pod_on(node: str, phase: str = "Running") -> dict[str, Any]:
    return {"spec": {"nodeName": node}, "status": {"phase": phase}}


@pytest.mark.parametrize(
    ("pods", "freed"),
    [
        ({}, "pod team-a/vm-a-1 is gone"),
        ({"vm-a-1": pod_on("node-b", "Succeeded")}, "pod team-a/vm-a-1 has finished"),
        ({"vm-a-1": pod_on("node-x")}, "pod team-a/vm-a-1 was on node node-x, which is gone"),
        ({"vm-a-1": pod_on("node-b")}, None),  # runs on a live node: the claim waits
        ({"vm-a-1": pod_on("node-b", "Pending")}, None),
    ],
)
def test_a_deleted_claim_of_a_gone_node_is_finished_once_no_pod_uses_it(pods: dict[str, Any], freed: str | None
                                                                        ) -> None:  # fmt: skip
    """A claim of a gone node being deleted gets its finalizer (and the node's label) taken off, and its entries
    may be freed, only when its ownerPod is gone, finished or on a gone node; asked once per GC run."""
    api = Api(pods)
    claims = api.gone({"u1"}, owner="vm-a-1", deleted=True)
    got = claims.finish("u1", lambda n: n != "node-x")
    if freed is None:
        assert got is None and api.marks == []
    else:
        assert got == f"its IPAMClaim team-a/vm-a.storage is deleted and {freed} (node node-x is gone)"
        assert api.marks == [("team-a/vm-a.storage", None)]
    claims.finish("u1", lambda n: n != "node-x")
    assert len(api.marks) <= 1


def test_nothing_of_a_gone_nodes_claim_is_freed_on_a_guess() -> None:
    """A claim not being deleted keeps its entries; one whose owner cannot be read, or whose finalizer cannot be
    taken off, keeps them too; one with no owner is finished, by finish_all even when it holds no entry."""
    assert Api().gone({"u1"}, owner="vm-a-1").finish("u1", lambda n: False) is None
    away = Api(fail=ipamclaimapi.Away("refused"))
    assert away.gone({"u1"}, owner="vm-a-1", deleted=True).finish("u1", lambda n: False) is None
    changed = Api(fail=ipamclaimapi.Changed("409"))
    assert changed.gone({"u1"}, deleted=True).finish("u1", lambda n: False) is None
    api = Api()
    claims = api.gone({"u1", "u2"}, deleted=True)
    claims.finish_all(lambda n: False)
    assert sorted(claims.done) == ["u1", "u2"] and len(api.marks) == 2
    assert (
        claims.done["u1"] == "its IPAMClaim team-a/vm-a.storage is deleted and no pod is named its owner "
        "(node node-x is gone)"
    )
    api = Api()
    api.gone({"u3"}).finish_all(lambda n: False)  # a first address the gone node will never give: let go
    with_ips = deleting("u4")
    with_ips["status"] = {"ips": ["10.1.0.5/24"]}
    claims = ipamclaimapi.GoneNodeClaims(cast(Any, api), "node-x", {"u4": ipamclaimapi.parse(with_ips)})
    claims.finish_all(lambda n: False)  # the claim's address: kept while it lives
    assert api.marks == [("team-a/vm-a.storage", None)]


def test_a_claim_marked_for_this_node_with_no_address_is_unmarked(tmp_path: Path) -> None:
    """The answer to a first ADD's mark lost: a claim with this node's label and netcomp's finalizer, no
    status.ips and no record here gets both taken off, but not while an ADD of it runs here (looked at again
    later), and not when this node holds an entry for it (the crash case: its status is written instead)."""
    e = engine(tmp_path)
    api = Api()
    e.api = cast(Any, api)
    obj = deleting("u1")
    obj["metadata"]["labels"]["netcomp.io/node"] = "node-a"
    c = ipamclaimapi.parse(obj)
    with e._busy_lock(c.ref):
        e.unanswered(c)
    assert api.marks == [] and e.strays == {"u1": c}
    e.kept["u1"] = Kept(c.key, "storage", "net1", [Claim("b", "storage", "10.1.0.5", "node-a", "x", "net1")],
                        held=True)  # fmt: skip
    e.unanswered(c)
    assert api.marks == [] and e.strays == {}
    del e.kept["u1"]
    e.unanswered(ipamclaimapi.parse(deleting("u1")))  # another node's label: not this node's to take off
    assert api.marks == []
    api.fail = ipamclaimapi.Changed("409")
    e.unanswered(c)
    assert e.strays == {"u1": c}
    api.fail = None
    e.unanswered(c)
    assert api.marks == [("team-a/vm-a.storage", None)] and e.strays == {}


class GoneBlocks:
    """The blocks of a cluster, one of gone node node-x holding a deleted claim's entry, and one of this node
    (node-a) lending an address for that claim to node-x; `write_used` fails while `failing`."""

    kind = "test"

    def __init__(self) -> None:
        self.recs = [
            BlockRecord("x", "storage", "10.1.0.0/28", "node-x", node_in_cluster=True,
                        used={"10.1.0.5": {"containerID": CLAIM_HOLDER + "u1", "interface": "net1"}}),
            BlockRecord("a", "storage", "10.1.0.16/28", "node-a", node_in_cluster=True,
                        lent={"10.1.0.17": {"node": "node-x", "nodeInCluster": True,
                                            "containerID": CLAIM_HOLDER + "u1", "interface": "net2"}}),
        ]  # fmt: skip
        self.failing = True
        self.deleted: list[str] = []

    def pages(self, networks: Any) -> Any:
        return iter([[dataclasses.replace(r, used=dict(r.used), lent=dict(r.lent)) for r in self.recs]])

    def write_used(self, name: str, uid: str, changes: dict[str, Any]) -> BlockRecord:
        if self.failing:
            raise StoreUnavailable("the API server is away")
        [rec] = [r for r in self.recs if r.name == name]
        rec.used = {a: d for a, d in rec.used.items() if a not in changes}
        return dataclasses.replace(rec, used=dict(rec.used))

    def update_lent(self, name: str, address: str, node: str, entry: Any) -> bool:
        [rec] = [r for r in self.recs if r.name == name]
        return rec.lent.pop(address, None) is not None

    def delete(self, name: str, uid: str, rv: str) -> bool:
        self.recs = [r for r in self.recs if r.name != name]
        self.deleted.append(name)
        return True


def test_the_gc_takes_a_gone_nodes_deleted_claims_finalizer_off_before_its_entries(tmp_path: Path) -> None:
    """A GC run whose write of the freed entries fails after the claim's finalizer is off frees what it could (the
    loan in this node's own block) and leaves the rest held; the next run, the claim gone, frees the entry and
    deletes the gone node's emptied block: nothing is freed while the claim could be used, nothing is lost."""
    from netcomp.ipam import blockgc

    store = GoneBlocks()
    a = BlockAllocator(cast(Any, store), "node-a", LocalRecord(tmp_path / "b.json", "node-a"))
    api = Api()
    claims = api.gone({"u1"}, deleted=True)
    freed, blocks = blockgc.gc_cluster(a, lambda n: n == "node-a", lambda p: None, 0.0, lambda n: claims)
    assert api.marks == [("team-a/vm-a.storage", None)]  # the finalizer first
    assert [c.address for c in freed] == ["10.1.0.17"] and blocks == []
    assert store.recs[0].used != {} and store.recs[1].lent == {}
    store.failing = False
    freed, blocks = blockgc.gc_cluster(a, lambda n: n == "node-a", lambda p: None, 0.0, lambda n: api.gone(set()))
    assert [c.address for c in freed] == ["10.1.0.5"] and blocks == ["x"] and store.deleted == ["x"]
    assert len(api.marks) == 1


class OwnerApi:
    """The two calls a pod's DEL makes of a claim (pod, clear_owner), answered from a dict of pods."""

    def __init__(self, pods: dict[str, dict[str, Any]]) -> None:
        self.pods, self.cleared = pods, []

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.pods.get(f"{namespace}/{name}")

    def clear_owner(self, namespace: str, name: str, uid: str, owner_pod: str) -> None:
        self.cleared.append((namespace, name, uid, owner_pod))


def test_a_pods_del_lets_go_of_the_claims_owner_only_once_the_pod_is_going(tmp_path: Path) -> None:
    """The next pod naming the claim (a VM's next launcher) then has no old owner to read; a pod whose sandbox is
    made again (not deleted) stays the owner, so that a pod of another controller is still refused meanwhile."""
    live = {"metadata": {"uid": "pu-1"}, "status": {"phase": "Running"}}
    api = OwnerApi({"team-a/vm-a-1": live, "team-a/vm-b-1": {**live, "metadata": {"uid": "pu-2",
                    "deletionTimestamp": "2026-11-28T00:00:00Z"}}})  # fmt: skip
    e = IPAMClaims(cast(Any, api), cast(Any, None), "node-a", tmp_path / "ipamclaims", 1.0)

    def use(pod: str, pod_uid: str, claim: str) -> Claim:
        return Claim("b", "storage", "10.1.0.5", "node-a", "ctr", "net1", pod=pod, pod_uid=pod_uid, ipam_claim=claim)

    e.let_go([use("team-a/vm-a-1", "pu-1", "team-a/vm-a.storage/cu-1"),  # lives on: its sandbox made again
              use("team-a/vm-b-1", "pu-2", "team-a/vm-b.storage/cu-2"),  # being deleted
              use("team-a/vm-c-1", "pu-3", "team-a/vm-c.storage/cu-3"),  # gone
              use("team-a/vm-a-1", "pu-9", "team-a/vm-d.storage/cu-4"),  # another pod of that name now
              use("team-a/vm-e-1", "", "team-a/vm-e.storage/cu-5")])  # fmt: skip
    e._owners.shutdown(wait=True)
    assert sorted(api.cleared) == [("team-a", "vm-b.storage", "cu-2", "vm-b-1"), ("team-a", "vm-c.storage", "cu-3",
                                   "vm-c-1"), ("team-a", "vm-d.storage", "cu-4", "vm-a-1")]  # fmt: skip
    assert ipamclaimapi.going(None, "x") and not ipamclaimapi.going(live, "pu-1")
    assert ipamclaimapi.going({**live, "status": {"phase": "Succeeded"}}, "pu-1")
