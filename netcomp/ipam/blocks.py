"""A pool in blocks: which blocks a pool has, which addresses of a block are handed out, and a block's name. Each
range set is split into aligned CIDRs of the network's block size, inside its range's subnet as Calico's IPAM blocks
are in an IP pool (libcalico-go/lib/ipam/ipam_block.go). The module is pure: it claims nothing.

A block's name derives from (network, block), so the API server's refusal of a second object of a name is the lock
on it."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from dataclasses import dataclass, field

from netcomp.ipam.pool import IPAddress, IPNetwork, Pool, Range, claim_name, spread

SMALLEST, LARGEST = 4, 64  # the default's bounds: a small pool still splits, a /16 makes blocks of 64
MAX_SIZE = 4096  # the largest blockSize an intent may give (intent/model.py): no block is larger


def block_size(pool: Pool, family_set: int) -> int:
    """Addresses per block: the network's blockSize, else about a sixteenth of what the range set hands out
    (a power of two between SMALLEST and LARGEST), so that a /27 shared by a few nodes has blocks for each and a
    /16 is not thousands of objects."""
    if pool.block_size:
        return pool.block_size
    span = sum(max(0, r.last - r.first + 1) for r in pool.sets[family_set])
    want = max(1, span // 16)
    return min(LARGEST, max(SMALLEST, 1 << (want.bit_length() - 1)))


def block_name(network: str, net: IPNetwork) -> str:
    """A block's object name: its first address's claim name and its prefix (`storage.v4-10-10-0-16-28`)."""
    return f"{claim_name(network, net.network_address)}-{net.prefixlen}"


def parse_block_name(network: str, name: str) -> IPNetwork | None:
    """The block a name of one of the network's blocks is (block_name read back); None for any other name."""
    head = f"{network.replace('/', '.')}.v".lower()
    version, _, rest = name[len(head) :].partition("-") if name.startswith(head) else ("", "", "")
    text, _, prefix = rest.rpartition("-")
    if version not in ("4", "6") or not prefix.isdigit() or len(name) > 253:
        return None
    try:
        net = ipaddress.ip_network(f"{text.replace('-', '.' if version == '4' else ':')}/{prefix}")
    except ValueError:
        return None
    return net if block_name(network, net) == name else None


@dataclass(slots=True)
class Layout:
    """The blocks of one range set of a pool."""

    pool: Pool
    family_set: int
    size: int = 0
    _usable: dict[IPNetwork, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.size = block_size(self.pool, self.family_set)

    @property
    def ranges(self) -> tuple[Range, ...]:
        return self.pool.sets[self.family_set]

    def _prefix(self, r: Range) -> int:
        return max(r.subnet.prefixlen, r.subnet.max_prefixlen - (self.size.bit_length() - 1))

    def block_of(self, address: IPAddress) -> IPNetwork | None:
        """The block an address of this set's subnets is in (None: in none of them)."""
        r = next((r for r in self.ranges if address in r.subnet), None)
        if r is None:
            return None
        return ipaddress.ip_network(f"{address}/{self._prefix(r)}", strict=False)

    def usable(self, net: IPNetwork) -> int:
        """The block's offsets handed out dynamically, as bits (bit i: the block's i-th address); none for a net
        larger than any block. From the ranges' bounds, gateways and exclusions: never a walk over addresses."""
        got = self._usable.get(net)
        if got is None:
            got = 0 if net.num_addresses > MAX_SIZE else _usable_bits(net, self.ranges)
            if len(self._usable) > 4096:  # a bound: blocks seen again are computed again
                self._usable.clear()
            self._usable[net] = got
        return got

    def blocks(self, seed: str) -> Iterator[IPNetwork]:
        """Every block that hands out at least one address, each once per range that reaches it, from where `seed`
        says (pool.spread), lazily (a large IPv6 range has more blocks than could be listed)."""
        spans = []
        for r in self.ranges:
            bits = r.subnet.max_prefixlen - self._prefix(r)
            lo, hi = r.first >> bits, r.last >> bits
            if hi >= lo:
                spans.append(((r, bits, lo), hi - lo + 1))
        for (r, bits, lo), pos in spread(spans, seed):
            net = ipaddress.ip_network(f"{r.address((lo + pos) << bits)}/{r.subnet.max_prefixlen - bits}")
            if _usable_bits(net, self.ranges):  # not kept in _usable: a walk may pass thousands of blocks
                yield net


def _span(base: int, size: int, lo: int, hi: int) -> int:
    """The bits of the offsets [lo, hi] (addresses as integers) inside a block of `size` from `base`."""
    lo, hi = max(lo, base), min(hi, base + size - 1)
    return ((1 << (hi - lo + 1)) - 1) << (lo - base) if lo <= hi else 0


def _usable_bits(net: IPNetwork, ranges: tuple[Range, ...]) -> int:
    base, size = int(net.network_address), net.num_addresses
    got = 0
    for r in ranges:
        if r.subnet.version != net.version or not net.subnet_of(r.subnet):  # type: ignore[arg-type]
            continue
        bits = _span(base, size, r.first, r.last)
        if r.gateway is not None:
            bits &= ~_span(base, size, int(r.gateway), int(r.gateway))
        for e in r.exclude:
            bits &= ~_span(base, size, int(e.network_address), int(e.broadcast_address))
        got |= bits
    return got


def set_bits(bits: int) -> Iterator[int]:
    """The offsets of the set bits, lowest first: as many steps as bits set, whatever the block's size."""
    while bits:
        low = bits & -bits
        yield low.bit_length() - 1
        bits ^= low


def lowest(bits: int, after: int = 0) -> int:
    """The lowest set bit at or after `after`, wrapping around to the lowest of all (-1: none set)."""
    if not bits:
        return -1
    high = bits >> after << after
    x = high or bits
    return (x & -x).bit_length() - 1
