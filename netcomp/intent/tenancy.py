"""DANM's TenantConfig, and what DANM's admission webhook did with it to a TenantNetwork, done at compile time: the
admin's TenantConfig supplies the device, the VLAN or VXLAN id and the NetworkID a tenant leaves out. The rules
are in docs/kubernetes.md, "TenantConfig"."""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from netcomp.errors import Diagnostic
from netcomp.intent.source import Document

KIND = "TenantConfig"
DYNAMIC = ("ipvlan", "macvlan", "sriov")
VNI_MAX = {"vlan": 4094, "vxlan": 16777214}


@dataclass(frozen=True)
class Profile:
    """A device profile of a TenantConfig: a host device (or an SR-IOV device pool, a name with `/`) and the
    range of VLAN or VXLAN ids its tenants' networks get."""

    name: str
    vni_type: str | None = None  # vlan, vxlan
    ranges: tuple[tuple[int, int], ...] = ()  # inclusive

    def ids(self) -> Iterator[int]:
        """The ids in order, one at a time (a VXLAN range may hold sixteen million)."""
        for lo, hi in self.ranges:
            yield from range(lo, hi + 1)

    def describe(self) -> str:
        spans = ",".join(f"{lo}-{hi}" if hi > lo else str(lo) for lo, hi in self.ranges)
        return f"{self.name} ({self.vni_type} {spans})" if self.vni_type else self.name


@dataclass(frozen=True)
class TenantConfig:
    name: str
    source: str  # its file, for messages
    profiles: tuple[Profile, ...] = ()
    network_ids: tuple[tuple[str, str], ...] = ()  # (NetworkType, NetworkID), in order

    def network_id(self, network_type: str) -> str | None:
        return next((nid for t, nid in self.network_ids if t.lower() == network_type.lower()), None)


@dataclass(frozen=True)
class Completion:
    """What the TenantConfig gives a TenantNetwork: the values put into its Options and spec."""

    config: str
    host_device: str | None = None  # set unless the tenant named a device
    vni_type: str | None = None
    vni: int | None = None
    network_id: str | None = None


class Exhausted(Exception):
    """No id left in the profiles' ranges."""


# claim(network "ns/name", uid, the profiles to try in order) -> (the profile, the id) held for that network.
# Raises Exhausted, or ClaimUnavailable (the store cannot be reached).
ClaimIds = Callable[[str, str, Sequence[Profile]], tuple[Profile, int]]


class ClaimUnavailable(Exception):
    """The store of claims cannot be reached: nothing was claimed."""


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def is_tenant_config(data: Any) -> bool:
    return isinstance(data, dict) and data.get("kind") == KIND and str(data.get("apiVersion", "")).startswith("danm")


def parse_config(doc: Document) -> tuple[TenantConfig | None, list[Diagnostic]]:
    """A TenantConfig document, checked as DANM's webhook checked it (with positions)."""
    data = doc.data
    diags: list[Diagnostic] = []
    meta = _dict(data.get("metadata"))
    name = str(meta.get("name") or "")
    if not name:
        diags.append(doc.diagnostic("missing required key 'name'", ("metadata",) if meta else ()))
    for k in data:
        if k not in ("apiVersion", "kind", "metadata", "hostDevices", "networkIds", "status"):
            diags.append(doc.diagnostic(f"unknown key {k!r} ignored", (k,), key=True, severity="warning"))
    devices, ids = data.get("hostDevices") or [], data.get("networkIds") or {}
    if not devices and not ids:
        where = next(((k,) for k in ("hostDevices", "networkIds") if k in data), ())
        diags.append(doc.diagnostic("either hostDevices, or networkIds must be provided", where, key=True))
    profiles = []
    if not isinstance(devices, list):
        diags.append(doc.diagnostic("hostDevices must be a list", ("hostDevices",)))
        devices = []
    for i, d in enumerate(devices):
        p = _profile(doc, d, ("hostDevices", i), diags)
        if p is not None:
            profiles.append(p)
    nids: list[tuple[str, str]] = []
    if not isinstance(ids, dict):
        diags.append(doc.diagnostic("networkIds must be a mapping of NetworkType to NetworkID", ("networkIds",)))
    else:
        for t, nid in ids.items():
            if isinstance(t, str) and t and isinstance(nid, str) and nid:
                nids.append((t, nid))
            else:
                why = "networkIds: NetworkType and NetworkID must be non-empty strings"
                diags.append(doc.diagnostic(why, ("networkIds", t)))
    if any(d.is_error for d in diags):
        return None, diags
    return TenantConfig(name, doc.source.name, tuple(profiles), tuple(nids)), diags


