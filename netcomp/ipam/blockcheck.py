"""What an AddressBlock's record may claim, checked before a node takes any of it: anyone with the credentials may
have written it, so it is input, not truth (docs/reliability.md, the trust model). An object whose name does not
agree with its network and CIDR is forged and ignored whole; inside a block, entries about no address of it, or not
in its canonical spelling, are ignored and the rest is taken. Every check is linear in what the object holds and
builds no integer wider than the block."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any, TypeGuard

from netcomp import foreign
from netcomp.ipam.blocks import MAX_SIZE, Layout, block_name
from netcomp.ipam.blockstate import BlockRecord
from netcomp.ipam.pool import IPAddress, IPNetwork, Pool
from netcomp.ipam.store import holder_ok
from netcomp.names import is_dns_subdomain

KIND = "AddressBlock"  # what foreign.ignore counts them as
_SHOWN = 3  # bad keys quoted in a reason


def address_in(net: IPNetwork, text: object) -> IPAddress | None:
    """`text` as an address of `net`, when it is one spelled canonically (str(address)): two spellings of one
    address would be two entries for it. None otherwise. Linear in the text (ipaddress parses no more than an
    address's length before refusing)."""
    if not isinstance(text, str) or len(text) > 45:  # the longest IPv6 text (with an embedded IPv4 tail)
        return None
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        return None
    if addr.version != net.version or addr not in net or str(addr) != text:
        return None
    return addr


def identity(name: str, network: object, cidr: object) -> tuple[IPNetwork | None, str]:
    """The block an object's name, network and CIDR agree on, or None and why not."""
    if not isinstance(network, str) or not network or len(network) > 253:
        return None, "its network is not a network's name"
    if not isinstance(cidr, str) or len(cidr) > 64:
        return None, "its cidr is not a CIDR"
    try:
        net = ipaddress.ip_network(cidr)  # strict: host bits set is no block
    except ValueError:
        return None, f"its cidr {cidr!r} is not a CIDR"
    if str(net) != cidr:
        return None, f"its cidr {cidr!r} is not spelled as {net}"
    if net.num_addresses > MAX_SIZE:
        return None, f"its cidr {cidr} is larger than any block ({MAX_SIZE} addresses)"
    want = block_name(network, net)
    if name != want:
        return None, f"its name is not {want}, the name of block {cidr} of network {network!r}: forged"
    return net, ""


def entries(net: IPNetwork, got: object, what: str, problems: list[str]) -> dict[str, dict[str, Any]]:
    """The entries of `used` or `lent` that are about addresses of the block (a mapping each), at most the
    block's size of them; what was left out is said in `problems`."""
    if not _mapping(got, f"its {what} is", problems):
        return {}
    out: dict[str, dict[str, Any]] = {}
    bad, shown = 0, list[str]()
    for key, doc in got.items():
        full = len(out) >= net.num_addresses  # more than the block has: cannot all be its addresses
        if not full and isinstance(doc, dict) and address_in(net, key) is not None and _holder_ok(doc, what):
            out[key] = doc
            continue
        bad += 1
        if len(shown) < _SHOWN:
            shown.append(repr(key[:48]) if isinstance(key, str) else type(key).__name__)
    if bad:
        more = f" and {bad - len(shown)} more" if bad > len(shown) else ""
        problems.append(f"{what} entries {', '.join(shown)}{more} are not addresses of {net} with a holder")
    return out


_TEXT = ("containerID", "interface", "node", "request")


def _mapping(got: object, what: str, problems: list[str]) -> TypeGuard[Mapping[Any, Any]]:
    """Whether `got` is a mapping; when it is neither one nor absent, `problems` says `what` is not."""
    if got is not None and not isinstance(got, Mapping):
        problems.append(f"{what} not a mapping")
    return isinstance(got, Mapping)


def _holder_ok(doc: dict[str, Any], what: str) -> bool:
    """A used or lent entry as store.holder_doc writes it; a lent one names its node."""
    return holder_ok(doc, _TEXT) and (what != "lent" or is_dns_subdomain(doc.get("node")))


def requests(net: IPNetwork, got: object, problems: list[str]) -> dict[str, dict[str, Any]]:
    """The requests of other nodes on the block: each names its node and asks for addresses of the block only
    (exact ones, or any one), at most the block's size of them."""
    if not _mapping(got, "its requests are", problems):
        return {}
    out: dict[str, dict[str, Any]] = {}
    bad, room = 0, net.num_addresses  # every request's exact addresses together: no more than the block has
    for key, doc in got.items():
        ok = isinstance(key, str) and len(key) <= 300 and isinstance(doc, dict) and len(out) < net.num_addresses
        ok = ok and is_dns_subdomain(doc.get("node"))
        asked = doc.get("addresses") if ok else None
        fits = isinstance(asked, list) and len(asked) <= room and all(address_in(net, a) for a in asked)
        if ok and (asked is None or fits):
            out[key] = doc
            room -= len(asked) if isinstance(asked, list) else 0
        else:
            bad += 1
    if bad:
        problems.append(f"{bad} requests that name no node or ask for addresses outside {net} or beyond its size")
    return out


def fit(net: IPNetwork, pool: Pool) -> tuple[bool, str]:
    """Whether a block is one of the pool's: (True, "") a block of the network's size in one of its range
    sets' subnets; (False, "") in a subnet but of another size (a block held since the network's blockSize
    changed: it holds its place, nothing is taken from it); (False, why) not in the pool at all."""
    for i, ranges in enumerate(pool.sets):
        for r in ranges:
            if r.subnet.version == net.version and net.subnet_of(r.subnet):  # type: ignore[arg-type]
                lay = Layout(pool, i)
                return lay.block_of(net.network_address) == net, ""
    return False, f"{net} is in no subnet of network {pool.network!r} ({pool.subnets()})"


def offsets(rec: BlockRecord, entries: Mapping[str, Any]) -> dict[int, Any]:
    """A record's entries by their offset in its block (those about no address of it left out)."""
    net = rec.net
    base = int(net.network_address)
    return {int(a) - base: doc for text, doc in entries.items() if (a := address_in(net, text)) is not None}


def bits(rec: BlockRecord, entries: Mapping[str, Any]) -> int:
    """The offsets of a record's entries as bits: never wider than its block."""
    return sum(1 << off for off in offsets(rec, entries))


def report(rec: BlockRecord, why: str) -> None:
    """A block ignored for what it claims, named with its writers (foreign.ignore: once per version)."""
    managers = [{"manager": m} for m in rec.writers]
    foreign.ignore(KIND, rec.name, why, {"metadata": {"resourceVersion": rec.rv, "managedFields": managers}})
