"""The addresses an ADD takes from a network's pool (ipam: {type: cluster}) and gives back: claimed through the
allocator before any plugin runs, put into the conflist as the static IPAM plugin's addresses (so the cache
entry's conflist records exactly what the container got), and freed once the delegate's DEL succeeded."""

from __future__ import annotations

import copy
import ipaddress
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from netcomp.cni.codes import E_INVALID_CONFIG, E_TRY_LATER
from netcomp.errors import DelegateError
from netcomp.ipam.allocator import Holder
from netcomp.ipam.pool import IPAddress, Pool
from netcomp.ipam.store import AddressAllocator, Claim
from netcomp.names import is_dns_subdomain
from netcomp.pods import multus, naming
from netcomp.pods.multus import Ask
from netcomp.records.record import Attachment


def take(
    alloc: AddressAllocator | None,
    atts: list[Attachment],
    container_id: str,
    pod: str = "",
    pod_uid: str = "",
    asks: Mapping[str, Ask] | None = None,
) -> list[Claim]:
    """Claim an address of each address family for every attachment whose network has a pool (exactly the
    addresses its pod asks for, if any: `asks` by interface), record them on the attachment and in its conflist.
    On any failure what was claimed here is given back and the DelegateError raised (naming the pod's item when
    it was about an address it asked for)."""
    taken: list[Claim] = []
    try:
        for a in atts:
            pool = Pool.of(a.network, a.conflist)
            item = (asks or {}).get(a.ifname)
            if item is not None and item.ipam_claim is not None:
                uses = claimed(alloc, pool, a, item, item.ipam_claim, container_id, pod, pod_uid)
                a.claims = [c.to_doc() for c in uses]
                a.conflist = with_addresses(a.conflist, pool, uses) if pool is not None else a.conflist
                continue
            if pool is None:
                continue
            if alloc is None:
                raise DelegateError(E_INVALID_CONFIG, "this daemon has no address store", network=a.network)
            holder = Holder(container_id, a.ifname, pod, pod_uid)
            wanted = [ip.ip for ip in item.ips] if item is not None else []
            # Which families get an address: DANM's ip/ip6 say; Multus's `ips` asks for exactly those (as the
            # static IPAM plugin Multus hands them to gives no other); else every family the pool has.
            families = item.families if item is not None and item.families is not None else None
            if families is None and wanted:
                families = frozenset(w.version for w in wanted)
            claims = []
            for i, rs in enumerate(pool.sets):
                family = rs[0].subnet.version if rs else 0
                exact = next((w for w in wanted if w.version == family), None)
                if exact is None and families is not None and family not in families:
                    continue  # not asked for: no address of that family
                try:
                    claims.append(alloc.claim(pool, i, holder, exact))
                except DelegateError as e:
                    if item is None or exact is None:
                        raise
                    raise item.wrap(hidden(e, exact, a.network, pod.partition("/")[0] or None)) from None
                taken.append(claims[-1])
            a.claims = [c.to_doc() for c in claims]
            a.conflist = with_addresses(a.conflist, pool, claims)
    except BaseException:
        if alloc is not None and taken:
            alloc.release(taken, "rollback")
        raise
    return taken


def claimed(alloc: AddressAllocator | None, pool: Pool | None, a: Attachment, item: Ask, name: str,
            container_id: str, pod: str, pod_uid: str) -> list[Claim]:  # fmt: skip
    """The addresses the IPAMClaim `name` (of the pod's namespace) holds for the attachment: the pod's uses of
    them, never given back by its DEL (ipam/ipamclaims.py). Refused naming the item when the network gives no
    addresses from blocks of a cluster's pool, or when the claim may not be used."""
    persistent = alloc.persistent if alloc is not None else None
    if pool is None or pool.per_address or persistent is None:
        why = "its pool gives no addresses from blocks of a cluster (ipam: {type: cluster} with a cluster configured)"
        if pool is None:
            why = "its addresses are not netcomp's cluster IPAM's"
        raise item.error(f"ipam-claim-reference {name!r}: network {a.network!r} cannot honour an IPAMClaim: {why}")
    if not pod:
        raise item.error(f"ipam-claim-reference {name!r}: an IPAMClaim is a pod's (the runtime named no pod)")
    names = (a.network, str(a.conflist.get("name", "")), naming.display_name(a.network, a.conflist))
    try:
        got: list[Claim] = persistent.take(pool, names, a.ifname, f"{pod.partition('/')[0]}/{name}",
                                           (pod, pod_uid), container_id, create=item.own_claim)  # fmt: skip
    except DelegateError as e:
        raise item.wrap(e) from None
    return got