def _profile(doc: Document, d: Any, loc: tuple[Any, ...], diags: list[Diagnostic]) -> Profile | None:
    if not isinstance(d, dict) or not isinstance(d.get("name"), str) or not d["name"]:
        diags.append(doc.diagnostic("a host device profile needs a name", loc))
        return None
    for k in d:
        if k == "alloc":
            why = "alloc: ignored: DANM's allocation bitmap; netcomp keeps a claim per id"
        elif k not in ("name", "vniType", "vniRange"):
            why = f"unknown key {k!r} ignored"
        else:
            continue
        diags.append(doc.diagnostic(why, (*loc, k), key=True, severity="warning"))
    vtype, vrange = d.get("vniType"), d.get("vniRange")
    if (vtype is None) != (vrange is None):
        diags.append(doc.diagnostic("vniType and vniRange must be provided together", loc, key=True))
        return None
    if vtype is None:
        return Profile(d["name"])
    if vtype not in VNI_MAX:
        diags.append(doc.diagnostic(f"vniType must be vlan or vxlan, not {vtype!r}", (*loc, "vniType")))
        return None
    ranges = _ranges(str(vrange), VNI_MAX[vtype])
    if isinstance(ranges, str):
        diags.append(doc.diagnostic(f"vniRange: {ranges}", (*loc, "vniRange")))
        return None
    return Profile(d["name"], vtype, ranges)


def _ranges(text: str, top: int) -> tuple[tuple[int, int], ...] | str:
    """DANM's cpuset syntax: "2000-2500,2601,2650-2700"; each id 1..top."""
    out = []
    for part in (p.strip() for p in text.split(",")):
        lo, dash, hi = part.partition("-")
        try:
            a, b = int(lo), int(hi) if dash else int(lo)
        except ValueError:
            return f"{text!r} is not a list of ids and ranges such as 700-710,900"
        if not 1 <= a <= b <= top:
            return f"{part!r}: ids are 1 to {top}, low to high"
        out.append((a, b))
    return tuple(out)


def pick_config(configs: Sequence[tuple[TenantConfig, Document]]) -> tuple[TenantConfig | None, list[Diagnostic]]:
    """The TenantConfig in use: the first by name, as DANM takes the first it lists; the others are warned of."""
    if not configs:
        return None, []
    ordered = sorted(configs, key=lambda c: c[0].name)
    used = ordered[0][0]
    return used, [
        doc.diagnostic(
            f"TenantConfig {c.name!r} is not used: only one is, {used.name!r} (the first by name)",
            ("metadata", "name"),
            severity="warning",
        )
        for c, doc in ordered[1:]
    ]


def dry_claims() -> ClaimIds:
    """A ClaimIds for compiling away from the node (`netcomp validate`, `netcomp compile` without a daemon): ids
    given in the order networks are compiled, distinct within the one compile, claimed nowhere."""
    taken: dict[tuple[str, str, int], str] = {}

    def claim(network: str, uid: str, profiles: Sequence[Profile]) -> tuple[Profile, int]:
        for p in profiles:
            for vni in p.ids():
                holder = taken.setdefault((p.name, str(p.vni_type), vni), network)
                if holder == network:
                    return p, vni
        raise Exhausted(network)

    return claim


def complete(doc: Document, config: TenantConfig, claim: ClaimIds) -> tuple[Completion | None, list[Diagnostic]]:
    """What the TenantConfig gives a TenantNetwork (DANM's webhook mutation), its id through `claim` (the
    daemon's store, or dry_claims() away from the node)."""
    spec = _dict(doc.data.get("spec"))
    opts = _dict(spec.get("Options"))
    ntype = str(spec.get("NetworkType") or "ipvlan")
    meta = _dict(doc.data.get("metadata"))
    ref = f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"
    out = Completion(config.name, network_id=config.network_id(ntype))
    if ntype not in DYNAMIC or opts.get("vlan") or opts.get("vxlan"):
        return out, []  # a tenant's own vlan or vxlan is refused by the parser: nothing is claimed for it
    host, pool = opts.get("host_device"), opts.get("device_pool")
    where: tuple[Any, ...] = ("spec", "Options")

    def refused(message: str, loc: tuple[Any, ...] = where, key: bool = True) -> tuple[None, list[Diagnostic]]:
        return None, [doc.diagnostic(message, loc, key=key)]

    if pool or host:
        named = str(pool or host)
        key = "device_pool" if pool else "host_device"
        candidates = [p for p in config.profiles if p.name == named and (pool or "/" not in p.name)]
        if not candidates:
            why = f"{key} {named!r} is not allowed to be used by tenants"
            return refused(f"{why}: TenantConfig {config.name!r} has no such profile", (*where, key), key=False)
    else:
        if ntype == "sriov":
            return refused("Spec.Options.device_pool must be provided for SR-IOV networks")
        pool_free = [p for p in config.profiles if "/" not in p.name]
        if not pool_free:
            return refused(
                f"TenantConfig {config.name!r} has no suitable interface profiles (host devices) for this network"
            )
        start = zlib.crc32(ref.encode()) % len(pool_free)
        candidates = pool_free[start:] + pool_free[:start]
    if candidates[0].vni_type is None:
        chosen, vni = candidates[0], None
    else:
        with_ids = [p for p in candidates if p.vni_type]
        uid = str(meta.get("uid") or "")
        try:
            chosen, vni = claim(ref, uid, with_ids)
        except Exhausted:
            tried = "; ".join(p.describe() for p in with_ids)
            return refused(
                f"TenantConfig {config.name!r}: every id is taken on {tried}: whole range is already reserved"
            )
        except ClaimUnavailable as e:
            return refused(f"cannot claim an id for this TenantNetwork now: {e}")
    return Completion(
        config.name,
        host_device=None if (host or pool) else chosen.name,
        vni_type=chosen.vni_type if vni is not None else None,
        vni=vni,
        network_id=out.network_id,
    ), []
