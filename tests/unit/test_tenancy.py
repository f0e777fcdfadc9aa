"""DANM's TenantConfig (intent/tenancy.py) and the ids it gives TenantNetworks (ipam/idclaims.py), on a real
node-local store in a temp dir: the config's checks with positions; which profile a TenantNetwork gets (the one
it names, else one chosen the same way on every node), the id claimed once (two allocators on one store, as two
nodes on one API server, get the same), exhaustion, NetworkID overrides; compiled end to end through the
Compiler (the VLAN link of the chosen device in the conflist); claims of networks that are gone freed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from netcomp.compiler.compiler import Compiler
from netcomp.intent import tenancy
from netcomp.intent.source import load_documents
from netcomp.ipam.idclaims import IdAllocator, IdClaim, id_claim_name
from netcomp.ipam.localstore import LocalStore
from netcomp.settings import Settings

CONFIG = """apiVersion: danm.k8s.io/v1
kind: TenantConfig
metadata: {name: tconf}
hostDevices:
- {name: ens4, vniType: vlan, vniRange: "1000-1001"}
- {name: ens5, vniType: vlan, vniRange: "2000-2001,2005"}
- {name: nokia.k8s.io/sriov_ens1f0, vniType: vlan, vniRange: "500-510"}
networkIds:
  flannel: flannel-conf
