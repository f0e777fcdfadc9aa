"""This module frees what the cluster's blocks hold for holders that are gone, and shows the blocks. `gc_cluster`
frees, in other nodes' blocks (and what this node lent), addresses whose holder is provably gone (Allocator.gone's
rules), the entries of IPAMClaims of gone nodes that are deleted and used by no pod (their finalizer taken off
first), and empty blocks of nodes that are gone. `show` lists a network's blocks and every address in use. This
node's own empty blocks are released by their holder (blockalloc.BlockAllocator.release_empty)."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from netcomp.ipam.allocator import Allocator, PodState, usage
from netcomp.ipam.blocks import block_size
from netcomp.ipam.blockstate import BlockRecord, claim_of
from netcomp.ipam.pool import Pool
from netcomp.ipam.store import CLAIM_HOLDER, Claim, Gone, StoreUnavailable

if TYPE_CHECKING:
    from netcomp.ipam.blockalloc import BlockAllocator

log = logging.getLogger("netcomp.ipam")


class NodeClaims(Protocol):
    """The IPAMClaims labelled with a gone node (ipamclaimapi.GoneNodeClaims)."""

    def __contains__(self, uid: object) -> bool: ...

    def finish(self, uid: str, node_exists: Callable[[str], bool]) -> str | None:
        """Why the claim's entries may be freed now, its finalizer off; None: they stay."""

    def finish_all(self, node_exists: Callable[[str], bool]) -> None: ...


def gc_cluster(
    a: BlockAllocator,
    node_exists: Callable[[str], bool],
    pod: Callable[[str], PodState | None],
    grace: float,
    ipam_claims: Callable[[str], NodeClaims | None] = lambda node: None,
) -> tuple[list[Claim], list[str]]:
    """Free other nodes' addresses whose holders are gone, what this node lent to holders that are gone, and the
    emptied blocks of nodes that are gone; the addresses and the blocks freed. An IPAMClaim's entry is freed only
    when its claim is gone, or deleted and finished: `ipam_claims(node)` answers the claims labelled with a gone
    node (None: they cannot be told, nothing of theirs is freed), listed once per gone node with blocks, so that
    its deleted claims are finished even when they hold no entry. StoreUnavailable."""
    exists = functools.cache(node_exists)  # each node asked about once per run
    listed: dict[str, NodeClaims | None] = {}

    def claims(node: str) -> NodeClaims | None:
        if node not in listed:
            listed[node] = ipam_claims(node)
        return listed[node]

    def gone(c: Claim) -> str | None:
        return _gone(c, exists, pod, claims)

    freed: list[Claim] = []
    blocks: list[str] = []
    now = time.time()
    for page in a.store.pages(None):
        for rec in page:
            if now - rec.created < grace:
                continue
            if rec.node == a.node:
                _free_lent(a, rec, gone, freed)  # its own entries are its own to free (gc_own)
                continue
            node_gone = rec.node_in_cluster and not exists(rec.node)
            if node_gone:
                claims(rec.node)
            rec = _free_entries(a, rec, gone, freed)
            if not (rec.used or rec.lent or rec.requests) and node_gone:
                try:
                    if a.store.delete(rec.name, rec.uid, rec.rv):
                        blocks.append(rec.name)
                        log.warning("freed block %s of network %s: node %s is gone", rec.cidr, rec.network, rec.node)
                except StoreUnavailable as e:
                    log.warning("cannot free block %s: %s", rec.name, e)
    for got in listed.values():
        if got is not None:
            got.finish_all(exists)
    return freed, blocks


