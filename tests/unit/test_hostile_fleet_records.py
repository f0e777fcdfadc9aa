"""What a hostile review of the fleet's readers found: a node's name in an AddressBlock or AddressClaim that no
Node can have, a claim object whose metadata is not a mapping (which stopped the claims' list and watch), and a
node's own record of its blocks (ipam/blockstate.py LocalRecord) that a bad file made raise at start or made
hold offsets outside its blocks. Each is skipped and said, and the rest is taken."""

from __future__ import annotations

import ipaddress
import json
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from netcomp.ipam import blockobjects, claimobjects
from netcomp.ipam.blocks import block_name
from netcomp.ipam.blockstate import RECORD_KIND, Held, LocalRecord
from netcomp.ipam.claimobjects import KubeStore
from netcomp.ipam.pool import claim_name
from netcomp.kube.following import Backoff
from tests.lab.hostile import Ignored, nested

NET = ipaddress.ip_network("10.0.0.16/28")
BAD_NODES = ["", "Node-B", "node-b\nERROR forged line", "../node-b", "node_b", "a" * 254, ["node-b"], None]


def block(node: Any) -> dict[str, Any]:
    spec = {"network": "n", "cidr": str(NET), "node": node, "used": {}}
    return {"kind": "AddressBlock", "metadata": {"name": block_name("n", NET), "resourceVersion": "1"}, "spec": spec}


def claim(node: Any, address: str = "10.0.0.5", **meta: Any) -> dict[str, Any]:
    name = claim_name("n", ipaddress.ip_address(address))
    spec = {"network": "n", "address": address, "node": node}
    return {"kind": "AddressClaim", "metadata": {"name": name, "uid": "u", **meta}, "spec": spec}


def test_a_block_or_claim_naming_no_nodes_name_is_ignored(ignored: Ignored) -> None:
    """A node's name is a DNS subdomain (a Node's name): anything else, a newline that forges a log line
    included, is no node's, and its object is ignored and said."""
    assert blockobjects.from_object(block("node-b")) is not None and claimobjects.from_object(claim("node-b"))
    for node in BAD_NODES:
        assert blockobjects.from_object(block(node)) is None
        assert claimobjects.from_object(claim(node)) is None
    assert ignored.by == {"AddressBlock": 1, "AddressClaim": 1}  # one object of one version each: said once


class _Handle:
    def __init__(self, custom: Any) -> None:
        self.custom, self.timeout, self.reporting = custom, 5.0, list[Any]()

    def backoff(self) -> Backoff:
        return Backoff(wait=lambda stop, seconds: stop.set())  # a failure ends the follower here


class _Objects:
    """Every list answered with `items`, then one watch of `events`, after which the follower is stopped."""

    def __init__(self, items: list[Any], events: list[Any], stop: threading.Event) -> None:
        self.items, self.events, self.stop = items, events, stop

    def list_cluster_custom_object(self, *args: Any, watch: bool = False, **kw: Any) -> Any:
        if not watch:
            return {"items": self.items, "metadata": {"resourceVersion": "1"}}

        def events() -> Iterator[dict[str, Any]]:
            yield from ({"type": "ADDED", "object": obj} for obj in self.events)
            self.stop.set()

        return events()


def test_claims_whose_metadata_is_no_mapping_stop_no_list_and_no_watch(ignored: Ignored) -> None:
    """An object whose metadata is a list made the claims' list (its look for unlabelled objects) and watch raise
    AttributeError, every time: the claims were never followed."""
    stop = threading.Event()
    bad = [{"kind": "AddressClaim", "metadata": ["x"]}, {"kind": "AddressClaim", "metadata": "x", "spec": {}}]
    good, later = claim("node-b"), claim("node-c", "10.0.0.6")
    store = KubeStore(_Handle(_Objects([*bad, good], [*bad, later], stop)))  # type: ignore[arg-type]
    store._on_foreign = (["n"], lambda name, what: None)
    changes: list[str] = []
    store._follow("netcomp.io/network in (n)", lambda name, c: changes.append(name), stop, lambda: True)
    assert changes == [good["metadata"]["name"], later["metadata"]["name"]] and store.last_error is None


