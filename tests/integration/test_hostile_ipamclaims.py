"""IPAMClaims written by a hostile tenant, against a real kube-apiserver and node daemons serving lab netns with
the real plugins: a claim whose status.ips is rewritten to another free address while its pod runs (the next
pod naming it is refused, and the address the running pod has is never given to another); and a node whose
record of a claim it holds an address for is damaged on disk while it is down (it starts, says so, and the
address stays the claim's). The decisions alone: tests/unit/test_hostile_claims.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.lab.claimlab import CLAIMS, add, block_entry, ipam_claim, launcher, read_claim
from tests.lab.clusternodes import addresses, flushed, network, nodes, shared_network
from tests.lab.kubeapi import ApiServer
from tests.lab.labpods import cni_args
from tests.lab.poll import until

pytestmark = pytest.mark.root


def test_a_status_rewritten_by_its_tenant_takes_no_live_address(
    api: ApiServer, admin: Any, core: Any, custom: Any, claim_crd: None, tmp_path: Path
) -> None:
    """The claim's pod runs with the address netcomp gave the claim; its tenant writes another free address into
    status.ips (and names the next pod its owner). That pod, of the same controller, is refused naming both
    addresses, nothing attached; the running pod's address stays the claim's entry, and the node's other ADDs
    never get it."""
    with (
        shared_network(custom, network("forgenet", "10.130.0.0/24", blockSize=16)),
        nodes(tmp_path, api, ["node-f"], "forgenet") as labs,
        ipam_claim(custom, "vm-f", "forgenet"),
    ):
        [dl] = labs
        with launcher(core, "vm-f-1", "node-f", "vm-f", "forgenet") as p1:
            ctr1, rc, res = add(dl, p1)
            assert rc == 0, res
            [addr] = addresses(dl, ctr1, "net1")
            flushed(labs)
            entry = block_entry(custom, "forgenet", addr)
            forged = "10.130.0.9" if addr != "10.130.0.9" else "10.130.0.10"
            custom.patch_namespaced_custom_object_status(
                *CLAIMS, "vm-f", {"status": {"ips": [f"{forged}/24"], "ownerPod": {"name": "vm-f-2"}}}
            )
            with launcher(core, "vm-f-2", "node-f", "vm-f", "forgenet") as p2:
                ctr2, rc, res = add(dl, p2)
                assert rc != 0 and res["code"] == 7, res
                assert f"says {forged} of network 'forgenet', but netcomp gave it {addr}" in res["msg"], res
                assert dl.lab.links(ctr2) == ["lo"]
            others = []
            for _ in range(3):
                ctr = dl.lab.container()
                rc, res = dl.shim("ADD", ctr, args="NETCOMP_NETWORKS=forgenet", ready_timeout=30)
                assert rc == 0 and addr not in addresses(dl, ctr), res
                others.append(ctr)
            flushed(labs)
            assert block_entry(custom, "forgenet", addr) == entry
            assert block_entry(custom, "forgenet", forged) is None  # nothing taken for the forged address
            assert addresses(dl, ctr1, "net1") == [addr]
            assert dl.shim("DEL", ctr1, args=cni_args(p1, ctr1))[0] == 0
            for ctr in others:
                assert dl.shim("DEL", ctr, ready_timeout=30)[0] == 0


def test_a_damaged_record_of_a_held_claim_loses_no_address(
    api: ApiServer, admin: Any, core: Any, custom: Any, claim_crd: None, tmp_path: Path
) -> None:
    """The node's file of a claim whose address it holds is cut short while the daemon is down (the disk lost its
    end): the daemon starts and says so, the address stays the claim's in its block (the node's other ADDs never
    get it), the file is written again from the block, and the next pod naming the claim gets the address."""
    from tests.lab.procdaemon import kube_proc_node

    with (
        shared_network(custom, network("damagenet", "10.131.0.0/24", blockSize=16)),
        kube_proc_node(api, tmp_path, "node-d", extra={"defaultNetwork": None}) as node,
        ipam_claim(custom, "vm-d", "damagenet") as claim,
        launcher(core, "vm-d-1", "node-d", "vm-d", "damagenet") as p,
    ):
        ctr = node.lab.container()
        rc, res = node.shim("ADD", ctr, args=cni_args(p, ctr))
        assert rc == 0, (res, node.logs())
        [addr] = [a.split("/")[0] for a in node.lab.addrs(ctr, "net1")]
        assert node.shim("DEL", ctr, args=cni_args(p, ctr))[0] == 0
        node.kill()
        record = node.cache_dir / "ipam" / "ipamclaims" / f"{claim['metadata']['uid']}.json"
        record.write_bytes(record.read_bytes()[:40])
        node.start()
        until(lambda: f"cannot read {record}" in node.logs(), lambda: node.logs(), 30)
        until(lambda: addr.encode() in record.read_bytes(), lambda: node.logs(), 60)  # written again
        others = []
        for _ in range(3):
            other = node.lab.container()
            rc, res = node.shim("ADD", other, args="NETCOMP_NETWORKS=damagenet")
            assert rc == 0 and not any(a.startswith(f"{addr}/") for a in node.lab.addrs(other, "net0")), res
            others.append(other)
        entry = block_entry(custom, "damagenet", addr)
        assert entry is not None and entry["containerID"] == f"ipamclaim-{claim['metadata']['uid']}"
        assert read_claim(custom, "vm-d")["status"]["ips"] == [f"{addr}/24"]
        ctr2 = node.lab.container()
        rc, res = node.shim("ADD", ctr2, args=cni_args(p, ctr2))
        assert rc == 0, (res, node.logs())
        assert [a.split("/")[0] for a in node.lab.addrs(ctr2, "net1")] == [addr]
        assert node.shim("DEL", ctr2, args=cni_args(p, ctr2))[0] == 0
        for other in others:
            assert node.shim("DEL", other)[0] == 0
