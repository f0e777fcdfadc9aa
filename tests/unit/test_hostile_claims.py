"""TenantClaim and AddressClaim objects written by a hostile node (any node's credentials may write them): a
TenantClaim counts only as the claim its own name is, with fields of their types and an id in its range; an
AddressClaim of an address outside its network's pool is ignored where the pool is known; and the followers of
address blocks and of claims say in GET /status why they cannot follow and how they back off."""

from __future__ import annotations

import ipaddress
import threading
from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from netcomp.delegate import poolclaims
from netcomp.errors import DelegateError
from netcomp.ipam import claimobjects, ipamclaimapi
from netcomp.ipam.allocator import Allocator
from netcomp.ipam.blockalloc import BlockAllocator
from netcomp.ipam.blockobjects import KubeBlocks
from netcomp.ipam.blockstate import BlockRecord, Held, LocalRecord
from netcomp.ipam.claimobjects import IDS, KubeStore
from netcomp.ipam.claimrecord import Kept
from netcomp.ipam.idclaims import IdAllocator, id_claim_name
from netcomp.ipam.ipamclaims import IPAMClaims
from netcomp.ipam.store import CLAIM_HOLDER, Claim, StoreUnavailable, holder_doc
from netcomp.metrics import Metrics
from netcomp.pods.multus import Ask
from netcomp.pods.naming import PodRef
from netcomp.records.record import Attachment
from netcomp.settings import KubeSettings
from tests.lab.goneapi import FakeTime, Gone410
from tests.lab.hostile import JSON, Ignored, nested, pool
from tests.lab.kubeapi import write_kubeconfig
from tests.lab.pools import NoStore
from tests.lab.pools import pool as block_pool

# ------------------------------------------------------------------------------------------------ TenantClaim


def tenant(name: str | None = None, vni: Any = 1000, **spec: Any) -> dict[str, Any]:
    s = {"profile": "ens4", "vniType": "vlan", "vni": vni, "network": {"namespace": "t", "name": "net"},
         "node": "node-b", **spec}  # fmt: skip
    if name is None:
        name = id_claim_name("ens4", "vlan", vni if isinstance(vni, int) else 1000)
    return {"kind": "TenantClaim", "metadata": {"name": name, "uid": "u"}, "spec": s}


def test_a_tenant_claim_is_taken_only_under_its_name(ignored: Ignored) -> None:
    """A TenantClaim whose name is not id_claim_name(profile, type, id), whose id is no int of its type's range,
    or whose holder's fields are not strings is ignored (and counted); the right one is read."""
    got = claimobjects.id_from_object(tenant())
    assert got is not None and (got.vni, got.network, got.node) == (1000, "t/net", "node-b")
    bad = [
        tenant(name=id_claim_name("ens4", "vlan", 1001)),  # another id's name: forged
        tenant(name=id_claim_name("ens4", "vlan", 5000), vni=5000),  # no VLAN id
        tenant(name=id_claim_name("ens4", "vlan", 0), vni=0),
        tenant(vni=True),
        tenant(vni="1000"),
        tenant(vniType="gre"),
        tenant(profile={"a": 1}),
        tenant(network=["t", "net"]),
        tenant(network={"namespace": "t", "name": 7}),
        tenant(network={"namespace": "t", "name": "net", "uid": {"x": 1}}),
        tenant(node=None),
        {"kind": "TenantClaim", "metadata": {"name": id_claim_name("ens4", "vlan", 1000)}, "spec": "x"},
    ]
    for i, obj in enumerate(bad):
        obj["metadata"]["resourceVersion"] = str(i)  # each a version of its own: each reported
        assert claimobjects.id_from_object(obj) is None, obj
    assert ignored.kinds.count("TenantClaim") == len(bad)


