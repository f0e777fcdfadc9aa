"""The daemon's side of the ids TenantConfigs give TenantNetworks (ipam/idclaims.py, intent/tenancy.py): the store
(TenantClaim objects with a cluster, files in ipamDir/tenants without) the compiler claims through, a recompile
when someone else changes a claim this node compiled with, and the release of claims whose network is gone."""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from netcomp.intent.tenancy import Profile
from netcomp.ipam.idclaims import IdAllocator, IdClaim, id_claim_name
from netcomp.ipam.localstore import LocalStore
from netcomp.settings import Settings

if TYPE_CHECKING:
    from netcomp.cluster.intents import Cluster

log = logging.getLogger("netcomp.ipam")


class TenantIds:
    """`recompile`: asks the daemon for a full compile (a claim this node compiled with changed)."""

    def __init__(self, settings: Settings, cluster: Cluster | None, recompile: Callable[[], object]) -> None:
        self.settings = settings
        self.recompile = recompile
        if cluster is not None:
            from netcomp.ipam.claimobjects import IDS, KubeStore  # the kubernetes client: only with a cluster

            store: object = KubeStore(cluster.handle, IDS)
        else:
            store = LocalStore(Path(settings.ipamDir) / "tenants", IdClaim)
        self.allocator = IdAllocator(store, settings.nodeName, self._changed_by_others)
        self._used: dict[str, str] = {}  # network -> the claim name its compile used
        self._lock = threading.Lock()

    def start(self, stop: threading.Event) -> None:
        self.allocator.start(stop)

    def claim(self, network: str, uid: str, profiles: Sequence[Profile]) -> tuple[Profile, int]:
        """intent.tenancy.ClaimIds, remembering which claim each network was compiled with."""
        profile, vni = self.allocator.claim(network, uid, profiles)
        assert profile.vni_type is not None
        with self._lock:
            self._used[network] = id_claim_name(profile.name, profile.vni_type, vni)
        return profile, vni

    def _changed_by_others(self) -> None:
        """A claim changed in the store: recompile if a network this node compiled lost its claim, or got a
        competing one (two nodes raced; the first by profile and id is kept)."""
        claims = self.allocator.claims()
        names, per_network = {c.name for c in claims}, Counter(c.network for c in claims)
        with self._lock:
            stale = [n for n, name in self._used.items() if name not in names or per_network[n] > 1]
        if stale:
            log.info("tenant ids changed for %s: compiling again", ", ".join(sorted(stale)))
            threading.Thread(target=self.recompile, name="tenant-recompile", daemon=True).start()

    def state(self) -> str:
        """A digest of the claims (part of the plan cache's fingerprint)."""
        h = hashlib.sha256()
        for c in self.allocator.claims():
            h.update(f"{c.name}\0{c.network}\0{c.network_uid}\n".encode())
        return h.hexdigest()

    def release_gone(self, present: Mapping[str, str] | None, exists: Callable[[IdClaim], bool] | None) -> int:
        """Free the claims of TenantNetworks that are gone: not among `present` (namespace/name -> uid, every
        TenantNetwork document the compiler reads; None when some file could not be read, and then nothing is
        freed), and confirmed gone by the API server (`exists`) with a cluster, older than ipamGrace without one."""
        if present is None:
            return 0
        now = time.time()

        def gone(c: IdClaim) -> bool:
            if exists is None and c.created and now - c.created < self.settings.ipamGrace:
                # No one to ask: a claim this daemon's compile made for a file the list above missed is young.
                return False
            uid = present.get(c.network)
            if uid is not None and (not uid or not c.network_uid or uid == c.network_uid):
                return False
            return exists is None or not exists(c)

        freed = self.allocator.release_gone(gone)
        with self._lock:
            for c in freed:
                if self._used.get(c.network) == c.name:
                    del self._used[c.network]
        if freed:  # a network whose ranges were exhausted may get one of these now
            threading.Thread(target=self.recompile, name="tenant-recompile", daemon=True).start()
        return len(freed)
