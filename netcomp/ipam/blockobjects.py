"""Address blocks on the Kubernetes API: one `AddressBlock` object (addressblocks.netcomp.io, cluster-scoped) per
block a node holds, named blocks.block_name(network, block) and labelled with its network and its node, so that a
node lists and watches only its own blocks of the networks it serves; other nodes' blocks it reads when it needs
them (their names to claim a block, their records to borrow). No write can undo another's: the holder patches only
the `used` entries that changed, a borrower changes a lent entry only while it is lent to it (a JSON patch `test`),
a grant and a delete apply to one version of the record only. This module is loaded only with a cluster
configured."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

from netcomp import foreign, libc
from netcomp.ipam import blockcheck
from netcomp.ipam.blockalloc import BlockAllocator
from netcomp.ipam.blockstate import BlockRecord
from netcomp.ipam.claimobjects import ApiObjects, labels_of, network_selector
from netcomp.ipam.pool import network_label
from netcomp.ipam.store import Conflict, Gone, StoreUnavailable, Taken
from netcomp.kube.apiclient import Handle
from netcomp.kube.apierrors import ApiException
from netcomp.kube.following import Selection, keep_following
from netcomp.kube.group import GROUP, NODE, VERSION, created, node_label
from netcomp.names import is_dns_subdomain

log = logging.getLogger("netcomp.ipam")
PLURAL, KIND = "addressblocks", "AddressBlock"
# The creating node's secret, also in its record of the blocks it holds (written ahead of the create): a block
# naming a node is that node's only when it carries the token that node wrote ahead.
TOKEN = "netcomp.io/claim-token"
# Blocks per page of a list: a block's record holds up to blockSize entries, and each page, read and parsed whole,
# leaves the heap larger by a multiple of its size (docs/benchmarks.md, "A node's cost with a fleet"). Lists
# are asked of the API server's watch cache (resourceVersion 0), which answers in one page; these bound the pages
# of a server that reads them from etcd instead (its watch cache off).
PAGE = 10
NAMES_PAGE = 500  # names of a network's blocks, as Table rows without their objects: a few dozen bytes each
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
# Blocks are parsed by the stdlib's json: orjson keeps the last 2,048 keys it saw in a cache of its own, and a
# block's keys are its addresses.


def to_object(rec: BlockRecord) -> dict[str, Any]:
    labels = labels_of(rec.network, rec.node)
    spec = {"network": rec.network, "cidr": rec.cidr, "node": rec.node, "nodeInCluster": rec.node_in_cluster,
            "used": rec.used, "lent": rec.lent, "requests": rec.requests}  # fmt: skip
    meta: dict[str, Any] = {"name": rec.name, "labels": labels}
    if rec.token:
        meta["annotations"] = {TOKEN: rec.token}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": meta, "spec": spec}


def from_object(obj: Any) -> BlockRecord | None:
    """The record an object is, with only the entries that are about its own addresses; None when it is not an
    AddressBlock netcomp wrote or its name, network and CIDR disagree (ipam/blockcheck.py). What is left out is
    reported (foreign.ignore); nothing here raises."""
    if not isinstance(obj, dict) or obj.get("kind") not in (KIND, None):
        return None
    meta, spec = obj.get("metadata"), obj.get("spec")
    meta = meta if isinstance(meta, dict) else {}
    name = _text(meta.get("name"))
    if not isinstance(spec, dict):
        foreign.ignore(KIND, name, "it has no spec", obj)
        return None
    net, why = blockcheck.identity(name, spec.get("network"), spec.get("cidr"))
    node = spec.get("node")
    if not is_dns_subdomain(node):
        node, why = "", why or "its node is not a node's name"
    if net is None or why:
        foreign.ignore(KIND, name, why, obj)
        return None
    problems: list[str] = []
    used = blockcheck.entries(net, spec.get("used"), "used", problems)
    lent = blockcheck.entries(net, spec.get("lent"), "lent", problems)
    asks = blockcheck.requests(net, spec.get("requests"), problems)
    if problems:
        foreign.ignore(KIND, name, "; ".join(problems) + " (the rest of the block is taken)", obj)
    return BlockRecord(
        name, spec["network"], spec["cidr"], node, spec.get("nodeInCluster") is True, used, lent, asks,
        _text(meta.get("uid")), _text(meta.get("resourceVersion")), created(meta),
        tuple(w for w in foreign.writers(obj).split(", ") if w != "unknown"), _token(meta),
    )  # fmt: skip


def table_strings(data: bytes, key: bytes) -> Iterator[str]:
    """The string after each `key` in a Table's JSON (`"cells":["`: each row's first cell, its object's name;
    `"continue":"`: the next page's token), by a linear scan that builds nothing but those strings: a page of
    thousands of rows parsed whole leaves the heap larger. JSON spells a quote inside a string escaped, so `key`,
    whose quotes are bare, is found only where the API server wrote it, never inside a value another writer
    chose; names and tokens need no escapes, and anything longer than a name is left out."""
    at = data.find(key)
    while at >= 0:
        start = at + len(key)
        end = data.find(b'"', start, start + 4096)
        if end < 0:
            return
        if end - start <= 253 or key != b'"cells":["':
            yield data[start:end].decode("ascii", "replace")
        at = data.find(key, end)


def _token(meta: dict[str, Any]) -> str:
    notes = meta.get("annotations")
    return _text(notes.get(TOKEN)) if isinstance(notes, dict) else ""


def _text(value: object) -> str:
    """A metadata string (a name is at most 253 characters), or "" for anything else: never the text of a
    nested structure, which may be deep."""
    return value[:253] if isinstance(value, str) else ""


def _pointer(*parts: str) -> str:
    """A JSON pointer (RFC 6901) to spec's member: '~' and '/' escaped."""
    return "/spec/" + "/".join(p.replace("~", "~0").replace("/", "~1") for p in parts)


