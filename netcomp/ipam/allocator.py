"""Picking free addresses and claiming them one claim per address, unique across every node of a network. The view
of every claim is listed once and then fed by the store's watch, so an ADD makes no LIST. A claim is created under
its address's name: the store refuses a second claim of a name, so a race is lost cleanly and the next candidate is
tried. Claims are given back by their owner; `gc_own` and `gc_cluster` free what nobody holds."""

from __future__ import annotations

import ipaddress
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from netcomp import foreign
from netcomp.cni.codes import E_INVALID_CONFIG, E_TRY_LATER
from netcomp.errors import DelegateError
from netcomp.ipam.pool import IPAddress, Pool, claim_name
from netcomp.ipam.store import Claim, Store, StoreUnavailable, Taken

log = logging.getLogger("netcomp.ipam")


@dataclass(frozen=True, slots=True)
class Holder:
    """Who an address is claimed for."""

    container_id: str
    ifname: str  # the interface in the container
    pod: str = ""  # namespace/name
    pod_uid: str = ""

    def fields(self) -> dict[str, Any]:
        """As a Claim's keyword arguments (dataclasses.asdict, without its deep copy)."""
        return {"container_id": self.container_id, "ifname": self.ifname, "pod": self.pod, "pod_uid": self.pod_uid}


def refuse_exact(pool: Pool, family_set: int, addr: IPAddress) -> None:
    """DelegateError 7 when `addr` cannot be claimed exactly (Pool.reservable says why)."""
    why = pool.reservable(addr)
    if why is not None:
        where = pool.describe(family_set)
        raise DelegateError(
            E_INVALID_CONFIG, f"address {addr} cannot be claimed on network {pool.network!r}: {why} ({where})"
        )


def held_by(network: str, addr: IPAddress, who: str) -> DelegateError:
    return DelegateError(E_TRY_LATER, f"address {addr} of network {network!r} is held by {who}", "no plugin was run")


def exhausted(pool: Pool, family_set: int) -> DelegateError:
    return DelegateError(
        E_TRY_LATER,
        f"network {pool.network!r}: no free address in {pool.describe(family_set)} "
        f"({pool.size(family_set)} addresses, all claimed)",
        "see `netcomp ipam show`",
    )


def unavailable(network: str, why: str) -> DelegateError:
    return DelegateError(E_TRY_LATER, f"network {network!r}: {why}", "nothing was claimed and no plugin was run")


def usage(pool: Pool, claims: list[Claim]) -> list[dict[str, Any]]:
    """Per range set of the pool: its ranges, its size, how many of `claims` it holds and how many are free."""
    out = []
    for i, ranges in enumerate(pool.sets):
        size = pool.size(i)
        held = sum(1 for c in claims if pool.range_of(ipaddress.ip_address(c.address)) in ranges)
        out.append({"ranges": pool.describe(i), "size": size, "claimed": held, "free": size - held})
    return out


@dataclass(frozen=True, slots=True)
class PodState:
    """What the cluster says of a pod now: its node and uid (None: the pod does not exist)."""

    node: str
    uid: str