def _free_entries(a: BlockAllocator, rec: BlockRecord, gone: Callable[[Claim], str | None],
                  freed: list[Claim]) -> BlockRecord:  # fmt: skip
    used: dict[str, dict[str, Any] | None] = {}
    for addr, doc in rec.used.items():
        c = claim_of(rec, addr, doc, rec.node)
        if (why := gone(c)) is not None:
            used[addr] = None
            freed.append(c)
            log.warning("freed address %s of network %s held by %s: %s", addr, rec.network, c.holder(), why)
    if used:
        try:
            rec = a.store.write_used(rec.name, rec.uid, used)
        except (Gone, StoreUnavailable) as e:
            log.warning("cannot free addresses of block %s: %s", rec.name, e)
            del freed[len(freed) - len(used) :]
            return rec
    _free_lent(a, rec, gone, freed)
    return rec


def _free_lent(a: BlockAllocator, rec: BlockRecord, gone: Callable[[Claim], str | None], freed: list[Claim]) -> None:
    """The block's loans whose holders are gone, given back to it."""
    for addr, doc in list(rec.lent.items()):
        borrower = str(doc.get("node", ""))
        if borrower == a.node:
            continue
        c = claim_of(rec, addr, doc, borrower)
        c = Claim(**{**c.to_doc(), "node_in_cluster": bool(doc.get("nodeInCluster"))})
        if (why := gone(c)) is None:
            continue
        try:
            if a.store.update_lent(rec.name, addr, borrower, None):
                freed.append(c)
                del rec.lent[addr]
                log.warning("freed address %s of network %s lent to %s: %s", addr, rec.network, c.holder(), why)
        except (Gone, StoreUnavailable) as e:
            log.warning("cannot free address %s of block %s: %s", addr, rec.name, e)


def _gone(
    c: Claim,
    exists: Callable[[str], bool],
    pod: Callable[[str], PodState | None],
    claims: Callable[[str], NodeClaims | None],
) -> str | None:
    """Allocator.gone's reason, but an IPAMClaim's entry outlives its node: it goes with its claim only, once the
    claim is gone or deleted and finished (the claim's next ADD, on any node, gets the address meanwhile;
    docs/kubernetes.md, "Persistent addresses")."""
    if not c.container_id.startswith(CLAIM_HOLDER):
        return Allocator.gone(c, exists, pod)
    if not c.node_in_cluster or exists(c.node):
        return None  # its node frees it when the claim goes (one that was no Node is never judged gone)
    got = claims(c.node)
    uid = c.container_id.removeprefix(CLAIM_HOLDER)
    if got is None:
        return None
    if uid not in got:
        return f"its IPAMClaim is gone (node {c.node} is gone)"
    # Its finalizer off before its entries are freed (the caller frees them): a GC killed between the two leaves
    # entries of a claim that is gone, which the next run frees; the other order could leave a claim whose
    # finalizer no run finds again (ipamclaimapi.GoneNodeClaims).
    return got.finish(uid, exists)


def show(a: BlockAllocator, pool: Pool) -> dict[str, Any]:
    """One network: its range sets (size, addresses in use, free), its blocks (holder, in use, lent), and every
    address in use with who holds it."""
    claims: list[Claim] = []
    blocks: list[dict[str, Any]] = []
    try:
        records = [r for page in a.store.pages([pool.network]) for r in page if r.network == pool.network]
    except StoreUnavailable as e:
        log.warning("ipam show: %s; showing what this node knows", e)
        claims, records = a.claims(pool.network), []
    for r in sorted(records, key=lambda r: (r.net.version, int(r.net.network_address))):
        claims += [claim_of(r, addr, doc, r.node) for addr, doc in r.used.items()]
        claims += [claim_of(r, addr, doc, str(doc.get("node"))) for addr, doc in r.lent.items()]
        blocks.append({"block": r.cidr, "node": r.node, "used": len(r.used), "lent": len(r.lent)})
    return {
        "network": pool.network,
        "store": a.store.kind,
        "blockSize": [block_size(pool, i) for i in range(len(pool.sets))],
        "pools": usage(pool, claims),
        "blocks": blocks,
        "claims": [c.shown() for c in sorted(claims, key=Claim.order)],
    }
