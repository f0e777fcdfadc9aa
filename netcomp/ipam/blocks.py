"""A pool in blocks: each range set split into aligned CIDRs of the network's block size (the last bits of an
address are its offset in its block), a block held by one node at a time. Pure: which blocks a pool has, which
addresses of a block are handed out, a block's name.

Blocks are aligned inside their range's subnet, as Calico's IPAM blocks are in an IP pool
(libcalico-go/lib/ipam/ipam_block.go): a subnet smaller than a block is one block. A block's name derives from
(network, block), so the API server's refusal of a second object of a name is the lock on it."""

from __future__ import annotations

import ipaddress
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field

from netcomp.ipam.pool import IPAddress, IPNetwork, Pool, Range

SMALLEST, LARGEST = 4, 64  # the default's bounds: a small pool still splits, a /16 makes blocks of 64


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
    """The object name of a network's block: a DNS subdomain no other (network, block) has (network names have
    no dots but a namespaced one's, which is `namespace.name`): `storage.v4-10-10-0-16-28`."""
    text = str(net.network_address).replace(".", "-").replace(":", "-")
    return f"{network.replace('/', '.')}.v{net.version}-{text}-{net.prefixlen}".lower()


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
        """The block's offsets handed out dynamically, as bits (bit i: the block's i-th address)."""
        got = self._usable.get(net)
        if got is None:
            base = int(net.network_address)
            rs = [r for r in self.ranges if net.subnet_of(r.subnet)]  # type: ignore[arg-type]
            got = 0
            for off in range(net.num_addresses):
                if any(r.usable(base + off) for r in rs):
                    got |= 1 << off
            if len(self._usable) > 4096:  # a bound: blocks seen again are computed again
                self._usable.clear()
            self._usable[net] = got
        return got

    def blocks(self, seed: str) -> Iterator[IPNetwork]:
        """Every block that hands out at least one address, each once per range that reaches it, starting at an
        offset that depends on `seed` (nodes claiming at once mostly reach for different blocks), lazily (a
        large IPv6 range has more blocks than could be listed)."""
        spans = []
        for r in self.ranges:
            bits = r.subnet.max_prefixlen - self._prefix(r)
            lo, hi = r.first >> bits, r.last >> bits
            if hi >= lo:
                spans.append((r, bits, lo, hi - lo + 1))
        total = sum(n for *_, n in spans)
        if total == 0:
            return
        start = zlib.crc32(seed.encode()) % total
        for i in range(total):
            pos = (start + i) % total
            for r, bits, lo, n in spans:
                if pos < n:
                    net = ipaddress.ip_network(f"{r.address((lo + pos) << bits)}/{r.subnet.max_prefixlen - bits}")
                    if self.usable(net):
                        yield net
                    break
                pos -= n

    def offset(self, net: IPNetwork, address: IPAddress) -> int:
        return int(address) - int(net.network_address)

    @staticmethod
    def address(net: IPNetwork, offset: int) -> IPAddress:
        return net.network_address + offset


def lowest(bits: int, after: int = 0) -> int:
    """The lowest set bit at or after `after`, wrapping around to the lowest of all (-1: none set)."""
    if not bits:
        return -1
    high = bits >> after << after
    x = high or bits
    return (x & -x).bit_length() - 1