class Allocator:
    def __init__(
        self,
        store: Store,
        node: str,
        *,
        node_in_cluster: bool = False,
        grace: float = 60.0,
        counted: Callable[[str, str], None] = lambda event, network: None,
        updated: threading.Condition | None = None,
        covered: Callable[[str, IPAddress], bool] = lambda network, address: False,
    ) -> None:
        """`node`: this node's name (netcomp.yaml's nodeName); `node_in_cluster`: it is a Node of the cluster
        (recorded in each claim: only then may another node free it when the node is gone); `grace`: seconds an
        orphaned claim of this node is kept before gc_own frees it; `counted(event, network)`: metrics
        ("allocation", "conflict", "release", "gc"); `updated`: a condition shared with the block allocator;
        `covered(network, address)`: the address is in a block (never claimed one by one)."""
        self.store = store
        self.node = node
        self.node_in_cluster = node_in_cluster
        self.grace = grace
        self.counted = counted
        self.covered = covered
        self.updated = updated or threading.Condition(threading.RLock())  # notified whenever the view changes
        self._lock = self.updated
        self._view: dict[str, Claim] = {}
        self._seen: dict[str, float] = {}  # when this daemon first saw each claim (the grace counts from there)
        self._pending: set[str] = set()  # names claimed by ADDs in flight, not yet in a cache entry
        self._foreign: dict[str, str] = {}  # names held by something that is not a claim of its network
        self.synced = threading.Event()
        self.last_error: str | None = None
        self.pools: dict[str, Pool] = {}  # the networks served: a claim of one must lie in its pool

    # ------------------------------------------------------------------------------------------------ the view

    def load(self) -> None:
        """List every claim into the view. StoreUnavailable."""
        claims = [c for c in self.store.list() if self._fits(c)]
        now = time.monotonic()
        with self._lock:
            self._view = {c.name: c for c in claims}
            self._seen = {c.name: self._seen.get(c.name, now) for c in claims}
            self.updated.notify_all()
        self.synced.set()

    def serve(self, pools: dict[str, Pool]) -> None:
        """The pools of the networks this node serves; claims in the view outside theirs are dropped."""
        with self._lock:
            self.pools = dict(pools)
            for c in [c for c in self._view.values() if not self._fits(c)]:
                del self._view[c.name]
                self._seen.pop(c.name, None)
            self.updated.notify_all()

    def _fits(self, c: Claim) -> bool:
        """Whether a claim lies in its network's pool, where the pool is known: another writer may have put a
        claim of any address at its right name. This node's own claims are kept whatever the pool says now (a
        subnet edited under them): they are its to release, and gc_own frees what no container holds."""
        pool = self.pools.get(c.network)
        if pool is None or c.node == self.node or pool.range_for(ipaddress.ip_address(c.address)) is not None:
            return True
        why = f"its address {c.address} is in no subnet of network {c.network!r} ({pool.subnets()})"
        foreign.ignore("AddressClaim", c.name, why, {"metadata": {"resourceVersion": c.uid}})
        return False

    def changed(self, name: str, claim: Claim | None) -> None:
        if claim is not None and not self._fits(claim):
            claim = None  # ignored for what it claims: as if it were not there
        with self._lock:
            if claim is None:
                self._view.pop(name, None)
                self._seen.pop(name, None)
            else:
                self._view[name] = claim
                self._seen.setdefault(name, time.monotonic())
            self.updated.notify_all()

    def network_of(self, name: str) -> str | None:
        """The network of the claim object of that name in the view (None: none there)."""
        with self._lock:
            c = self._view.get(name)
            return c.network if c is not None else None

    def foreign(self, name: str, what: str) -> None:
        """Something that is not a claim of its network has a claim's name: that address is never given."""
        with self._lock:
            if self._foreign.get(name) != what:
                log.warning("%s is at the name of an address claim: that address is never given", what)
            self._foreign[name] = what
            self.updated.notify_all()

    def holds(self, network: str, address: IPAddress) -> str | None:
        """Who holds the address by a claim object (None: nobody)."""
        name = claim_name(network, address)
        with self._lock:
            c = self._view.get(name)
            if c is not None and c.network == network:
                return c.holder()
            if name in self._foreign:
                return self._foreign[name]
            return "an ADD in flight" if name in self._pending else None

    def claims(self, network: str | None = None) -> list[Claim]:
        with self._lock:
            return sorted((c for c in self._view.values() if network is None or c.network == network), key=Claim.order)

    # ------------------------------------------------------------------------------------------------ claiming

    def claim(self, pool: Pool, family_set: int, holder: Holder, exact: IPAddress | None = None) -> Claim:
        """One address of a range set of the pool (or exactly `exact`), claimed for holder and held as in flight
        until settle(). DelegateError: 11 when the pool is exhausted, the store is away or `exact` is held by
        another; 7 when `exact` is not in the pool."""
        if exact is not None:
            refuse_exact(pool, family_set, exact)
            return self._create(pool, exact, holder, exact=True)  # type: ignore[return-value]
        seed = f"{self.node}/{holder.container_id}/{holder.ifname}"
        for _, addr in pool.candidates(family_set, seed):
            name = claim_name(pool.network, addr)
            with self._lock:
                if name in self._view or name in self._pending or name in self._foreign:
                    continue
                if self.covered(pool.network, addr):
                    continue
            got = self._create(pool, addr, holder, exact=False)
            if got is not None:
                return got
        raise exhausted(pool, family_set)

    def _create(self, pool: Pool, addr: IPAddress, holder: Holder, *, exact: bool) -> Claim | None:
        name = claim_name(pool.network, addr)
        with self._lock:
            self._pending.add(name)
        want = Claim(name, pool.network, str(addr), self.node, **holder.fields(), node_in_cluster=self.node_in_cluster)
        try:
            got = self.store.create(want)
        except Taken as t:
            ours = t.holder is not None and t.holder.network == pool.network
            with self._lock:
                self._pending.discard(name)
                if ours:
                    self._view[name] = t.holder
                    self._seen.setdefault(name, time.monotonic())
                else:
                    self._foreign[name] = t.foreign or "not a claim of this network"
            self.counted("conflict", pool.network)
            if not ours:
                log.warning("address %s of network %s is held by something else (%s): never touched", addr,
                            pool.network, t.foreign or "an object of another network")  # fmt: skip
            if exact:
                raise held_by(pool.network, addr, t.holder.holder() if ours else t.foreign) from None
            return None
        except StoreUnavailable as e:
            with self._lock:
                self._pending.discard(name)
            raise unavailable(pool.network, f"cannot claim an address: {e}") from None
        with self._lock:
            self._view[name] = got
            self._seen.setdefault(name, time.monotonic())
        self.counted("allocation", pool.network)
        return got

    def settle(self, claims: list[Claim]) -> None:
        """The claims are in a cache entry now (or were given back): no longer held as in flight."""
        with self._lock:
            self._pending.difference_update(c.name for c in claims)

    def release(self, claims: list[Claim], reason: str = "release") -> None:
        """Give claims back (each only if it is still that claim). DelegateError 11 when the store is away: the
        caller keeps them recorded and tries again."""
        for c in claims:
            try:
                self.store.delete(c)
            except StoreUnavailable as e:
                raise DelegateError(
                    E_TRY_LATER, f"cannot free address {c.address} of network {c.network!r}: {e}", "kept; try again"
                ) from None
            with self._lock:
                self._pending.discard(c.name)
                if (cur := self._view.get(c.name)) is not None and (not c.uid or cur.uid == c.uid):
                    del self._view[c.name]
            self.counted(reason, c.network)

    # ------------------------------------------------------------------------------------------------ leaks

    def gc_own(self, referenced: set[str]) -> list[Claim]:
        """Free this node's claims that no cache entry (`referenced`: claim names) and no ADD in flight holds,
        seen for longer than the grace period."""
        now = time.monotonic()
        with self._lock:
            mine = [c for c in self._view.values() if c.node == self.node and c.name not in self._pending]
            orphans = [c for c in mine if c.name not in referenced and now - self._seen.get(c.name, now) >= self.grace]
        freed = []
        for c in orphans:
            try:
                self.release([c], "gc")
            except DelegateError as e:
                log.warning("cannot free the orphaned claim %s: %s", c.name, e.msg)
                break
            log.warning("freed address %s of network %s: claimed by this node for %s, recorded nowhere",
                        c.address, c.network, c.container_id)  # fmt: skip
            freed.append(c)
        return freed

    def gc_cluster(
        self, node_exists: Callable[[str], bool], pod: Callable[[str], PodState | None], grace: float | None = None
    ) -> list[Claim]:
        """Free other nodes' claims whose holder is provably gone (Allocator.gone), once older than the grace
        period by the store's clock (its pod may just be starting). `node_exists` / `pod` raise StoreUnavailable."""
        grace = self.grace if grace is None else grace
        now = time.time()
        freed = []
        for c in self.claims():
            if c.node == self.node or now - c.created < grace:
                continue
            why = self.gone(c, node_exists, pod)
            if why is None:
                continue
            self.release([c], "gc")
            log.warning("freed address %s of network %s held by %s: %s", c.address, c.network, c.holder(), why)
            freed.append(c)
        return freed

    @staticmethod
    def gone(c: Claim, node_exists: Callable[[str], bool], pod: Callable[[str], PodState | None]) -> str | None:
        """Why a claim's holder is provably gone (None: it is not): its pod does not exist, or is another pod of that
        name (another uid, another node); with no pod, its node is gone, if it was a Node of the cluster when it
        claimed. A pod that exists on its node keeps its address; without a pod, gc_own is its node's to run."""
        if c.pod:
            state = pod(c.pod)
            if state is None:
                return f"pod {c.pod} is gone"
            if c.pod_uid and state.uid and state.uid != c.pod_uid:
                return f"pod {c.pod} is another pod now (uid {state.uid}, not {c.pod_uid})"
            if state.node and state.node != c.node:
                return f"pod {c.pod} runs on {state.node}, not on {c.node}"
            return None  # the pod exists, on its node: never freed
        if c.node_in_cluster and not node_exists(c.node):
            return f"node {c.node} is gone"
        return None

    # ------------------------------------------------------------------------------------------------ show

    def show(self, pools: dict[str, Pool]) -> list[dict[str, object]]:
        """Per network: its pool, size, how many are claimed and free, and every claim."""
        out: list[dict[str, object]] = []
        for network, pool in sorted(pools.items()):
            claims = self.claims(network)
            out.append({"network": network, "store": self.store.kind, "pools": usage(pool, claims),
                        "claims": [c.shown() for c in claims]})  # fmt: skip
        return out