def test_a_forged_tenant_claim_does_not_take_another_id() -> None:
    """A claim of this network's id 1000 stored under the name of id 1001 neither holds 1000 for the network nor
    keeps anyone from 1001: the view never gets it."""

    class Store:
        kind = "test"

        def list(self) -> list[Any]:
            forged = tenant(name=id_claim_name("ens4", "vlan", 1001), network={"namespace": "x", "name": "y"})
            return [c for c in map(claimobjects.id_from_object, [forged]) if c is not None]

    assert IdAllocator(Store(), "node-a").claims() == []
    a = IdAllocator(Store(), "node-a")
    a._ensure_listed()
    assert a.claims() == []


_ids = st.one_of(st.integers(-(1 << 70), 1 << 70), st.sampled_from([0, 1, 4094, 4095, 16777214, 16777215]), JSON)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.one_of(st.text(max_size=30), JSON, st.just(id_claim_name("ens4", "vlan", 1000))),
    profile=st.one_of(st.just("ens4"), st.text(max_size=20), JSON),
    vtype=st.one_of(st.sampled_from(["vlan", "vxlan", "x"]), JSON),
    vni=_ids,
    network=st.one_of(st.fixed_dictionaries({"namespace": st.text(max_size=5), "name": JSON}), JSON),
    node=JSON,
    meta=st.one_of(JSON, st.just(None)),
    deep=st.integers(0, 3000),
)
def test_the_tenant_claim_decoder_takes_anything(
    name: Any, profile: Any, vtype: Any, vni: Any, network: Any, node: Any, meta: Any, deep: int
) -> None:
    """Random and adversarial TenantClaim objects (wrong types, ids out of range, deep nesting): nothing escapes,
    and whatever is read is the claim of its name."""
    spec = {"profile": profile, "vniType": vtype, "vni": vni, "network": network, "node": node, "x": nested(deep)}
    for obj in (
        {"kind": "TenantClaim", "metadata": {"name": name, "uid": nested(deep)}, "spec": spec},
        {"kind": "TenantClaim", "metadata": meta, "spec": network},
        {"kind": "TenantClaim", "metadata": meta, "spec": spec},
        name,
    ):
        got = claimobjects.id_from_object(obj)
        if got is not None:
            assert got.name == id_claim_name(got.profile, got.vni_type, got.vni)
            assert isinstance(got.vni, int) and 1 <= got.vni <= 16777214
            assert all(isinstance(v, str) for v in (got.network, got.network_uid, got.node, got.uid))


# ------------------------------------------------------------------------------------------------ AddressClaim


def address_claim(address: str, node: str = "node-b") -> Claim:
    return Claim(claimobjects.claim_name("n", ipaddress.ip_address(address)), "n", address, node, "c", "net1",
                 uid=f"u-{address}")  # fmt: skip


def test_an_address_claim_outside_the_networks_pool_is_ignored(ignored: Ignored) -> None:
    """A claim at its right name of an address outside the network's pool is ignored (counted) where the pool is
    known, whether the watch brings it or it was in the view before the pool was; one inside is kept, and so is
    one of a network this node does not serve."""
    a = Allocator(NoStore(), "node-a")
    a.changed(address_claim("192.168.9.9").name, address_claim("192.168.9.9"))  # no pool known yet: kept
    a.serve({"n": pool("10.0.0.0/24")})
    assert a.claims("n") == []
    for addr in ("10.0.0.5", "10.9.0.5", "fd00::5"):
        a.changed(address_claim(addr).name, address_claim(addr))
    assert [c.address for c in a.claims("n")] == ["10.0.0.5"]
    assert ignored.kinds.count("AddressClaim") == 3
    other = Claim(claimobjects.claim_name("m", ipaddress.ip_address("10.9.0.5")), "m", "10.9.0.5", "node-b", "c", "x")
    a.changed(other.name, other)
    assert [c.address for c in a.claims("m")] == ["10.9.0.5"]


def test_this_nodes_own_claim_outside_the_pool_is_kept() -> None:
    """This node's claim outside the pool (a subnet edited under it) stays in the view: it is this node's to
    release, which it cannot do with a claim it no longer sees."""
    a = Allocator(NoStore(), "node-a")
    a.serve({"n": pool("10.0.0.0/24")})
    mine = address_claim("10.9.0.5", node="node-a")
    a.changed(mine.name, mine)
    assert a.claims("n") == [mine]