def own_claims(atts: list[Attachment], asks: dict[str, Ask], pod: naming.PodRef,
               fields: frozenset[str] | None = None) -> dict[str, Ask]:  # fmt: skip
    """The asks of a pod whose IPAM_CLAIMS annotation says "true": each of its elements on a cluster pool that
    names no claim and no address names its own, <pod>.<interface>, netcomp's to create; refused, as the
    element's reference is, where the node's `fields` (kubernetes.podFields) bar ipam-claim-reference."""
    out = dict(asks)
    for a in atts:
        ask = out.get(a.ifname)
        pool = Pool.of(a.network, a.conflist)
        if ask is None or ask.ipam_claim is not None or ask.ips or ask.kind is not None or pool is None:
            continue
        if fields is not None and "ipam-claim-reference" not in fields:
            raise ask.error(f"{multus.IPAM_CLAIMS}: 'ipam-claim-reference': not allowed on this node "
                            "(kubernetes.podFields)")  # fmt: skip
        name = f"{pod.name}.{a.ifname}"
        if not is_dns_subdomain(name):
            raise ask.error(f"{multus.IPAM_CLAIMS}: {name!r} is no IPAMClaim's name (the interface's name is not "
                            "lower case letters, digits and '-')")  # fmt: skip
        out[a.ifname] = replace(ask, ipam_claim=name, own_claim=True)
    return out


def holding(who: str, namespace: str | None) -> str:
    """How a pod of `namespace` is told that `who` (as Claim.holder says it) holds an address it asks for: by
    name only when it is a pod of the same namespace; another tenant's pods, and where they run, are not this
    one's to learn. `namespace` None: no pod asks (an operator's attach), and the holder is named."""
    if namespace is None or who.startswith(f"pod {namespace}/"):
        return f"held by {who}"
    return f"taken (not by a pod of namespace {namespace!r})"


def _address(addr: IPAddress, network: str) -> str:
    return f"address {addr} of network {network!r} is "


def hidden(e: DelegateError, addr: IPAddress, network: str, namespace: str | None) -> DelegateError:
    """The allocator's refusal of an address held by another (ipam/allocator.py and blockalloc.py word it
    "address A of network N is held by WHO"), with the holder named only as holding() allows."""
    prefix = _address(addr, network) + "held by "
    if not e.msg.startswith(prefix):
        return e
    return DelegateError(e.code, _address(addr, network) + holding(e.msg[len(prefix) :], namespace), e.details)


def check(
    alloc: AddressAllocator | None,
    atts: list[Attachment],
    container_id: str,
    namespace: str | None,
    asks: Mapping[str, Ask],
) -> None:
    """What take() would refuse of the addresses pods ask for that can be told without claiming anything: an
    address the cluster's claims, as this node knows them, give another container. A hot-plug checks this
    before it detaches anything; take() still decides."""
    if alloc is None:
        return
    for a in atts:
        item = asks.get(a.ifname)
        if item is None or not item.ips or Pool.of(a.network, a.conflist) is None:
            continue
        held = {c.address: c for c in alloc.claims(a.network) if c.container_id != container_id}
        for ip in item.ips:
            c = held.get(str(ip.ip))
            if c is not None:
                msg = _address(ip.ip, a.network) + holding(c.holder(), namespace)
                raise item.wrap(DelegateError(E_TRY_LATER, msg, "no plugin was run"))


def with_addresses(conflist: Mapping[str, Any], pool: Pool, claims: list[Claim]) -> dict[str, Any]:
    """The conflist with the claimed addresses (prefix length of their subnet, and its gateway) in the static
    IPAM section of its first plugin that has one."""
    addresses = []
    for c in claims:
        addr = ipaddress.ip_address(c.address)
        r = pool.range_for(addr)
        assert r is not None, "a claim is of its pool"
        entry: dict[str, Any] = {"address": f"{addr}/{r.subnet.prefixlen}"}
        if r.gateway is not None:
            entry["gateway"] = str(r.gateway)
        addresses.append(entry)
    conf = copy.deepcopy(dict(conflist))
    for p in conf.get("plugins") or []:
        ipam = p.get("ipam")
        if isinstance(ipam, dict) and ipam.get("type") == "static":
            if addresses:
                ipam["addresses"] = addresses
            else:
                del p["ipam"]  # no address asked for (DANM's ip: none): an L2 attachment
            break
    return conf


def claims_of(a: Attachment) -> list[Claim]:
    return [Claim.from_doc(c) for c in a.claims]


def give_back(alloc: AddressAllocator | None, a: Attachment, reason: str = "release") -> None:
    """Free the attachment's addresses (its delegate's DEL has succeeded); DelegateError 11 when the store is away,
    and they stay recorded for the next DEL."""
    if a.claims and alloc is not None:
        alloc.release(claims_of(a), reason)
        a.claims = []
