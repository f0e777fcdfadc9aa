"""The daemon's side of cluster-wide addresses (ipam/): the store it claims in (the Kubernetes API's with a
cluster, a node-local one without), the allocator and its view (listed at start-up, then followed), the periodic
release of what nothing holds, and what `netcomp ipam show|gc` ask for."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from netcomp.cni.cache import Cache
from netcomp.errors import DelegateError
from netcomp.ipam.allocator import Allocator
from netcomp.ipam.localstore import LocalStore
from netcomp.ipam.pool import Pool
from netcomp.ipam.store import Store, StoreUnavailable
from netcomp.settings import Settings

if TYPE_CHECKING:
    from netcomp.daemon.kube import Cluster
    from netcomp.daemon.kubestore import KubeStore

log = logging.getLogger("netcomp.ipam")
CLUSTER_GC_EVERY = 300.0  # seconds between two cluster-wide GCs on the node that runs them (kubernetes.ipamGC)


class Addresses:
    def __init__(
        self, settings: Settings, cluster: Cluster | None, cache: Cache, counted: Callable[[str, str], None]
    ) -> None:
        self.settings = settings
        self.cache = cache
        self.kube: KubeStore | None = None
        store: Store
        if cluster is not None:
            from netcomp.daemon.kubestore import KubeStore  # the kubernetes client: only with a cluster

            self.kube = KubeStore(cluster)
            store = self.kube
        else:
            store = LocalStore(Path(settings.ipamDir))
        self.allocator = Allocator(store, settings.nodeName, grace=settings.ipamGrace, counted=counted)

    @property
    def store_kind(self) -> str:
        return self.allocator.store.kind

    def start(self, stop: threading.Event) -> None:
        """Before serving: whether this node is a Node of the cluster, every claim listed, then followed (a
        thread). An API server that does not answer now is no reason not to serve: claims then fail with code 11
        until it does, and the watch lists them once it answers."""
        if self.kube is not None and self.settings.kubernetes is not None:
            # Followed, not read once: a daemon usually starts before its kubelet registers the Node.
            node = self.kube.cluster.node
            node.on_change(lambda exists: setattr(self.allocator, "node_in_cluster", exists))
            node.start(stop)
            if not node.known.wait(self.settings.kubernetes.timeout):
                log.warning("cannot tell yet whether node %s is a Node of the cluster: following it",
                            self.settings.nodeName)  # fmt: skip
        try:
            self.allocator.load()
        except StoreUnavailable as e:
            log.warning("cannot list address claims: %s", e)
        threading.Thread(target=self.allocator.follow, args=(stop,), name="ipam-follow", daemon=True).start()

    def referenced(self) -> set[str]:
        """The claims the cache records (of attached containers, and of ADDs it says are in progress)."""
        return {str(c.get("name")) for e in self.cache.entries() for a in e.attachments for c in a.claims}

    def gc_own(self) -> int:
        if not any(c.node == self.settings.nodeName for c in self.allocator.claims()):
            return 0
        return len(self.allocator.gc_own(self.referenced()))

    def gc_cluster(self) -> dict[str, Any]:
        """Free other nodes' claims whose node or pod is gone (POST /ipam/gc, `netcomp ipam gc`, and every few
        minutes with kubernetes.ipamGC)."""
        if self.kube is None:
            return {"freed": [], "note": "no cluster: a node-local store has only this node's claims (gc_own)"}
        own = self.gc_own()
        try:
            freed = self.allocator.gc_cluster(self.kube.node_exists, self.kube.pod)
        except (StoreUnavailable, DelegateError) as e:
            return {"freed": [], "error": str(getattr(e, "msg", e))}
        return {
            "freed": [{"network": c.network, "address": c.address, "node": c.node, "pod": c.pod} for c in freed],
            "freedOwn": own,
        }

    def show(self, networks: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        pools = {name: p for name, conf in networks.items() if (p := Pool.of(name, conf)) is not None}
        return {
            "node": self.settings.nodeName,
            "store": self.store_kind,
            "synced": self.allocator.synced.is_set(),
            "networks": self.allocator.show(pools),
        }