def _record(tmp_path: Path, blocks: Any, **doc: Any) -> LocalRecord:
    record = LocalRecord(tmp_path / "blocks.json", "node-a")
    body = {"kind": RECORD_KIND, "node": "node-a", "blocks": blocks, **doc}
    record.path.write_text(json.dumps(body) if not isinstance(blocks, str) else blocks)
    return record


def good_block(**fields: Any) -> dict[str, Any]:
    return {"network": "n", "familySet": 0, "cidr": "10.0.0.0/28", "uid": "u", "lent": {}, "lending": {},
            "taken": [], **fields}  # fmt: skip


@pytest.mark.parametrize(
    "bad",
    [
        {"lent": {"-1": {"node": "node-b"}}},
        {"lent": {"16": {"node": "node-b"}}},
        {"lent": {"3": "node-b"}},
        {"lending": {"99999999999": "7"}},
        {"taken": [-5]},
        {"taken": [1 << 40]},
        {"familySet": -1},
        {"familySet": "0"},
        {"cidr": "10.0.0.0/8"},
        {"lent": ["3"]},
    ],
)
def test_a_block_of_this_nodes_record_with_offsets_outside_it_is_left_out(
    tmp_path: Path, bad: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """An offset outside its block made Held.busy() raise (a negative shift) or build an integer as wide as the
    offset; the block is left out and said, and the others are loaded."""
    record = _record(tmp_path, {"n.v4-10-0-0-0-28": good_block(**bad), "ok": good_block(taken=[2])})
    with caplog.at_level(logging.WARNING, "netcomp.ipam"):
        held = record.load()
    assert [h.name for h in held] == ["ok"] and held[0].busy() == 1 << 2
    assert "block n.v4-10-0-0-0-28 left out" in caplog.text


@pytest.mark.parametrize("text", ["[1, 2]", json.dumps({"kind": RECORD_KIND, "node": "node-a", "blocks": [1]}),
                                  json.dumps({"kind": RECORD_KIND, "node": "node-a", "blocks": "x"}),
                                  "[" * 5000 + "]" * 5000, json.dumps(nested(100))])  # fmt: skip
def test_a_record_of_a_wrong_shape_loads_nothing_and_raises_nothing(tmp_path: Path, text: str) -> None:
    """A list, blocks that are no mapping, nesting deeper than any stack: the daemon raised at start
    (AttributeError, RecursionError); nothing is loaded now, and the blocks are found again on the API server."""
    record = _record(tmp_path, text)
    assert record.load() == []


def test_a_record_encoded_loads_back(tmp_path: Path) -> None:
    record = LocalRecord(tmp_path / "blocks.json", "node-a")
    h = Held("n.v4-10-0-0-0-28", "n", 1, ipaddress.ip_network("10.0.0.0/28"), uid="u")
    h.lent, h.lending, h.taken = {3: {"node": "node-b"}}, {4: ["7", False]}, {15}
    record.write(record.encode([h]))
    (back,) = record.load()
    assert (back.family_set, back.lent, back.lending, back.taken) == (1, h.lent, h.lending, h.taken)


def test_a_blocks_requests_ask_for_no_more_addresses_than_it_has_and_name_a_node() -> None:
    """Any node may write requests into another's block, and the holder reads them at every event: 32 requests
    of the block's every address each (16 x 32 entries to parse) are taken only up to the block's size in all, and
    a request or loan naming no Node's name is left out and said."""
    from netcomp.ipam import blockcheck

    every = [str(a) for a in NET]
    got = {f"ask-{i}": {"node": f"node-{i}", "addresses": every} for i in range(32)}
    problems: list[str] = []
    taken = blockcheck.requests(NET, got, problems)
    assert sum(len(d["addresses"]) for d in taken.values()) <= NET.num_addresses
    assert list(taken) == ["ask-0"] and "31 requests" in problems[0]
    for node in BAD_NODES:
        problems = []
        assert blockcheck.requests(NET, {"a": {"node": node}}, problems) == {} and problems
        lent = {str(NET[1]): {"containerID": "c", "node": node}}
        assert blockcheck.entries(NET, lent, "lent", problems) == {}
    assert blockcheck.requests(NET, {"a": {"node": "node-b"}}, []) == {"a": {"node": "node-b"}}
