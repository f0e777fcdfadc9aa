"""AddressBlock objects written by a hostile node, against a real kube-apiserver and two daemons (node-1, node-2)
serving one network with the real plugins: the hostile writes are made with a node's credentials
(tests/lab/kubeapi.py's node token), as any node of the cluster may make them. A lent entry outside its block, an
object under a forged name with a live block's CIDR, a block of another size over a live one, entries outside a
block (IPv6 in an IPv4 block) and a block far larger than any: none makes a node give an address twice, stops a
watch, or goes unreported. The decoders' own cases: tests/unit/test_hostile_blocks.py."""

from __future__ import annotations

import ipaddress
import logging
from typing import Any

import pytest

from netcomp.ipam.blocks import block_name
from netcomp.ipam.claimobjects import labels_of
from tests.lab.addrs import BLOCKS
from tests.lab.clusternodes import addresses, flushed, network, nodes, shared_network
from tests.lab.daemonlab import DaemonLab
from tests.lab.kubeapi import ApiServer
from tests.lab.poll import until

pytestmark = pytest.mark.root


@pytest.fixture(scope="module")
def hostile(api: ApiServer) -> Any:
    """The API as any node may use it: the node token of the packaged ClusterRole."""
    from kubernetes import client, config

    return client.CustomObjectsApi(config.new_client_from_config(config_file=str(api.node_kubeconfig)))


def block_obj(
    net: str, cidr: str, node: str, name: str | None = None, label: str | None = None, **spec: Any
) -> dict[str, Any]:
    """An AddressBlock object naming `node`, labelled as `label`'s (default: node's; a node follows the blocks
    labelled with its name)."""
    name = name or block_name(net, ipaddress.ip_network(cidr))
    return {"apiVersion": "netcomp.io/v1", "kind": "AddressBlock",
            "metadata": {"name": name, "labels": labels_of(net, label or node)},
            "spec": {"network": net, "cidr": cidr, "node": node, **spec}}  # fmt: skip