# ------------------------------------------------------------------------------------------------ status


def cluster_for(tmp_path: Path, t: FakeTime) -> Any:
    from netcomp.cluster.intents import Cluster

    path = write_kubeconfig(tmp_path / "kubeconfig", {"token": "t"})
    return Cluster(KubeSettings(kubeconfig=path), tmp_path / "cluster", Metrics(), "node-a", backoff=t.backoff)


def watch_status(t: FakeTime, follower: Any, cluster: Any) -> list[Any]:
    """What the cluster's status says at each wait of `follower`'s back-off."""
    seen: list[Any] = []
    real_wait = follower.backoff.wait

    def wait(s: threading.Event, seconds: float) -> None:
        seen.append(cluster.status()["lastError"])
        real_wait(s, seconds)

    follower.backoff.wait = wait
    return seen


def test_the_claims_followers_say_their_failure_and_back_off_in_status(tmp_path: Path) -> None:
    """The AddressClaim and TenantClaim followers back off on the cluster's Backoff, and GET /status's
    kubernetes.lastError says why they cannot follow and when they try again."""
    for codec, what in ((claimobjects.ADDRESSES, "address claims"), (IDS, "TenantConfig id claims")):
        stop = threading.Event()
        t = FakeTime(stop, window=10)
        cluster = cluster_for(tmp_path, t)
        store = KubeStore(cluster.handle, codec)
        store.custom = Gone410(t)
        seen = watch_status(t, store, cluster)
        store.follow(lambda name, claim: None, stop)
        assert t.calls <= 5
        assert seen[0] == f"cannot follow {what}: the API server answered 410 Gone: too old resource version: 5 " \
            "(9) (answered to a list) (failed once; backing off, trying again in 1 s)"  # fmt: skip
        assert seen[2].endswith("(failed 3 times in a row; backing off, trying again in 3 s)")


def test_the_blocks_follower_says_its_failure_and_back_off_in_status(tmp_path: Path) -> None:
    """The AddressBlock follower backs off on the cluster's Backoff, and GET /status's kubernetes.lastError says
    why it cannot follow and when it tries again."""
    stop = threading.Event()
    t = FakeTime(stop, window=10)
    cluster = cluster_for(tmp_path, t)
    blocks = KubeBlocks(cluster.handle)
    blocks.custom = Gone410(t)
    blocks.alloc = BlockAllocator(NoStore(), "node-a", LocalRecord(tmp_path / "blocks.json", "node-a"))
    blocks.alloc.serve({"n": pool()})
    seen = watch_status(t, blocks, cluster)
    blocks._follow("netcomp.io/network in (n)", stop, lambda: True)
    assert t.calls <= 5
    assert seen[0] is not None and seen[0].startswith("cannot follow address blocks: the API server answered 410")
    assert seen[0].endswith("(failed once; backing off, trying again in 1 s)")


def test_writers_of_an_object_of_any_shape(ignored: Ignored) -> None:
    """foreign.ignore names the writers of whatever it is given: metadata that is a list, managedFields that are not
    a list, managers that are not strings; it never raises."""
    from netcomp import foreign

    for obj in (
        {"metadata": []},
        {"metadata": {"managedFields": {}}},
        {"metadata": {"managedFields": [1, {"manager": 2}]}},
        [],
    ):
        assert foreign.writers(obj) == "unknown"  # type: ignore[arg-type]
        foreign.ignore("AddressClaim", "x", "why", obj)  # type: ignore[arg-type]
    assert foreign.writers({"metadata": {"managedFields": [{"manager": "kubectl"}]}}) == "kubectl"


# ------------------------------------------------------------------------------------------------ IPAMClaim


