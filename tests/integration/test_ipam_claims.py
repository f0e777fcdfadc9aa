"""IPAMClaims (multi-network spec v1.3) against a real kube-apiserver and etcd, three node daemons each serving its
own lab netns with the real plugins, the tests playing the runtime: the VM-restart shape (a pod deleted, made again
on another node: the same address, read inside its namespace), the migration shape (two pods of one controller on
two nodes both get it, a pod of another controller is refused naming the holder, no DEL frees it), and the
refusals a real claim earns (another network's or interface's, one not there, the API server away for a claim
the node never saw)."""

from __future__ import annotations

import contextlib
import ipaddress
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from netcomp.ipam.ipamclaimapi import FINALIZER
from netcomp.kube.group import NODE
from tests.lab.addrs import BLOCKS
from tests.lab.claimlab import (
    CLAIMS,
    add,
    add_while_away,
    block_entry,
    claim_entries,
    claim_gone,
    delete,
    gone,
    ipam_claim,
    launcher,
    owned_by,
    read_claim,
)
from tests.lab.clusternodes import addresses, flushed, network, nodes, shared_network
from tests.lab.daemonlab import DaemonLab
from tests.lab.kubeapi import ApiServer
from tests.lab.labpods import NETWORKS, cni_args, explain
from tests.lab.poll import until

pytestmark = pytest.mark.root


def test_the_vm_restart_and_migration_shapes(
    api: ApiServer, admin: Any, core: Any, custom: Any, claim_crd: None, tmp_path: Path
) -> None:
    """A claim's first pod on node-a gets an address, written to the claim's status (CIDR form, the condition,
    ownerPod, netcomp's finalizer and node-a's label) and held in its block by the claim; its DEL frees nothing,
    and other ADDs on node-a never get it. The pod made again on node-b gets the same address, read inside its
    namespace; during a migration a second pod of the same controller on node-c gets it too, a pod of another
    controller is refused naming the holder, and neither DEL frees it."""
    with (
        shared_network(custom, network("vmnet", "10.120.0.0/24", blockSize=16)),
        nodes(tmp_path, api, ["node-a", "node-b", "node-c"], "vmnet") as labs,
        ipam_claim(custom, "vm-a.vmnet", "vmnet") as claim,
    ):
        a, b, c = labs
        with launcher(core, "virt-launcher-vm-a-1", "node-a", "vm-a.vmnet", "vmnet") as p1:
            ctr1, rc, res = add(a, p1)
            assert rc == 0, res
            [addr] = addresses(a, ctr1, "net1")
            got = read_claim(custom, "vm-a.vmnet")
            assert got["status"]["ips"] == [f"{addr}/24"]
            assert got["status"]["ownerPod"] == {"name": "virt-launcher-vm-a-1"}
            assert [(x["type"], x["status"]) for x in got["status"]["conditions"]] == [("IPsAllocated", "True")]
            assert FINALIZER in got["metadata"]["finalizers"] and got["metadata"]["labels"][NODE] == "node-a"
            entry = block_entry(custom, "vmnet", addr)
            assert entry is not None and entry["containerID"] == f"ipamclaim-{claim['metadata']['uid']}"
            rc, doc = explain(a, "--pod", "team-a/virt-launcher-vm-a-1")
            [why] = [n["addresses"]["from"] for n in doc["networks"] if n["network"] == "vmnet"]
            assert rc == 0 and why.startswith("IPAMClaim team-a/vm-a.vmnet: the address it holds"), doc
            [shown] = a.daemon.addresses.show(a.daemon.state.networks(), "vmnet")["networks"]
            assert [(c["address"], c["ipamClaim"]) for c in shown["claims"] if c.get("ipamClaim")] == [
                (addr, "team-a/vm-a.vmnet")
            ]
            gone(core, p1)  # as the kubelet: the pod deleted, then its DEL
            delete(a, ctr1, p1)
            # Let go of off the DEL's path (the next pod has no old owner to read), and written off the ADD's.
            until(lambda: owned_by(custom, "vm-a.vmnet", None), "ownerPod taken away", 30)
        others = []
        for _ in range(4):  # node-a's other containers never get the claim's address
            ctr = a.lab.container()
            rc, res = a.shim("ADD", ctr, args="NETCOMP_NETWORKS=vmnet", ready_timeout=30)
            assert rc == 0 and addresses(a, ctr) != [addr], res
            others.append(ctr)
        flushed(labs)
        assert block_entry(custom, "vmnet", addr) == entry  # the DEL of its pod freed nothing

        with launcher(core, "virt-launcher-vm-a-2", "node-b", "vm-a.vmnet", "vmnet") as p2:
            ctr2, rc, res = add(b, p2)  # the VM made again, on another node
            assert rc == 0, res
            assert addresses(b, ctr2, "net1") == [addr]
            until(lambda: owned_by(custom, "vm-a.vmnet", "virt-launcher-vm-a-2"), "the pod made again owns it", 30)
            with launcher(core, "virt-launcher-vm-a-3", "node-c", "vm-a.vmnet", "vmnet") as p3:
                ctr3, rc, res = add(c, p3)  # the migration's target, while the source runs
                assert rc == 0, res
                assert addresses(c, ctr3, "net1") == [addr]
                until(lambda: owned_by(custom, "vm-a.vmnet", "virt-launcher-vm-a-3"), "the target owns it", 30)
                with launcher(core, "intruder", "node-c", "vm-a.vmnet", "vmnet", controller="other") as p4:
                    ctr4, rc, res = add(c, p4)
                    assert rc != 0 and res["code"] == 7, res
                    assert (
                        "IPAMClaim team-a/vm-a.vmnet is held by running pod team-a/virt-launcher-vm-a-3" in res["msg"]
                    )
                    assert c.lab.links(ctr4) == ["lo"]
                gone(core, p2)
                delete(b, ctr2, p2)  # the source goes: the target keeps it, and stays the owner
                b.daemon.addresses.ipam_claims._owners.submit(lambda: None).result(timeout=30)  # its let-go done
                assert owned_by(custom, "vm-a.vmnet", "virt-launcher-vm-a-3")
                flushed(labs)
                assert block_entry(custom, "vmnet", addr) == entry
                assert addresses(c, ctr3, "net1") == [addr]
                delete(c, ctr3, p3)
        flushed(labs)
        assert block_entry(custom, "vmnet", addr) == entry  # the claim lives: nobody's DEL frees it
        for ctr in others:
            assert a.shim("DEL", ctr, ready_timeout=30)[0] == 0