"""


def tnet(name: str, ns: str = "team-a", ntype: str = "ipvlan", uid: str = "", **opts: Any) -> str:
    meta = {"name": name, "namespace": ns, **({"uid": uid} if uid else {})}
    spec = {"NetworkID": name[:10], "NetworkType": ntype, "Options": {"cidr": "10.5.0.0/24", **opts}}
    return json.dumps({"apiVersion": "danm.k8s.io/v1", "kind": "TenantNetwork", "metadata": meta, "spec": spec})


def config() -> tenancy.TenantConfig:
    (doc,) = load_documents("tconf.yaml", CONFIG.encode())
    got, diags = tenancy.parse_config(doc)
    assert got is not None and not diags
    return got


def allocator(tmp_path: Path, node: str = "node-a") -> IdAllocator:
    return IdAllocator(LocalStore(tmp_path / "tenants", IdClaim), node)


def complete(text: str, alloc: IdAllocator | None) -> tuple[tenancy.Completion | None, list[str]]:
    (doc,) = load_documents("tnet.yaml", text.encode())
    got, diags = tenancy.complete(doc, config(), alloc.claim if alloc else tenancy.dry_claims())
    return got, [d.message for d in diags]


@pytest.mark.parametrize(
    ("text", "where", "words"),
    [
        ("hostDevices: []\n", "4:1", "either hostDevices, or networkIds must be provided"),
        ("hostDevices:\n- {name: ens4, vniType: qinq, vniRange: '1'}\n", "5:25", "vniType must be vlan or vxlan"),
        ("hostDevices:\n- {name: ens4, vniType: vlan}\n", "5:3", "vniType and vniRange must be provided together"),
        ("hostDevices:\n- {name: ens4, vniType: vlan, vniRange: 5000-5001}\n", "5:41", "ids are 1 to 4094"),
        ("hostDevices:\n- {name: ens4, vniType: vlan, vniRange: 7-x}\n", "5:41", "is not a list of ids and ranges"),
    ],
)
def test_a_bad_tenant_config_is_refused_at_the_key(text: str, where: str, words: str) -> None:
    head = "apiVersion: danm.io/v1\nkind: TenantConfig\nmetadata: {name: t}\n"
    (doc,) = load_documents("t.yaml", (head + text).encode())
    got, diags = tenancy.parse_config(doc)
    assert got is None
    assert any(f"{d.location.line}:{d.location.column}" == where and words in d.message for d in diags if d.location), [
        (d.location, d.message) for d in diags
    ]


def test_the_named_device_and_the_lowest_free_id(tmp_path: Path) -> None:
    a = allocator(tmp_path)
    got, diags = complete(tnet("one", host_device="ens5"), a)
    assert not diags and got is not None
    assert (got.host_device, got.vni_type, got.vni) == (None, "vlan", 2000)  # the tenant's own device stays
    got, _ = complete(tnet("two", host_device="ens5"), a)
    assert got is not None and got.vni == 2001
    got, _ = complete(tnet("three", host_device="ens5"), a)
    assert got is not None and got.vni == 2005  # the range's next part
    got, diags = complete(tnet("four", host_device="ens5"), a)
    assert got is None and diags == [
        "TenantConfig 'tconf': every id is taken on ens5 (vlan 2000-2001,2005): whole range is already reserved"
    ]
    got, diags = complete(tnet("five", host_device="eth9"), a)
    assert got is None and "host_device 'eth9' is not allowed to be used by tenants" in diags[0]
    got, diags = complete(tnet("six", host_device="nokia.k8s.io/sriov_ens1f0"), a)
    assert got is None and "is not allowed to be used by tenants" in diags[0]  # a device pool is not a host device


def test_every_node_gets_the_same_device_and_id(tmp_path: Path) -> None:
    """Two allocators on one store (two nodes on one API server): a network gets one claim, whoever compiles it
    first; it spreads over the devices by its name (DANM chose at random), and a full range passes to the next."""
    a, b = allocator(tmp_path, "node-a"), allocator(tmp_path, "node-b")
    seen = {}
    for name in ("alpha", "beta", "gamma", "delta"):
        got_a, _ = complete(tnet(name), a)
        got_b, _ = complete(tnet(name), b)
        assert got_a == got_b and got_a is not None and got_a.host_device in ("ens4", "ens5")
        seen[name] = (got_a.host_device, got_a.vni)
    assert len(set(seen.values())) == 4  # four networks, four ids
    assert {d for d, _ in seen.values()} == {"ens4", "ens5"}  # both devices used by these four names
    claims = LocalStore(tmp_path / "tenants", IdClaim).list()
    assert sorted(c.network for c in claims) == ["team-a/alpha", "team-a/beta", "team-a/delta", "team-a/gamma"]
    assert all(c.node in ("node-a", "node-b") for c in claims)
    # ens4 and ens5 have 2 + 3 ids: a fifth network still gets one, a sixth finds every range full.
    assert complete(tnet("epsilon"), b)[0] is not None
    got, diags = complete(tnet("zeta"), b)
    assert got is None and "every id is taken on" in diags[0] and "ens4" in diags[0] and "ens5" in diags[0]


def test_sriov_needs_its_pool_and_network_ids_override(tmp_path: Path) -> None:
    a = allocator(tmp_path)
    got, diags = complete(tnet("vf", ntype="sriov"), a)
    assert got is None and "device_pool must be provided for SR-IOV networks" in diags[0]
    got, diags = complete(tnet("vf", ntype="sriov", device_pool="nokia.k8s.io/sriov_ens1f0"), a)
    assert got is not None and (got.host_device, got.vni) == (None, 500)
    got, diags = complete(tnet("fl", ntype="flannel"), a)
    assert got is not None and got.network_id == "flannel-conf" and got.vni is None and not diags
    dry = tenancy.dry_claims()  # `netcomp validate`: distinct ids within one compile, claimed nowhere
    (d1,), (d2,) = load_documents("a.yaml", tnet("x1").encode()), load_documents("b.yaml", tnet("x2").encode())
    c1, c2 = tenancy.complete(d1, config(), dry)[0], tenancy.complete(d2, config(), dry)[0]
    assert c1 is not None and c2 is not None and (c1.host_device, c1.vni) != (c2.host_device, c2.vni)


def test_a_tenant_network_compiles_with_its_device_and_vlan(tmp_path: Path) -> None:
    nets = tmp_path / "networks.d"
    nets.mkdir()
    (nets / "00-tconf.yaml").write_text(CONFIG)
    (nets / "10-internal.yaml").write_text(tnet("internal", host_device="ens4", container_prefix="int"))
    (nets / "11-tenant-set.yaml").write_text(tnet("bad", vlan=7))  # a tenant may not set an id
    s = Settings(intentDirs=[str(nets)], outputDir=str(tmp_path / "out"), staticDirs=[], pluginDirs=[])
    c = Compiler(s)
    alloc = allocator(tmp_path)
    c.claim_ids = alloc.claim
    plan = c.compile()
    art = plan.artifacts["team-a.internal.conflist"]
    conf = json.loads(art.data)
    assert conf["netcomp"]["hostLink"] == {"kind": "vlan", "name": "ens4.1000", "link": "ens4", "id": 1000}
    assert conf["netcomp"]["tenantConfig"] == {"name": "tconf", "vlan": 1000, "networkID": "internal"}
    assert conf["plugins"][0]["master"] == "ens4.1000"
    assert any("Manually configuring Spec.Options.vlan" in d.message for d in plan.diagnostics)
    assert "team-a.bad.conflist" not in plan.artifacts
    # The same compile again keeps the intent (nothing to render again) and the claim.
    again = c.compile()
    assert again.artifacts["team-a.internal.conflist"].data == art.data
    assert [cl.vni for cl in alloc.claims()] == [1000]
    # The file removed: its claim freed by the daemon's release (present = what the compiler read).
    (nets / "10-internal.yaml").unlink()
    c.compile()
    present = c.tenant_networks()
    assert present is not None and "team-a/internal" not in present
    freed = alloc.release_gone(lambda cl: cl.network not in present)
    assert [cl.name for cl in freed] == [id_claim_name("ens4", "vlan", 1000)]
    assert LocalStore(tmp_path / "tenants", IdClaim).list() == []


def test_two_nodes_racing_for_one_network_end_with_one_claim(tmp_path: Path) -> None:
    """Eight allocators (eight nodes) on one store claim for the same TenantNetwork at once, released together by
    a barrier: one claim is made, every one of them gets its id."""
    import threading

    barrier = threading.Barrier(8)
    got: list[tuple[str, int]] = []
    lock = threading.Lock()
    (doc,) = load_documents("t.yaml", tnet("raced", host_device="ens4").encode())

    def node(i: int) -> None:
        alloc = allocator(tmp_path, f"node-{i}")
        barrier.wait()
        c, _ = tenancy.complete(doc, config(), alloc.claim)
        assert c is not None and c.vni is not None
        with lock:
            got.append((c.vni_type or "", c.vni))

    threads = [threading.Thread(target=node, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [("vlan", 1000)] * 8
    assert [(c.network, c.vni) for c in LocalStore(tmp_path / "tenants", IdClaim).list()] == [("team-a/raced", 1000)]


def test_a_network_made_again_under_its_name_is_another_network(tmp_path: Path) -> None:
    a = allocator(tmp_path)
    first, _ = complete(tnet("again", uid="u1", host_device="ens4"), a)
    second, _ = complete(tnet("again", uid="u2", host_device="ens4"), a)
    assert first is not None and second is not None and (first.vni, second.vni) == (1000, 1001)


def test_a_taken_id_whose_holder_cannot_be_read_claims_nothing_more(tmp_path: Path) -> None:
    """A store that says taken but cannot say by whom (the API server's GET failed: a fake store, since that
    cannot be made to happen on demand): the claim is tried again later, never a second id."""
    from netcomp.intent.tenancy import ClaimUnavailable
    from netcomp.ipam.store import Taken

    class Unreadable(LocalStore):
        def create(self, claim: Any) -> Any:
            raise Taken(None)

    alloc = IdAllocator(Unreadable(tmp_path / "t", IdClaim), "node-a")
    with pytest.raises(ClaimUnavailable, match="its holder cannot be read"):
        alloc.claim("team-a/x", "", tuple(config().profiles[:1]))


def test_a_tenant_network_without_a_tenant_config_gets_no_device(tmp_path: Path) -> None:
    nets = tmp_path / "networks.d"
    nets.mkdir()
    (nets / "10-mine.yaml").write_text(tnet("mine", host_device="eth0"))
    plan = Compiler(Settings(intentDirs=[str(nets)], outputDir=str(tmp_path / "out"), staticDirs=[], pluginDirs=[]))
    got = plan.compile()
    assert "team-a.mine.conflist" not in got.artifacts
    assert any("takes its device from the TenantConfig, and none is in use" in d.message for d in got.diagnostics)