class ClaimCalls:
    """The calls an ADD naming an IPAMClaim makes of the API server, answered from one claim object as a tenant
    left it (`obj`); what is written is recorded."""

    def __init__(self, obj: dict[str, Any]) -> None:
        self.obj, self.written = obj, []  # type: list[Any]
        self.answer: dict[str, Any] | None = None  # the object a write of the status finds (None: obj)

    def get(self, namespace: str, name: str) -> Any:
        return ipamclaimapi.parse(self.obj)

    def mark(self, c: Any, node: str | None) -> Any:
        self.written.append(("mark", node))
        return c

    def write_status(self, c: Any, ips: list[str], owner_pod: str) -> Any:
        self.written.append(("status", ips, owner_pod))
        return ipamclaimapi.parse(self.answer or self.obj)

    def pod(self, namespace: str, name: str) -> Any:
        return None


def tenant_claim(*ips: str, owner: str = "vm-a") -> dict[str, Any]:
    meta = {"namespace": "team-a", "name": "vm-a.storage", "uid": "u-1", "resourceVersion": "7",
            "labels": {"netcomp.io/node": "node-a"}, "finalizers": [ipamclaimapi.FINALIZER]}  # fmt: skip
    status = {"ips": list(ips), "ownerPod": {"name": owner}}
    return {"metadata": meta, "spec": {"network": "storage", "interface": "net1"}, "status": status}


class Unwritten:
    """A block store the API server is away from: what a node writes of its blocks waits (written behind)."""

    kind = "test"

    def write_used(self, *args: Any) -> Any:
        raise StoreUnavailable("the API server is away")


def holding_node(tmp_path: Path, obj: dict[str, Any]) -> tuple[IPAMClaims, Any, Claim]:
    """Node node-a, which holds block 10.1.0.0/28 of network storage and in it 10.1.0.5 for claim team-a/vm-a.storage
    (u-1), its status written (a pod of the claim uses it); the claim now as `obj` says."""
    p = block_pool({"subnet": "10.1.0.0/24"}, network="storage", block=16)
    blocks = BlockAllocator(cast(Any, Unwritten()), "node-a", LocalRecord(tmp_path / "blocks.json", "node-a"))
    blocks.serve({"storage": p})
    name = "storage.v4-10-1-0-0-28"
    own = Claim(name, "storage", "10.1.0.5", "node-a", CLAIM_HOLDER + "u-1", "net1", block=name,
                ipam_claim="team-a/vm-a.storage/u-1")  # fmt: skip
    blocks.held[name] = Held(name, "storage", 0, ipaddress.ip_network("10.1.0.0/28"))
    e = IPAMClaims(cast(Any, ClaimCalls(obj)), blocks, "node-a", tmp_path / "ipamclaims", 1.0)
    e.keep(Kept(own.ipam_claim, "storage", "net1", [own], held=True, status=True))
    blocks.load(e.load())
    return e, p, own


def test_a_forged_status_never_frees_the_address_a_pod_uses(tmp_path: Path) -> None:
    """A tenant who can write its claim's status names another (free) address in it and starts a pod naming the
    claim: the ADD is refused naming both, and the address netcomp gave the claim (a running pod of it uses it)
    stays the claim's, never given to anyone else."""
    for owner in ("vm-a", "vm-b"):  # the pod that used it named, or the new pod (ownerPod forged too)
        e, p, own = holding_node(tmp_path / owner, tenant_claim("10.1.0.7/24", owner=owner))
        with pytest.raises(DelegateError) as got:
            e.take(p, ("storage",), "net1", "team-a/vm-a.storage", ("team-a/vm-b", "pu"), "ctr-b")
        assert got.value.code == 7 and "10.1.0.7" in got.value.msg and "10.1.0.5" in got.value.msg, got.value.msg
        assert e.blocks.entry_of(own.block, ipaddress.ip_address("10.1.0.5")) == (True, own)
        assert e.blocks.entry_of(own.block, ipaddress.ip_address("10.1.0.7")) == (True, None)