def test_refusals_of_a_real_claim(api: ApiServer, admin: Any, core: Any, custom: Any, claim_crd: None,
                                  tmp_path: Path) -> None:  # fmt: skip
    """A claim of another network, of another interface, and one that does not exist: each refused naming it,
    nothing attached; with the API server away, a claim the node never saw is refused with 11, nothing taken."""
    with (
        shared_network(custom, network("refnet", "10.121.0.0/24", blockSize=16)),
        nodes(tmp_path, api, ["node-r"], "refnet") as labs,
        ipam_claim(custom, "other-net", "elsewhere"),
        ipam_claim(custom, "other-if", "refnet", interface="net7"),
    ):
        [dl] = labs
        for claim, why in [
            ("other-net", "IPAMClaim team-a/other-net is of network 'elsewhere', not of 'refnet'"),
            ("other-if", "IPAMClaim team-a/other-if is for interface 'net7', not 'net1'"),
            ("missing", "no IPAMClaim team-a/missing"),
        ]:
            with launcher(core, f"pod-{claim}", "node-r", claim, "refnet") as p:
                ctr, rc, res = add(dl, p)
                assert rc != 0 and res["code"] == 7 and why in res["msg"], res
                assert dl.lab.links(ctr) == ["lo"]
        with launcher(core, "pod-away", "node-r", "never-seen", "refnet") as p:
            pods = dl.daemon.cluster.pods  # type: ignore[union-attr]
            until(lambda: pods.has("team-a", "pod-away"), "the pod delivered by the node's watch", 30)
            ctr, rc, res = add_while_away(api, dl, p)
            assert rc != 0 and res["code"] == 11, res
            assert "IPAMClaim team-a/never-seen cannot be read and this node has not seen it" in res["msg"], res
            assert dl.lab.links(ctr) == ["lo"]


