"""The allocator an ADD's pool uses: blocks (blockalloc.py) for a node with a cluster, one claim object per
address (allocator.py) for a network with blockSize 1 and for a node without a cluster. A claim says which gave
it (`block`), so that giving it back goes to the same one; both share one condition (`updated`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from netcomp.ipam import blockgc
from netcomp.ipam.allocator import Allocator, Holder
from netcomp.ipam.blockalloc import BlockAllocator
from netcomp.ipam.pool import IPAddress, Pool
from netcomp.ipam.store import Claim

if TYPE_CHECKING:
    from netcomp.ipam.ipamclaims import IPAMClaims


class Allocators:
    def __init__(self, claims: Allocator, blocks: BlockAllocator | None) -> None:
        self.per_address, self.blocks = claims, blocks
        self.persistent: IPAMClaims | None = None  # IPAMClaims' addresses (with a cluster)
        self.updated: threading.Condition = claims.updated

    @property
    def node_in_cluster(self) -> bool:
        return self.per_address.node_in_cluster

    @node_in_cluster.setter
    def node_in_cluster(self, value: bool) -> None:
        self.per_address.node_in_cluster = value
        if self.blocks is not None:
            self.blocks.node_in_cluster = value
            self.blocks.worker.wake(write=True)  # the records of the blocks held say so, written behind

    @property
    def synced(self) -> threading.Event:
        return self.blocks.synced if self.blocks is not None else self.per_address.synced

    def claim(self, pool: Pool, family_set: int, holder: Holder, exact: IPAddress | None = None) -> Claim:
        if self.blocks is None or pool.per_address:
            return self.per_address.claim(pool, family_set, holder, exact)
        return self.blocks.claim(pool, family_set, holder, exact)

    def settle(self, claims: list[Claim]) -> None:
        claims = [c for c in claims if not c.uses_ipam_claim()]
        self.per_address.settle([c for c in claims if not c.block])
        if self.blocks is not None:
            self.blocks.settle([c for c in claims if c.block])

    def release(self, claims: list[Claim], reason: str = "release") -> None:
        """Blocks' addresses first (never refused: written behind), then claim objects (DelegateError 11 when the
        store is away: the caller keeps them recorded and a retry frees what is left). A pod's use of an
        IPAMClaim's address is not given back: the claim holds it (its ownerPod is let go of)."""
        if self.persistent is not None:
            self.persistent.let_go([c for c in claims if c.uses_ipam_claim()])
        claims = [c for c in claims if not c.uses_ipam_claim()]
        if self.blocks is not None:
            self.blocks.release([c for c in claims if c.block], reason)
        self.per_address.release([c for c in claims if not c.block], reason)

    def claims(self, network: str | None = None) -> list[Claim]:
        out = self.per_address.claims(network)
        return out + self.blocks.claims(network) if self.blocks is not None else out

    def wait_for(self, predicate: Callable[[list[Claim]], bool], timeout: float) -> bool:
        with self.updated:
            return self.updated.wait_for(lambda: predicate(self.claims()), timeout)

    def show(self, pools: dict[str, Pool]) -> list[dict[str, Any]]:
        """Per network its pool, what is in use and free, its blocks, and every address in use (ipam show)."""
        out = []
        for name, pool in sorted(pools.items()):
            if self.blocks is None or pool.per_address:
                [doc] = self.per_address.show({name: pool})
            else:
                doc = blockgc.show(self.blocks, pool)
                _merge(doc, self.per_address.show({name: pool})[0])
                if self.persistent is not None:
                    self.persistent.name_claims(cast(list[dict[str, Any]], doc["claims"]))
            out.append(dict(doc))
        return out


def _merge(doc: dict[str, Any], legacy: dict[str, Any]) -> None:
    """A block network's AddressClaim objects (of an earlier version, still held) counted and listed with it."""
    if not legacy["claims"]:
        return
    for mine, theirs in zip(doc["pools"], legacy["pools"], strict=True):
        mine["claimed"] += theirs["claimed"]
        mine["free"] -= theirs["claimed"]
    doc["claims"] = sorted(doc["claims"] + legacy["claims"], key=lambda c: c["address"])