def test_a_node_barring_claims_makes_none_for_the_annotation() -> None:
    """kubernetes.podFields without ipam-claim-reference: a pod's netcomp.io/ipam-claims annotation is refused
    naming the field, as the element's own reference is; no claim is made for it with the node's credentials."""
    conf = {"name": "storage", "netcomp": {"pool": {"type": "cluster", "ranges": [[{"subnet": "10.1.0.0/24"}]]}},
            "plugins": [{"type": "macvlan", "ipam": {"type": "static"}}]}  # fmt: skip
    atts, asks = [Attachment("storage", "net1", conf)], {"net1": Ask("storage", "team-a", "item 0")}
    with pytest.raises(DelegateError) as got:
        poolclaims.own_claims(atts, asks, PodRef("team-a", "db-0"), frozenset({"ips"}))
    assert got.value.code == 7 and "'ipam-claim-reference': not allowed on this node" in got.value.msg
    both = frozenset({"ips", "ipam-claim-reference"})
    assert poolclaims.own_claims(atts, asks, PodRef("team-a", "db-0"), both)["net1"].ipam_claim == "db-0.net1"


IPS = st.lists(st.one_of(JSON, st.sampled_from(["10.1.0.5/24", "fd00::5%eth0/64", "10.1.0.0/24", "::ffff:10.1.0.5/128",
                                               "1" * 70, "10.1.0.5", "10.1.0.5/33"])), max_size=4)  # fmt: skip


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(meta=JSON, spec=JSON, ips=st.one_of(JSON, IPS), owner=JSON, labels=JSON, fins=JSON, name=JSON)
def test_an_ipamclaim_of_any_shape_is_a_claim_or_a_value_error(
    meta: Any, spec: Any, ips: Any, owner: Any, labels: Any, fins: Any, name: Any
) -> None:
    """What a tenant writes in its IPAMClaim, of any JSON shape: parse answers a claim whose every field is of its
    type and bounded, or ValueError; nothing else escapes."""
    good = tenant_claim("10.1.0.5/24")
    for obj in (
        {**good, "metadata": meta},
        {**good, "spec": spec},
        {**good, "status": {"ips": ips, "ownerPod": owner}},
        {**good, "status": {"ownerPod": {"name": owner}}},
        {**good, "metadata": {**good["metadata"], "labels": labels, "finalizers": fins, "name": name}},
        meta,
    ):
        try:
            c = ipamclaimapi.parse(obj)
        except ValueError:
            continue
        assert all(isinstance(v, str) for v in (c.namespace, c.name, c.uid, c.network, c.interface, c.owner_pod))
        assert len(c.ips) <= ipamclaimapi.MAX_IPS and all(isinstance(f, str) for f in c.finalizers)
        assert len(c.name) <= 253 and len(c.interface) <= 15 and len(c.owner_pod) <= 253 and "/" not in c.name