def test_deleting_the_claim_frees_its_address(
    api: ApiServer, admin: Any, core: Any, custom: Any, claim_crd: None, tmp_path: Path
) -> None:
    """A claim whose pod is gone: deleted, its finalizer taken off by the node that keeps its entry, the address
    freed. A claim deleted while its pod runs (on another node): the claim goes at once, the address stays the
    pod's (in its namespace, in the block) until the pod is gone, then is freed."""
    with (
        shared_network(custom, network("delnet", "10.122.0.0/24", blockSize=16)),
        nodes(tmp_path, api, ["node-d", "node-e"], "delnet") as labs,
    ):
        d, e = labs
        with ipam_claim(custom, "idle", "delnet"), launcher(core, "idle-1", "node-d", "idle", "delnet") as p:
            ctr, rc, res = add(d, p)
            assert rc == 0, res
            [idle] = addresses(d, ctr, "net1")
            delete(d, ctr, p)
            gone(core, p)
            flushed(labs)
            assert block_entry(custom, "delnet", idle) is not None
            custom.delete_namespaced_custom_object(*CLAIMS, "idle")
            until(lambda: claim_gone(custom, "idle"), "the claim gone (its finalizer taken off)", 60)
            until(lambda: flushed(labs) or block_entry(custom, "delnet", idle) is None, "the address freed", 60)

        with ipam_claim(custom, "busy", "delnet"), launcher(core, "busy-1", "node-d", "busy", "delnet") as p1:
            ctr1, rc, res = add(d, p1)  # node-d keeps the claim's entry
            assert rc == 0, res
            [busy] = addresses(d, ctr1, "net1")
            delete(d, ctr1, p1)
            gone(core, p1)
            with launcher(core, "busy-2", "node-e", "busy", "delnet") as p2:
                ctr2, rc, res = add(e, p2)  # made again on node-e: its pod runs there
                assert rc == 0 and addresses(e, ctr2, "net1") == [busy], res
                custom.delete_namespaced_custom_object(*CLAIMS, "busy")
                until(lambda: claim_gone(custom, "busy"), "the claim gone while its pod runs", 60)
                flushed(labs)
                assert block_entry(custom, "delnet", busy) is not None  # still the pod's
                assert addresses(e, ctr2, "net1") == [busy]
                delete(e, ctr2, p2)
                gone(core, p2)
            until(
                lambda: flushed(labs) or block_entry(custom, "delnet", busy) is None, "freed once its pod is gone", 60
            )


def test_killed_between_the_address_chosen_and_the_status_written(
    api: ApiServer, admin: Any, core: Any, custom: Any, claim_crd: None, tmp_path: Path
) -> None:
    """The daemon SIGKILLed once a claim's address is recorded as the claim's and before its status is written
    (crash point after-ipamclaim-recorded): the runtime's ADD, answered by the next daemon, gets that same
    address, the status says it, and the block holds one entry for the claim (nothing leaked)."""
    with killed_at_recorded(api, core, custom, tmp_path, "vm-k", "killnet", "10.123.0.0/24", "node-k") as killed:
        node, claim, p, ctr, adding, chosen = killed
        assert "ips" not in (read_claim(custom, "vm-k").get("status") or {})
        node.start(wait=False)
        rc, res = adding.result(timeout=120)
        assert rc == 0, (res, node.logs())
        assert [a.split("/")[0] for a in node.lab.addrs(ctr, "net1")] == [chosen]
        assert read_claim(custom, "vm-k")["status"]["ips"] == [f"{chosen}/24"]
        uid = claim["metadata"]["uid"]
        until(lambda: claim_entries(custom, uid) == [chosen], lambda: (claim_entries(custom, uid), node.logs()), 30)
        assert node.shim("DEL", ctr, args=cni_args(p, ctr))[0] == 0