class KubeBlocks(ApiObjects):
    def __init__(self, api: Handle) -> None:
        super().__init__(api, PLURAL, "address blocks")
        self.metrics = api.metrics
        self.selection = Selection("ipam-blocks", self._follow)
        self.alloc: BlockAllocator | None = None
        self.events = 0  # watch events taken in (for status and the fleet benchmark)

    def _record(self, obj: Any) -> BlockRecord:
        rec = from_object(obj)
        if rec is None:
            raise StoreUnavailable("the API server answered with something that is not a block")
        return rec

    # ------------------------------------------------------------------------------------------------ BlockStore

    def create(self, rec: BlockRecord) -> BlockRecord:
        try:
            return self._record(self._call("create_cluster_custom_object", to_object(rec), conflict=(409,)))
        except Conflict:
            pass
        held = self.get(rec.name)
        if held is None or held.network != rec.network:
            what = f"object {PLURAL}/{rec.name}" + (f" of network {held.network!r}" if held else "")
            raise Taken(None, what) from None
        raise Taken(held) from None

    def get(self, name: str) -> BlockRecord | None:
        try:
            return self._record(self._call("get_cluster_custom_object", name, gone=(404,)))
        except Gone:
            return None

    def write_used(
        self, name: str, uid: str, changes: dict[str, dict[str, Any] | None], node_in_cluster: bool | None = None
    ) -> BlockRecord:
        spec: dict[str, Any] = {"used": changes}
        if node_in_cluster is not None:
            spec["nodeInCluster"] = node_in_cluster
        body = {"metadata": {"uid": uid}, "spec": spec}
        return self._record(self._call("patch_cluster_custom_object", name, body, gone=(404, 409)))

    def grant(self, name: str, rv: str, lent: dict[str, dict[str, Any]], answered: list[str]) -> BlockRecord:
        ops: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/resourceVersion", "value": rv}]
        ops += [{"op": "add", "path": _pointer("lent", addr), "value": entry} for addr, entry in lent.items()]
        ops += [{"op": "remove", "path": _pointer("requests", key)} for key in answered]
        return self._record(self._call("patch_cluster_custom_object", name, ops, gone=(404,), conflict=(409, 422)))

    def ask(self, name: str, uid: str, key: str, request: dict[str, Any] | None) -> None:
        body = {"metadata": {"uid": uid}, "spec": {"requests": {key: request}}}
        self._call("patch_cluster_custom_object", name, body, gone=(404, 409))

    def update_lent(self, name: str, address: str, node: str, entry: dict[str, Any] | None) -> bool:
        ops: list[dict[str, Any]] = [{"op": "test", "path": _pointer("lent", address, "node"), "value": node}]
        path = _pointer("lent", address)
        ops.append(
            {"op": "replace", "path": path, "value": entry} if entry is not None else {"op": "remove", "path": path}
        )
        try:
            self._call("patch_cluster_custom_object", name, ops, gone=(404,), conflict=(409, 422))
        except Conflict:
            return False
        return True

    def delete(self, name: str, uid: str, rv: str) -> bool:
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid, "resourceVersion": rv}}
        try:
            self._call("delete_cluster_custom_object", name, body=body, gone=(404,), conflict=(409,))
        except (Gone, Conflict):
            return False
        return True

    def pages(self, networks: list[str] | None) -> Iterator[list[BlockRecord]]:
        selector = network_selector(networks) if networks is not None else None
        if networks is not None and not networks:
            return
        try:
            for items, _ in self._pages(selector):
                yield [r for r in map(from_object, items) if r is not None]
        except (ApiException, OSError, ValueError) as e:
            raise self._unavailable(e) from None

    def names(self, network: str) -> set[str]:
        """The names of every block of the network, a page at a time, as the rows of a Table without their
        objects: what a node claiming a block reads, never the records. StoreUnavailable."""
        out: set[str] = set()
        token = None
        try:
            while True:
                resp = self.custom.list_cluster_custom_object(
                    GROUP, VERSION, PLURAL, label_selector=network_selector([network]), limit=NAMES_PAGE,
                    _continue=token, include_object="None", _accept=TABLE, _request_timeout=max(self.timeout, 30),
                    resource_version="0" if token is None else None, _preload_content=False,
                )  # fmt: skip
                out.update(table_strings(resp.data, b'"cells":["'))
                token = next(table_strings(resp.data, b'"continue":"'), None)
                if not token:
                    return out
        except (ApiException, OSError, ValueError, AttributeError) as e:
            raise self._unavailable(e) from None

    # ------------------------------------------------------------------------------------------------ following

    def follow(self, alloc: BlockAllocator, networks: list[str]) -> None:
        """Feed `alloc` this node's blocks of `networks` (listed, then watched) from now on, instead of any earlier
        ones: the objects labelled with its node's name, whatever their spec says."""
        self.alloc = alloc
        mine = f"{NODE}={node_label(alloc.node)}"
        self.selection.select(f"{network_selector(networks)},{mine}" if networks else None)
        if not networks:
            alloc.listed(set(), set())

    def _follow(self, selector: str, stop: threading.Event, current: Callable[[], bool]) -> None:
        alloc = self.alloc
        assert alloc is not None
        networks = _networks(selector)

        def relist() -> str:
            names: set[str] = set()
            rv = ""
            # From the API server's watch cache (resourceVersion 0), which filters by label in memory: from etcd,
            # it would read and decode every block of the networks to find this node's few.
            for items, version in self._pages(selector, limit=PAGE, _loads=json.loads, resource_version="0"):
                rv = version
                for rec in map(from_object, items):
                    if rec is not None and current():
                        names.add(rec.name)
                        _take(alloc, rec, "list")
            if current():
                alloc.listed(names, {n for n in alloc.pools if network_label(n) in networks})
                self.last_error = None
            libc.malloc_trim()  # the pages parsed are garbage now: given back to the system
            return rv

        def watch(rv: str, stop: threading.Event) -> str:
            events = self._events(rv, stop, selector, _loads=json.loads)
            for kind, obj in events:
                if not current():
                    break
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    self.events += 1
                if kind == "DELETED":
                    meta = obj.get("metadata") if isinstance(obj, dict) else None
                    alloc.gone(_text(meta.get("name")) if isinstance(meta, dict) else "")
                elif kind in ("ADDED", "MODIFIED") and (rec := from_object(obj)) is not None:
                    _take(alloc, rec, "watch")
            return events.rv

        def failed(why: str) -> None:
            self.metrics.kube_errors.labels("watch").inc()
            if why != self.last_error:
                log.warning("address blocks: %s (giving from the blocks held meanwhile)", why)
            self.last_error = why
            alloc.unreachable(why)

        keep_following(stop, relist, watch, failed, self._words, self._words, self.backoff)


def _take(alloc: BlockAllocator, rec: BlockRecord, source: str) -> None:
    """One block into the node's view; a failure there is one object's (reported, with its traceback), never
    the end of the list or watch of every block of the network."""
    try:
        alloc.seen(rec, source)
    except Exception as e:
        log.exception("address block %s could not be taken in", rec.name)
        foreign.ignore(KIND, rec.name, f"taking it in failed: {type(e).__name__}", None, rec.rv)


def _networks(selector: str) -> set[str]:
    inside = selector[selector.index("(") + 1 : selector.rindex(")")]
    return set(inside.split(","))