def test_a_held_claims_damaged_file_loses_no_address(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The file of a claim this node holds an address for, damaged on disk (truncated): the node starts and says
    so, keeps the entry its block's object records for that claim (never given to another pod), rebuilds the
    claim's file once the claims labelled with it are listed, and frees the address with the claim."""
    obj = tenant_claim("10.1.0.5/24")
    _, p, own = holding_node(tmp_path, obj)
    path = tmp_path / "ipamclaims" / "u-1.json"
    path.write_bytes(path.read_bytes()[:40])  # the disk lost its end
    blocks = BlockAllocator(cast(Any, Unwritten()), "node-a", LocalRecord(tmp_path / "blocks.json", "node-a"))
    blocks.serve({"storage": p})
    blocks.held[own.block] = Held(own.block, "storage", 0, ipaddress.ip_network("10.1.0.0/28"))
    e = IPAMClaims(cast(Any, ClaimCalls(obj)), blocks, "node-a", tmp_path / "ipamclaims", 1.0)
    blocks.load(e.load())
    assert f"cannot read {path}" in caplog.text
    e.listed([ipamclaimapi.parse(obj)])  # the claims labelled with the node, listed before its blocks
    assert "u-1" not in e.kept
    rec = BlockRecord(own.block, "storage", "10.1.0.0/28", "node-a", used={"10.1.0.5": holder_doc(own)})
    blocks.seen(rec, "list")  # the block's object, as the API server has it
    addr = ipaddress.ip_address("10.1.0.5")
    assert blocks.entry_of(own.block, addr)[1] is not None, "the claim's address is free to give"
    e.recheck()
    assert [x.address for x in e.kept["u-1"].entries] == ["10.1.0.5"] and e.kept["u-1"].held
    assert b'"10.1.0.5"' in path.read_bytes()
    e.deleted(None, "u-1")
    assert blocks.entry_of(own.block, addr) == (True, None)


def test_a_claim_moved_to_another_network_keeps_its_address_where_it_is(tmp_path: Path) -> None:
    """A tenant edits its claim's spec.network to another network whose pool has the same subnet and starts a pod
    on that network naming the claim: refused naming both networks; the address stays the claim's in the first
    network (a pod there uses it) and nothing is taken in the second."""
    obj = tenant_claim("10.1.0.5/24")
    obj["spec"]["network"] = "backup"
    e, _, own = holding_node(tmp_path, obj)
    backup = block_pool({"subnet": "10.1.0.0/24"}, network="backup", block=16)
    e.blocks.serve({"storage": e.blocks.pools["storage"], "backup": backup})
    name = "backup.v4-10-1-0-0-28"
    e.blocks.held[name] = Held(name, "backup", 0, ipaddress.ip_network("10.1.0.0/28"))
    with pytest.raises(DelegateError) as got:
        e.take(backup, ("backup",), "net1", "team-a/vm-a.storage", ("team-a/vm-b", "pu"), "ctr-b")
    assert got.value.code == 7 and "'storage'" in got.value.msg and "'backup'" in got.value.msg, got.value.msg
    assert e.blocks.entry_of(own.block, ipaddress.ip_address("10.1.0.5")) == (True, own)
    assert e.blocks.claims("backup") == [] and [k.network for k in e.kept.values()] == ["storage"]


def test_a_claim_edited_while_its_status_is_written_is_no_internal_error(tmp_path: Path) -> None:
    """The tenant makes its claim unreadable (spec.interface of 16 characters) between the node's read and its
    write of the claim's status, whose answer is then that object: the ADD is refused with a CNI error (no
    "internal error"), and the node's look at unfinished claims (recheck) goes on, the address kept for the claim."""
    obj = tenant_claim()
    e, p, own = holding_node(tmp_path, obj)
    e.kept["u-1"].status = False  # given here, its status not written yet (the crash case)
    bad = tenant_claim()
    bad["spec"]["interface"] = "x" * 16
    cast(ClaimCalls, e.api).answer = bad
    with pytest.raises(DelegateError) as got:
        e.take(p, ("storage",), "net1", "team-a/vm-a.storage", ("team-a/vm-a", "pu"), "ctr-a")
    assert got.value.code == 11 and "spec.interface" in got.value.msg, got.value.msg
    e.recheck()
    assert e.blocks.entry_of(own.block, ipaddress.ip_address("10.1.0.5")) == (True, own) and e.kept["u-1"].held


def test_an_own_claim_made_meanwhile_by_its_tenant_is_no_internal_error(tmp_path: Path) -> None:
    """The claim netcomp makes for a pod (netcomp.io/ipam-claims) is made first by the tenant, of a shape no claim
    has, between the node's read (none) and its create: the ADD answers 11 (its retry reads the claim and refuses
    it as what it is), never an internal error."""
    bad = tenant_claim()
    bad["spec"]["interface"] = "x" * 16

    class MadeMeanwhile(ClaimCalls):
        def get(self, namespace: str, name: str) -> Any:
            raise ipamclaimapi.Missing("404") if not self.written else ValueError("spec.interface")

        def pod(self, namespace: str, name: str) -> Any:
            return {"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db",
                                                      "uid": "s", "controller": True}]}}  # fmt: skip

        def create(self, *args: Any) -> Any:
            self.written.append("create")
            raise ipamclaimapi.Changed("409")

    e, p, _ = holding_node(tmp_path, bad)
    e.api = cast(Any, MadeMeanwhile(bad))
    with pytest.raises(DelegateError) as got:
        e.take(p, ("storage", "storage"), "net1", "team-a/db-0.net1", ("team-a/db-0", "pu"), "ctr", create=True)
    assert got.value.code == 11 and "made meanwhile" in got.value.msg
    with pytest.raises(DelegateError) as got:
        e.take(p, ("storage", "storage"), "net1", "team-a/db-0.net1", ("team-a/db-0", "pu"), "ctr", create=True)
    assert got.value.code == 7 and "spec.interface" in got.value.msg