@contextlib.contextmanager
def killed_at_recorded(
    api: ApiServer, core: Any, custom: Any, tmp_path: Path, name: str, net: str, cidr: str, node_name: str,
    **shim: Any,
) -> Iterator[tuple[Any, dict[str, Any], Any, str, Any, str]]:  # fmt: skip
    """A node's daemon SIGKILLed at after-ipamclaim-recorded by the ADD of pod `<name>-1` naming claim `name` of
    network `net`: yields the node (not running, its crash point disarmed), the claim, the pod, its container,
    the ADD under way (the shim's future) and the address the record holds for the claim."""
    import concurrent.futures
    import json

    from tests.lab.procdaemon import kube_proc_node

    extra = {"defaultNetwork": None, "ipamGrace": 3}
    env = {"NETCOMP_CRASH_AT": "after-ipamclaim-recorded"}
    with (
        shared_network(custom, network(net, cidr, blockSize=16)),
        kube_proc_node(api, tmp_path, node_name, extra=extra, env=env) as node,
        ipam_claim(custom, name, net) as claim,
        launcher(core, f"{name}-1", node_name, name, net) as p,
        concurrent.futures.ThreadPoolExecutor(1) as pool,
    ):
        ctr = node.lab.container()
        adding = pool.submit(node.shim, "ADD", ctr, args=cni_args(p, ctr), **shim)
        assert node.proc is not None and node.proc.wait(timeout=60) == -9, node.logs()
        [record] = (node.cache_dir / "ipam" / "ipamclaims").glob("*.json")  # beside it: the marks file
        kept = json.loads(record.read_text())["claim"]
        [chosen] = [e["address"] for e in kept["entries"]]
        node.env.pop("NETCOMP_CRASH_AT")
        yield node, claim, p, ctr, adding, chosen


def test_api_server_away_a_claim_seen_is_served_from_the_record(
    api: ApiServer, admin: Any, core: Any, custom: Any, claim_crd: None, tmp_path: Path
) -> None:
    """A node that has seen a claim serves the next pod naming it with the API server stopped, from what it
    recorded: the same address in the pod's namespace."""
    with (
        shared_network(custom, network("awaynet", "10.124.0.0/24", blockSize=16)),
        nodes(tmp_path, api, ["node-w"], "awaynet") as labs,
        ipam_claim(custom, "vm-w", "awaynet"),
    ):
        [dl] = labs
        pods = dl.daemon.cluster.pods  # type: ignore[union-attr]
        with launcher(core, "vm-w-1", "node-w", "vm-w", "awaynet") as p1:
            ctr1, rc, res = add(dl, p1)
            assert rc == 0, res
            [addr] = addresses(dl, ctr1, "net1")
            delete(dl, ctr1, p1)
        with launcher(core, "vm-w-2", "node-w", "vm-w", "awaynet") as p2:
            until(lambda: pods.has("team-a", "vm-w-2"), "the pod delivered by the node's watch", 30)
            ctr2, rc, res = add_while_away(api, dl, p2)
            assert rc == 0, res
            assert addresses(dl, ctr2, "net1") == [addr]
            delete(dl, ctr2, p2)