def held_block(dl: DaemonLab, net: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    assert dl.daemon.addresses.blocks is not None
    [h] = [h for h in dl.daemon.addresses.blocks.held.values() if h.network == net]
    return h.net


def viewed(labs: list[DaemonLab], name: str, rv: str | None = None) -> bool:
    """Every node's view has that block (at that version): each node follows the blocks labelled with its name."""
    views = [dl.daemon.addresses.blocks.view.get(name) for dl in labs if dl.daemon.addresses.blocks is not None]
    return all(s is not None and (rv is None or s.rv == rv) for s in views)


def add(dl: DaemonLab, net: str) -> tuple[str, list[str]]:
    ctr = dl.lab.container()
    rc, res = dl.shim("ADD", ctr, args=f"NETCOMP_NETWORKS={net}", ready_timeout=30)
    assert rc == 0, res
    return ctr, addresses(dl, ctr)


def test_forged_and_overlapping_blocks_make_no_address_twice(
    api: ApiServer, custom: Any, hostile: Any, tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """node-2 holds a block with a container in it. A hostile node writes on node-2's block a lent entry for an
    address node-1 gave already, makes an object under a new name with node-2's block's CIDR naming node-1, and a
    correctly named block of four times the size over it naming node-1: node-1 adopts neither, borrows nothing,
    and says so, naming the objects; then 20 ADDs on node-1 (more than its first block holds) give no address of
    node-2's block and no address twice."""
    caplog.set_level(logging.WARNING, logger="netcomp.foreign")
    with shared_network(custom, network("hostile", "10.120.0.0/24", blockSize=16)), nodes(
        tmp_path, api, ["node-1", "node-2"], "hostile"
    ) as labs:  # fmt: skip
        n1, n2 = labs
        _, [a2] = add(n2, "hostile")
        _, [a1] = add(n1, "hostile")
        flushed(labs)
        b2 = held_block(n2, "hostile")
        lent = {a1: {"node": "node-1", "request": "node-1.00000000"}}
        hostile.patch_cluster_custom_object(*BLOCKS, block_name("hostile", b2), {"spec": {"lent": lent}})
        hostile.create_cluster_custom_object(*BLOCKS, block_obj("hostile", str(b2), "node-1", name="hostile.forged"))
        wide = ipaddress.ip_network(f"{b2.network_address}/26", strict=False)
        hostile.create_cluster_custom_object(*BLOCKS, block_obj("hostile", str(wide), "node-1"))
        b1 = held_block(n1, "hostile")
        free = next(n for n in ipaddress.ip_network("10.120.0.0/24").subnets(new_prefix=28) if not
                    (n.overlaps(b1) or n.overlaps(wide)))  # fmt: skip
        # A valid block of nobody, labelled node-1's: node-1's watch's sync point (node-2's is its own block's
        # version with the lent entry: each node follows only the blocks labelled with its name).
        mark = block_obj("hostile", str(free), "node-x", label="node-1")
        hostile.create_cluster_custom_object(*BLOCKS, mark)
        rv2 = hostile.get_cluster_custom_object(*BLOCKS, block_name("hostile", b2))["metadata"]["resourceVersion"]
        until(lambda: viewed([n1], mark["metadata"]["name"]) and viewed([n2], block_name("hostile", b2), rv2),
              lambda: caplog.text)  # fmt: skip
        blocks1 = n1.daemon.addresses.blocks
        assert blocks1 is not None
        assert set(blocks1.held) == {block_name("hostile", b1)}, blocks1.held
        assert not [b for b in blocks1.borrowed.values() if str(b.address) == a1]
        for what in ("hostile.forged", f"lent entries '{a1}'", block_name("hostile", wide)):
            assert what in caplog.text, caplog.text
        live = {a1: "node-1", a2: "node-2"}
        for _ in range(20):
            _, [a] = add(n1, "hostile")
            assert a not in live, f"{a} given twice"
            assert ipaddress.ip_address(a) not in b2, f"{a} of node-2's block given by node-1"
            live[a] = "node-1"


def test_a_poisoned_block_stops_no_watch_and_no_lending(
    api: ApiServer, custom: Any, hostile: Any, tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A /29 in blocks of 4, one block each: a hostile node puts an IPv6 address and an address outside the
    block into node-2's `used`. Both nodes' watches go on (node-2's sees that version, and no error), and node-1,
    whose block is full, reads node-2's block and borrows from it: node-2 still answers requests."""
    caplog.set_level(logging.WARNING, logger="netcomp.foreign")
    with shared_network(custom, network("poison", "10.121.0.0/29", blockSize=4)), nodes(
        tmp_path, api, ["node-1", "node-2"], "poison"
    ) as labs:  # fmt: skip
        n1, n2 = labs
        _, [a2] = add(n2, "poison")
        given = [add(n1, "poison")[1][0] for _ in range(3)]  # node-1's block: full
        flushed(labs)
        b2 = held_block(n2, "poison")
        name = block_name("poison", b2)
        bad = {"fd00::1": {"containerID": "x"}, "10.121.0.200": {"containerID": "y"}}
        got = hostile.patch_cluster_custom_object(*BLOCKS, name, {"spec": {"used": bad}})
        rv = got["metadata"]["resourceVersion"]
        until(lambda: viewed([n2], name, rv), lambda: caplog.text)
        for dl in labs:
            assert dl.daemon.addresses.blocks is not None and dl.daemon.addresses.blocks.last_error is None
        assert name in caplog.text and "'fd00::1'" in caplog.text
        _, [borrowed] = add(n1, "poison")
        assert ipaddress.ip_address(borrowed) in b2 and borrowed not in [a2, *given]


def test_a_block_larger_than_any_is_ignored(
    api: ApiServer, custom: Any, hostile: Any, tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """An IPv6 /100 block, correctly named, of a network whose blocks hold 16: no node takes it into its view
    (explain, ipam show and GC would otherwise walk its 2^28 addresses under the allocator's lock); ADDs, explain's
    list of the addresses in use and ipam show go on."""
    caplog.set_level(logging.WARNING, logger="netcomp.foreign")
    with shared_network(custom, network("huge", "fd00:121::/64", blockSize=16)), nodes(
        tmp_path, api, ["node-1", "node-2"], "huge"
    ) as labs:  # fmt: skip
        n1, n2 = labs
        big = block_obj("huge", "fd00:121::/100", "node-2", used={"fd00:121::5": {"containerID": "x"}})
        hostile.create_cluster_custom_object(*BLOCKS, big)
        mark = block_obj("huge", "fd00:121::ff00/124", "node-x", label="node-2")  # node-2's watch's sync point
        hostile.create_cluster_custom_object(*BLOCKS, mark)
        until(lambda: viewed([n2], mark["metadata"]["name"]), lambda: caplog.text)
        assert not any(big["metadata"]["name"] in (dl.daemon.addresses.blocks.view or {}) for dl in labs)  # type: ignore[union-attr]
        assert big["metadata"]["name"] in caplog.text
        _, [a] = add(n1, "huge")
        assert a in [c.address for c in n1.daemon.addresses.allocator.claims("huge")]
        shown = n1.daemon.addresses.show(n1.daemon.state.networks())
        [doc] = [d for d in shown["networks"] if d["network"] == "huge"]
        assert "fd00:121::/100" not in [b["block"] for b in doc["blocks"]]