def test_a_claim_deleted_while_its_damaged_file_is_unread_keeps_its_address_and_finalizer(tmp_path: Path) -> None:
    """A review found it: the claim of a damaged file, being deleted, listed before the node's blocks. Its
    deletion took netcomp's finalizer off at once, with nothing known of its addresses (the pod its status names
    could still run on them), and the file was then written again for a claim that was gone. Now the deletion
    waits for the record: the finalizer stays and the address stays the claim's; once the blocks show its entry,
    the record is made again and the deletion goes on (here its pod is gone: freed, the finalizer off)."""
    obj = tenant_claim("10.1.0.5/24")
    _, p, own = holding_node(tmp_path, obj)
    path = tmp_path / "ipamclaims" / "u-1.json"
    path.write_bytes(path.read_bytes()[:40])
    obj["metadata"]["deletionTimestamp"] = "2026-11-28T17:00:00Z"
    blocks = BlockAllocator(cast(Any, Unwritten()), "node-a", LocalRecord(tmp_path / "blocks.json", "node-a"))
    blocks.serve({"storage": p})
    blocks.held[own.block] = Held(own.block, "storage", 0, ipaddress.ip_network("10.1.0.0/28"))
    api = ClaimCalls(obj)
    e = IPAMClaims(cast(Any, api), blocks, "node-a", tmp_path / "ipamclaims", 1.0)
    blocks.load(e.load())
    claim = ipamclaimapi.parse(obj)
    assert claim.deleting
    e.listed([claim])
    e.deleted(claim, "u-1")  # as the watch would tell it too
    assert api.written == [], "the finalizer was taken off with nothing known of the claim's addresses"
    rec = BlockRecord(own.block, "storage", "10.1.0.0/28", "node-a", used={"10.1.0.5": holder_doc(own)})
    blocks.seen(rec, "list")
    addr = ipaddress.ip_address("10.1.0.5")
    assert blocks.entry_of(own.block, addr)[1] is not None
    e.recheck()
    assert ("mark", None) in api.written and "u-1" not in e.kept
    assert blocks.entry_of(own.block, addr) == (True, None)


def test_a_damaged_file_is_made_again_only_from_every_address_of_the_claims_status(tmp_path: Path) -> None:
    """A review found it: a dual-stack claim's file made again from the one of its two blocks seen first lost
    the other address's protection (and every later ADD of the claim was refused as edited). Now the record is
    made again only once the blocks show an entry for every address of the status that lies in a pool."""
    obj = tenant_claim("10.1.0.5/24")
    _, p, own = holding_node(tmp_path, obj)
    path = tmp_path / "ipamclaims" / "u-1.json"
    path.write_bytes(path.read_bytes()[:40])
    obj["status"]["ips"].append("fd00::5/64")  # its other family's block not seen yet
    blocks = BlockAllocator(cast(Any, Unwritten()), "node-a", LocalRecord(tmp_path / "blocks.json", "node-a"))
    blocks.serve({"storage": p, "six": block_pool({"subnet": "fd00::/64"}, network="six", block=16)})
    blocks.held[own.block] = Held(own.block, "storage", 0, ipaddress.ip_network("10.1.0.0/28"))
    e = IPAMClaims(cast(Any, ClaimCalls(obj)), blocks, "node-a", tmp_path / "ipamclaims", 1.0)
    blocks.load(e.load())
    e.listed([ipamclaimapi.parse(obj)])
    rec = BlockRecord(own.block, "storage", "10.1.0.0/28", "node-a", used={"10.1.0.5": holder_doc(own)})
    blocks.seen(rec, "list")
    e.recheck()
    assert "u-1" not in e.kept and "u-1" in e.record.unread