def test_a_statefulsets_pod_made_again_keeps_its_address(
    api: ApiServer, admin: Any, core: Any, custom: Any, claim_crd: None, tmp_path: Path
) -> None:
    """netcomp's own spelling (annotation netcomp.io/ipam-claims: "true"): db-0's first ADD creates IPAMClaim
    db-0.net1, owned by its StatefulSet, and gives it an address; db-0 made again on another node gets the same
    one (read in its namespace). A pod with no controller is refused: nothing would ever delete its claim."""
    from kubernetes import client

    apps = client.AppsV1Api(admin)
    sts = apps.create_namespaced_stateful_set("team-a", {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
        "spec": {"serviceName": "db", "replicas": 0, "selector": {"matchLabels": {"app": "db"}},
                 "template": {"metadata": {"labels": {"app": "db"}},
                              "spec": {"containers": [{"name": "c", "image": "registry.invalid/none"}]}}},
    })  # fmt: skip
    owner = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": sts.metadata.uid, "controller": True}

    @contextlib.contextmanager
    def db0(node: str, owners: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        notes = {NETWORKS: '[{"name": "stsnet", "interface": "net1"}]', "netcomp.io/ipam-claims": "true"}
        meta = {"name": "db-0", "labels": {"app": "db"}, "annotations": notes, "ownerReferences": owners}
        spec = {"nodeName": node, "containers": [{"name": "c", "image": "registry.invalid/none"}]}
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
        made = core.create_namespaced_pod("team-a", body)
        p = {"ns": "team-a", "name": "db-0", "uid": made.metadata.uid}
        try:
            yield p
        finally:
            gone(core, p)

    try:
        with (
            shared_network(custom, network("stsnet", "10.125.0.0/24", blockSize=16)),
            nodes(tmp_path, api, ["node-s", "node-t"], "stsnet") as (s, t),
        ):
            with db0("node-s", []) as p:
                ctr, rc, res = add(s, p)
                assert (
                    rc != 0 and res["code"] == 7 and "pod team-a/db-0 has no controller to own IPAMClaim" in res["msg"]
                ), res
                assert s.lab.links(ctr) == ["lo"]
            with db0("node-s", [owner]) as p:
                ctr, rc, res = add(s, p)
                assert rc == 0, res
                [addr] = addresses(s, ctr, "net1")
                made = read_claim(custom, "db-0.net1")
                assert made["spec"] == {"network": "stsnet", "interface": "net1"}
                assert [(r["kind"], r["name"], r["uid"]) for r in made["metadata"]["ownerReferences"]] == [
                    ("StatefulSet", "db", sts.metadata.uid)
                ]
                assert made["status"]["ips"] == [f"{addr}/24"]
                delete(s, ctr, p)
            with db0("node-t", [owner]) as p:
                ctr, rc, res = add(t, p)
                assert rc == 0, res
                assert addresses(t, ctr, "net1") == [addr]
                delete(t, ctr, p)
    finally:
        with contextlib.suppress(Exception):
            custom.patch_namespaced_custom_object(*CLAIMS, "db-0.net1", {"metadata": {"finalizers": []}})
            custom.delete_namespaced_custom_object(*CLAIMS, "db-0.net1")
        apps.delete_namespaced_stateful_set("db", "team-a")


def test_api_server_away_before_the_status_the_node_finishes_it(
    api: ApiServer, admin: Any, core: Any, custom: Any, claim_crd: None, tmp_path: Path
) -> None:
    """The API server goes away after a claim's finalizer and its block entry are written and before its status
    is: the ADD answers 11; once the API server is back, the node writes the status itself (no ADD of the claim
    again), the block holds the claim's address once, and the pod made on another node gets it in its
    namespace."""
    with (
        shared_network(custom, network("finnet", "10.126.0.0/24", blockSize=16)),
        nodes(tmp_path, api, ["node-f", "node-g"], "finnet") as (f, g),
        ipam_claim(custom, "vm-f", "finnet") as claim,
    ):
        claims = f.daemon.addresses.ipam_claims
        assert claims is not None
        write_status = claims.api.write_status

        def away_first(*args: Any, **kwargs: Any) -> Any:
            claims.api.write_status = write_status  # type: ignore[method-assign]
            api.stop_apiserver()
            return write_status(*args, **kwargs)

        claims.api.write_status = away_first  # type: ignore[method-assign]
        with launcher(core, "vm-f-1", "node-f", "vm-f", "finnet") as p1:
            pods = f.daemon.cluster.pods  # type: ignore[union-attr]
            until(lambda: pods.has("team-a", "vm-f-1"), "the pod delivered by the node's watch", 30)
            try:
                ctr1, rc, res = add(f, p1)
            finally:
                api.start_apiserver()
            assert rc != 0 and res["code"] == 11 and "its status cannot be written" in res["msg"], res
            assert f.lab.links(ctr1) == ["lo"]
        [kept] = [k for k in claims.kept.values() if k.ref == "team-a/vm-f"]
        [chosen] = [e.address for e in kept.entries]
        until(lambda: (read_claim(custom, "vm-f").get("status") or {}).get("ips") == [f"{chosen}/24"],
              "the status written by the node on its own", 90)  # fmt: skip
        assert read_claim(custom, "vm-f")["status"]["ownerPod"] == {"name": "vm-f-1"}
        flushed([f, g])
        assert claim_entries(custom, claim["metadata"]["uid"]) == [chosen]
        with launcher(core, "vm-f-2", "node-g", "vm-f", "finnet") as p2:
            ctr2, rc, res = add(g, p2)
            assert rc == 0, res
            assert addresses(g, ctr2, "net1") == [chosen]
            delete(g, ctr2, p2)


def test_killed_before_the_status_the_node_finishes_it_at_start(
    api: ApiServer, admin: Any, core: Any, custom: Any, claim_crd: None, tmp_path: Path
) -> None:
    """The daemon SIGKILLed at after-ipamclaim-recorded and the runtime's ADD given up (not tried again): the
    daemon started again writes the claim's status from its record on its own, the block holds the address
    once, and the next ADD naming the claim gets it in the pod's namespace."""
    cidr = "10.127.0.0/24"
    with killed_at_recorded(api, core, custom, tmp_path, "vm-j", "kill2net", cidr, "node-j", ready_timeout=1) as killed:
        node, claim, p, _ctr, adding, chosen = killed
        rc, res = adding.result(timeout=120)  # the daemon stays dead: the shim gives up
        assert rc != 0 and res["code"] == 11, res
        node.start()
        until(lambda: (read_claim(custom, "vm-j").get("status") or {}).get("ips") == [f"{chosen}/24"],
              lambda: node.logs(), 90)  # fmt: skip
        until(lambda: claim_entries(custom, claim["metadata"]["uid"]) == [chosen], lambda: node.logs(), 30)
        ctr2 = node.lab.container()
        rc, res = node.shim("ADD", ctr2, args=cni_args(p, ctr2))
        assert rc == 0, (res, node.logs())
        assert [a.split("/")[0] for a in node.lab.addrs(ctr2, "net1")] == [chosen]
        assert node.shim("DEL", ctr2, args=cni_args(p, ctr2))[0] == 0


def test_a_claim_outlives_its_gone_node(
    api: ApiServer, admin: Any, core: Any, custom: Any, claim_crd: None, tmp_path: Path
) -> None:
    """A claim's address is in the block of a node that goes for good (its daemon stopped, its Node deleted): the
    cluster's GC frees neither the claim's entry nor the block while the claim exists, the pod made again on a
    live node gets the address in its namespace, and once the claim is gone the GC frees the address."""
    for n in ("node-x", "node-y"):
        core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": n}})
    try:
        with (
            shared_network(custom, network("gonenet", "10.128.0.0/24", blockSize=16)),
            nodes(tmp_path, api, ["node-x", "node-y"], "gonenet", ipamGrace=0.1) as (x, y),
            ipam_claim(custom, "vm-x", "gonenet"),
        ):
            with launcher(core, "vm-x-1", "node-x", "vm-x", "gonenet") as p1:
                ctr1, rc, res = add(x, p1)
                assert rc == 0, res
                [addr] = addresses(x, ctr1, "net1")
                delete(x, ctr1, p1)
                gone(core, p1)
            entry = block_entry(custom, "gonenet", addr)
            assert entry is not None
            x.daemon.stop(drain=5)
            core.delete_node("node-x")
            report = y.daemon.addresses.gc_cluster()
            assert "error" not in report and report["freed"] == [] and report["freedBlocks"] == [], report
            assert block_entry(custom, "gonenet", addr) == entry
            with launcher(core, "vm-x-2", "node-y", "vm-x", "gonenet") as p2:
                ctr2, rc, res = add(y, p2)
                assert rc == 0, res
                assert addresses(y, ctr2, "net1") == [addr]
                delete(y, ctr2, p2)
            custom.patch_namespaced_custom_object(*CLAIMS, "vm-x", {"metadata": {"finalizers": []}})
            custom.delete_namespaced_custom_object(*CLAIMS, "vm-x")
            until(lambda: claim_gone(custom, "vm-x"), "the claim gone", 30)
            report = y.daemon.addresses.gc_cluster()
            assert [f["address"] for f in report["freed"]] == [addr], report
            assert block_entry(custom, "gonenet", addr) is None
    finally:
        for n in ("node-x", "node-y"):
            with contextlib.suppress(Exception):
                core.delete_node(n)


def test_a_claims_borrowed_address_stays_the_claims(
    api: ApiServer, admin: Any, core: Any, custom: Any, claim_crd: None, tmp_path: Path
) -> None:
    """A /27 (29 addresses, blocks of 4) on two nodes: node-b holds one block, node-a fills every other block with
    plain pods, so the claim's first address, asked on node-a, is borrowed from node-b's block. The address stays
    the claim's through its pod's DEL (neither node gives it back), a pod made again on node-b gets it in its
    namespace, and once the claim is deleted and no pod uses it, it is freed once."""
    subnet = ipaddress.ip_network("10.130.0.0/27")
    with (
        shared_network(custom, network("lendnet", str(subnet))),
        nodes(tmp_path, api, ["node-a", "node-b"], "lendnet") as labs,
        ipam_claim(custom, "vm-l", "lendnet") as claim,
    ):
        a, b = labs
        plain: list[tuple[DaemonLab, str]] = []

        def add_plain(dl: DaemonLab) -> None:
            ctr = dl.lab.container()
            rc, res = dl.shim("ADD", ctr, args="NETCOMP_NETWORKS=lendnet", ready_timeout=30)
            assert rc == 0, res
            plain.append((dl, ctr))

        try:
            add_plain(b)
            flushed(labs)
            items = custom.list_cluster_custom_object(*BLOCKS)["items"]
            [held] = [ipaddress.ip_network(x["spec"]["cidr"]) for x in items if x["spec"]["network"] == "lendnet"]
            unusable = {subnet.network_address, subnet.network_address + 1, subnet.broadcast_address}
            for _ in range(29 - sum(1 for x in held if x not in unusable)):  # every address of node-a's own blocks
                add_plain(a)
            flushed(labs)
            assert not [
                x for blk in custom.list_cluster_custom_object(*BLOCKS)["items"] for x in blk["spec"].get("lent") or {}
            ]
            uid = claim["metadata"]["uid"]
            with launcher(core, "vm-l-1", "node-a", "vm-l", "lendnet") as p1:
                ctr1, rc, res = add(a, p1)
                assert rc == 0, res
                [addr] = addresses(a, ctr1, "net1")
                assert ipaddress.ip_address(addr) in held, (addr, held)  # borrowed from node-b's block
                flushed(labs)
                assert claim_entries(custom, uid) == [addr]
                delete(a, ctr1, p1)
                gone(core, p1)
            flushed(labs)
            assert claim_entries(custom, uid) == [addr], "the claim's address given back with its pod"
            with launcher(core, "vm-l-2", "node-b", "vm-l", "lendnet") as p2:
                ctr2, rc, res = add(b, p2)
                assert rc == 0, res
                assert addresses(b, ctr2, "net1") == [addr]
                delete(b, ctr2, p2)
                gone(core, p2)
            flushed(labs)
            assert claim_entries(custom, uid) == [addr]
            custom.delete_namespaced_custom_object(*CLAIMS, "vm-l")
            until(lambda: claim_gone(custom, "vm-l"), "the claim gone", 60)

            def freed() -> bool:
                flushed(labs)
                return claim_entries(custom, uid) == [] and block_entry(custom, "lendnet", addr) is None

            until(freed, lambda: (claim_entries(custom, uid), block_entry(custom, "lendnet", addr)), 60)
        finally:
            for dl, ctr in plain:
                dl.shim("DEL", ctr, ready_timeout=30)
