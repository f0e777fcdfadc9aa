"""The VLAN and VXLAN ids a TenantConfig gives TenantNetworks (intent/tenancy.py), claimed once for the whole
cluster as addresses are: one claim per (profile, id) under a name only it has, a TenantClaim object on the API
server or a file in ipamDir/tenants. Every node asks the same question in the same order, so two nodes racing for an
id both end with the one the store took first. A network with two claims keeps its first by the profiles' order,
then the lowest id; whoever sees the other frees it."""

from __future__ import annotations

import logging
import re
import threading
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from netcomp.intent.tenancy import VNI_MAX, ClaimUnavailable, Exhausted, Profile
from netcomp.ipam.store import StoreUnavailable, Taken

log = logging.getLogger("netcomp.ipam")


@dataclass(frozen=True, slots=True)
class IdClaim:
    """Who holds an id of a profile: the TenantNetwork (namespace/name, and its uid when it is an object)."""

    name: str
    profile: str
    vni_type: str
    vni: int
    network: str  # namespace/name
    network_uid: str = ""
    node: str = ""  # the node that made the claim
    uid: str = ""  # the store's identity of this claim
    created: float = 0.0

    def to_doc(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_doc(d: dict[str, Any]) -> IdClaim:
        return IdClaim(**{k: d[k] for k in IdClaim.__slots__ if k in d})


def id_claim_name(profile: str, vni_type: str, vni: int) -> str:
    """A DNS subdomain no other (profile, type, id) has: the profile's name as a label (a device pool's `/` and
    anything else not allowed spelled '-', with a checksum of the real name so that two profiles never share
    one), then the type and id: `ens4-6a1b2c3d.vlan-1000`."""
    label = re.sub(r"[^a-z0-9-]+", "-", profile.lower()).strip("-")[:40] or "profile"
    return f"{label}-{zlib.crc32(profile.encode()):08x}.{vni_type}-{vni}"


def problem(name: str, spec: Any) -> str:
    """What makes a stored claim's spec no claim of its name ("": nothing): another writer may have put it in the
    store, so the name must be id_claim_name of what it claims (the name is the lock on an id), the id an int
    within its type's range, and the holder's fields strings."""
    if not isinstance(spec, dict):
        return "it has no spec"
    profile, vtype, vni, net = spec.get("profile"), spec.get("vniType"), spec.get("vni"), spec.get("network")
    if not isinstance(profile, str) or not 0 < len(profile) <= 253:
        return "its profile is not a name"
    if not isinstance(vtype, str) or vtype not in VNI_MAX:
        return f"its vniType is not one of {', '.join(VNI_MAX)}"
    if not isinstance(vni, int) or isinstance(vni, bool) or not 1 <= vni <= VNI_MAX[vtype]:
        return f"its vni is not a {vtype} id (1 to {VNI_MAX[vtype]})"
    if not isinstance(net, dict) or not all(isinstance(net.get(k), str) and 0 < len(net[k]) <= 253
                                            for k in ("namespace", "name")):  # fmt: skip
        return "its network is not a namespace and a name"
    if not isinstance(net.get("uid", ""), str) or not isinstance(spec.get("node", ""), str):
        return "its holder's fields are not strings"
    if name != (want := id_claim_name(profile, vtype, vni)):
        return f"its name is not {want}, the name of the claim of {vtype} {vni} of {profile!r}: forged"
    return ""


def _order(profiles: Sequence[Profile], c: IdClaim) -> tuple[int, int]:
    pos = next((i for i, p in enumerate(profiles) if p.name == c.profile and p.vni_type == c.vni_type), len(profiles))
    return pos, c.vni


class IdAllocator:
    """tenancy.ClaimIds over a store of IdClaims (ipam.store's protocol: create / delete / list / follow), with a
    view listed once and then kept by the store's watch (or by itself, for a store only it writes). `changed` is
    called when a claim of a network was made or freed by someone else: the node recompiles."""

    def __init__(self, store: Any, node: str, changed: Callable[[], object] = lambda: None) -> None:
        self.store = store
        self.node = node
        self.changed = changed
        self._view: dict[str, IdClaim] = {}
        self._listed = False
        self._lock = threading.Lock()

    def start(self, stop: threading.Event) -> None:
        threading.Thread(target=self.store.follow, args=(self._on_change, stop), name="tenant-ids", daemon=True).start()

    def _on_change(self, name: str, claim: IdClaim | None) -> None:
        with self._lock:
            before = self._view.get(name)
            if claim is None:
                self._view.pop(name, None)
            else:
                self._view[name] = claim
            self._listed = True
        if before != claim:
            self.changed()

    def _ensure_listed(self) -> None:
        with self._lock:
            if self._listed:
                return
        try:
            claims = self.store.list()
        except StoreUnavailable as e:
            raise ClaimUnavailable(str(e)) from None
        with self._lock:
            for c in claims:
                self._view.setdefault(c.name, c)
            self._listed = True

    def claims(self) -> list[IdClaim]:
        with self._lock:
            return sorted(self._view.values(), key=lambda c: (c.profile, c.vni_type, c.vni))

    def _held_by(self, network: str, uid: str) -> list[IdClaim]:
        with self._lock:
            return [c for c in self._view.values() if _same(c, network, uid)]

    def claim(self, network: str, uid: str, profiles: Sequence[Profile]) -> tuple[Profile, int]:
        """The profile and id held for `network` (namespace/name; uid of its object, if any): the one it has, or
        the lowest free id of the first profile that has one. Exhausted; ClaimUnavailable."""
        self._ensure_listed()
        held = self._held_by(network, uid)
        for stale in (c for c in held if not _fits(profiles, c)):
            self._free(stale, "no longer in the network's profiles")  # its device or the config changed
        mine = [c for c in held if _fits(profiles, c)]
        if mine:
            mine.sort(key=lambda c: _order(profiles, c))
            for extra in mine[1:]:
                self._free(extra, "a second id of the same network")
            keep = mine[0]
            return next(p for p in profiles if p.name == keep.profile and p.vni_type == keep.vni_type), keep.vni
        for p in profiles:
            assert p.vni_type is not None
            for vni in p.ids():
                name = id_claim_name(p.name, p.vni_type, vni)
                with self._lock:
                    holder = self._view.get(name)
                if holder is not None:
                    if _same(holder, network, uid):
                        return p, vni
                    continue
                want = IdClaim(name, p.name, p.vni_type, vni, network, uid, self.node)
                try:
                    got = self.store.create(want)
                except Taken as t:
                    held_by = t.holder if isinstance(t.holder, IdClaim) else None
                    if held_by is None:
                        # Taken, but by whom the store could not say: going on would give this network a second
                        # id if the holder is this network's (another node's claim): try again later instead.
                        raise ClaimUnavailable(f"{name} is taken and its holder cannot be read now") from None
                    with self._lock:
                        self._view[name] = held_by
                    if _same(held_by, network, uid):
                        return p, vni
                    continue
                except StoreUnavailable as e:
                    raise ClaimUnavailable(str(e)) from None
                with self._lock:
                    self._view[name] = got
                log.info("tenant network %s: %s %d of %s claimed", network, p.vni_type, vni, p.name)
                return p, vni
        raise Exhausted(network)

    def _free(self, c: IdClaim, why: str) -> bool:
        try:
            gone = bool(self.store.delete(c))
        except StoreUnavailable as e:
            log.warning("cannot free %s %d of %s (%s): %s", c.vni_type, c.vni, c.profile, why, e)
            return False
        with self._lock:
            if self._view.get(c.name) == c:
                del self._view[c.name]
        if gone:
            log.info("tenant network %s: %s %d of %s freed (%s)", c.network, c.vni_type, c.vni, c.profile, why)
        return gone

    def release_gone(self, gone: Callable[[IdClaim], bool]) -> list[IdClaim]:
        """Free the claims whose network `gone` says no longer exists."""
        try:
            self._ensure_listed()
        except ClaimUnavailable:
            return []
        return [c for c in self.claims() if gone(c) and self._free(c, "its network is gone")]


def _same(c: IdClaim, network: str, uid: str) -> bool:
    """Whether the claim is this network's: the same namespace/name, and the same object when both know its uid
    (a TenantNetwork deleted and made again under its name is another network, whose old claim is freed)."""
    return c.network == network and (not uid or not c.network_uid or c.network_uid == uid)


def _fits(profiles: Iterable[Profile], c: IdClaim) -> bool:
    return any(
        p.name == c.profile and p.vni_type == c.vni_type and any(lo <= c.vni <= hi for lo, hi in p.ranges)
        for p in profiles
    )
