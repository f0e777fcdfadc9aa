"""The daemon's side of cluster-wide addresses (ipam/): with a cluster, the AddressBlock objects and the per-address
claim objects of the networks this node serves; without one, claim files in ipamDir. It follows each compile's
networks, releases what nothing holds, and answers `netcomp ipam show|gc`."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from netcomp.errors import DelegateError
from netcomp.fsutil import atomic_write
from netcomp.ipam import blockgc
from netcomp.ipam.allocator import Allocator
from netcomp.ipam.allocators import Allocators
from netcomp.ipam.background import Worker
from netcomp.ipam.blockalloc import BlockAllocator
from netcomp.ipam.blockstate import LocalRecord
from netcomp.ipam.localstore import LocalStore
from netcomp.ipam.pool import Pool
from netcomp.ipam.store import Claim, StoreUnavailable
from netcomp.records.files import Records
from netcomp.records.record import Record
from netcomp.settings import Settings

if TYPE_CHECKING:
    from netcomp.cluster.intents import Cluster
    from netcomp.ipam.blockobjects import KubeBlocks
    from netcomp.ipam.claimobjects import KubeStore
    from netcomp.ipam.ipamclaims import IPAMClaims

log = logging.getLogger("netcomp.ipam")
CLUSTER_GC_EVERY = 300.0  # seconds between two cluster-wide GCs on the node that runs them (kubernetes.ipamGC)
BLOCKS_RECORD = "ipam/blocks.json"  # under cacheDir: the blocks this node holds (ipam/blockstate.LocalRecord)
IPAM_CLAIMS_RECORD = "ipam/ipamclaims"  # under cacheDir: a file per IPAMClaim this node knows (ipam/ipamclaims.py)
FOLLOWING = "following"  # in that dir: written once this node marks a claim (a lost answer is its to take off)


class Addresses:
    def __init__(
        self, settings: Settings, cluster: Cluster | None, records: Records, counted: Callable[[str, str], None]
    ) -> None:
        self.settings = settings
        self.records = records
        self.kube: KubeStore | None = None
        self.kube_blocks: KubeBlocks | None = None
        self.blocks: BlockAllocator | None = None
        self.pools: dict[str, Pool] = {}
        self._following = False
        self.cluster = cluster
        if cluster is not None:
            from netcomp.ipam.blockobjects import KubeBlocks  # the cluster's calls: only with a cluster
            from netcomp.ipam.claimobjects import KubeStore
            from netcomp.ipam.ipamclaimapi import ClaimApi
            from netcomp.ipam.ipamclaims import IPAMClaims

            self.kube, self.kube_blocks = KubeStore(cluster.handle), KubeBlocks(cluster.handle)
            record = LocalRecord(Path(settings.cacheDir) / BLOCKS_RECORD, settings.nodeName)
            self.blocks = BlockAllocator(
                self.kube_blocks, settings.nodeName, record, grace=settings.ipamGrace,
                timeout=cluster.kube.timeout, counted=counted,
            )  # fmt: skip
            per_address = Allocator(self.kube, settings.nodeName, grace=settings.ipamGrace, counted=counted,
                                    updated=self.blocks.updated, covered=self.blocks.covers)  # fmt: skip
            self.blocks.taken = per_address.holds
            self.worker: Worker | None = Worker(self.blocks)
            self.blocks.worker = self.worker
            self.ipam_claims: IPAMClaims | None = IPAMClaims(
                ClaimApi(cluster.handle, settings.nodeName), self.blocks, settings.nodeName,
                Path(settings.cacheDir) / IPAM_CLAIMS_RECORD, cluster.kube.timeout,
            )  # fmt: skip
        else:
            per_address = Allocator(LocalStore(Path(settings.ipamDir)), settings.nodeName, grace=settings.ipamGrace,
                                    counted=counted)  # fmt: skip
            self.worker = None
            self.ipam_claims = None
        self.allocator = Allocators(per_address, self.blocks)
        self.allocator.persistent = self.ipam_claims

    @property
    def store_kind(self) -> str:
        return self.allocator.per_address.store.kind

    def serve(self, networks: Mapping[str, Mapping[str, Any]]) -> None:
        """The networks compiled now: the pools this node gives addresses of, and so the objects it follows."""
        pools = {name: p for name, conf in networks.items() if (p := Pool.of(name, conf)) is not None}
        if pools == self.pools:
            return
        self.pools = pools
        self.allocator.per_address.serve(pools)
        if self.blocks is not None:
            self.blocks.serve({n: p for n, p in pools.items() if not p.per_address})
        if self._following:
            self._follow()

    def _follow(self) -> None:
        if self.kube is None or self.kube_blocks is None or self.blocks is None:
            return
        per_address, blocks = self.allocator.per_address, self.blocks

        def changed(name: str, claim: Claim | None) -> None:
            network = claim.network if claim is not None else per_address.network_of(name)
            per_address.changed(name, claim)
            if network is not None:
                blocks.retake(network)  # an address in a block this node holds may be taken, or free again

        def foreign(name: str, what: str) -> None:
            per_address.foreign(name, what)
            blocks.retake()

        self.kube.select(sorted(self.pools), changed, foreign, per_address.synced.set)
        self.kube_blocks.follow(self.blocks, sorted(n for n, p in self.pools.items() if not p.per_address))

    def start(self, stop: threading.Event, records: list[Record]) -> None:
        """Before serving: whether this node is a Node of the cluster (followed: its kubelet may register it
        later), the blocks it holds, then the objects of the networks it serves, listed and followed. An API
        server that does not answer now is no reason not to serve: addresses of blocks held are given meanwhile."""
        if self.kube is None or self.blocks is None:
            try:
                self.allocator.per_address.load()
            except StoreUnavailable as e:
                log.warning("cannot list address claims: %s", e)
            return
        if self.settings.kubernetes is not None and self.cluster is not None:
            node = self.cluster.node
            node.on_change(lambda exists: setattr(self.allocator, "node_in_cluster", exists))
            node.start(stop)
            if not node.known.wait(self.settings.kubernetes.timeout):
                log.warning("cannot tell yet whether node %s is a Node of the cluster: following it",
                            self.settings.nodeName)  # fmt: skip
        held = self.ipam_claims.load() if self.ipam_claims is not None else []  # the IPAMClaims' own entries
        self.blocks.load(held + [Claim.from_doc(c) for e in records for a in e.attachments for c in a.claims])
        assert self.worker is not None
        self.worker.start(stop)
        if self.ipam_claims is not None and self.cluster is not None:
            from netcomp.ipam.ipamclaimapi import Following

            following = Following(self.ipam_claims, self.cluster.handle)
            marks = self.ipam_claims.record.path / FOLLOWING  # this node has marked claims: follow them from start

            def start_following() -> None:
                if not marks.exists():
                    try:
                        atomic_write(marks, b"this node marks IPAMClaims: it follows those it marked from start\n")
                    except OSError as e:  # a mark's lost answer then waits for this node's next ADD of it
                        log.warning("cannot write %s: %s", marks, e)
                following.start(stop)

            self.ipam_claims.start_following = start_following
            if marks.exists() or any(k.held for k in self.ipam_claims.kept.values()):
                following.start(stop)
        self._following = True
        self._follow()

    def flush(self, timeout: float) -> bool:
        """Until what this node knows of its blocks is written (tests, a stopping daemon); False on timeout."""
        return self.worker.flush(timeout) if self.worker is not None else True

    def close(self, timeout: float) -> bool:
        """A stopping daemon's last flush, then nothing more is written or followed: a daemon of this node started
        after it writes from what it knows, which an older write of this one's would undo. False on timeout."""
        done = self.flush(timeout)
        if self.worker is not None:
            self.worker.close()
        if self.kube is not None and self.kube_blocks is not None:
            self.kube.selection.select(None)
            self.kube_blocks.selection.select(None)
        return done

    def gc_own(self) -> int:
        freed = 0
        per_address = self.allocator.per_address
        if any(c.node == self.settings.nodeName for c in per_address.claims()):
            # The claims the cache records: of attached containers, and of ADDs it says are in progress.
            held = {str(c.get("name")) for e in self.records.entries() for a in e.attachments for c in a.claims}
            freed += len(per_address.gc_own(held))
        if self.blocks is not None:
            freed += len(self.blocks.release_empty())
        return freed

    def gc_cluster(self) -> dict[str, Any]:
        """Free other nodes' addresses whose node or pod is gone, and the emptied blocks of nodes that are gone
        (POST /ipam/gc, `netcomp ipam gc`, and every few minutes with kubernetes.ipamGC)."""
        if self.kube is None or self.blocks is None:
            return {"freed": [], "note": "no cluster: a node-local store has only this node's claims (gc_own)"}
        own = self.gc_own()
        try:
            freed = self.allocator.per_address.gc_cluster(self.kube.node_exists, self.kube.pod)
            claims = self.ipam_claims.api.gone_node if self.ipam_claims is not None else (lambda node: None)
            more, blocks = blockgc.gc_cluster(
                self.blocks, self.kube.node_exists, self.kube.pod, self.settings.ipamGrace, claims
            )
        except (StoreUnavailable, DelegateError) as e:
            return {"freed": [], "error": str(getattr(e, "msg", e))}
        return {
            "freed": [{"network": c.network, "address": c.address, "node": c.node, "pod": c.pod} for c in freed + more],
            "freedBlocks": blocks,
            "freedOwn": own,
        }

    def show(self, networks: Mapping[str, Mapping[str, Any]], network: str | None = None) -> dict[str, Any]:
        """`netcomp ipam show [NETWORK]`: every network with a pool, or only the one named (only its blocks read)."""
        pools = {name: p for name, conf in networks.items() if (p := Pool.of(name, conf)) is not None}
        if network is not None:
            pools = {network: pools[network]} if network in pools else {}
        out = self.allocator.show(pools)
        events = self.kube_blocks.events if self.kube_blocks is not None else 0
        return {"node": self.settings.nodeName, "store": self.store_kind, "synced": self.allocator.synced.is_set(),
                "watchEvents": events, "networks": out}  # fmt: skip
