"""A network's address pool, as its compiled conflist names it (`netcomp.pool`), and the names of address claims.

A pool holds one range set per address family, as host-local gives one address of each. A range is a subnet with
host-local's default bounds, less its gateway, what it excludes and what is no unicast address (NOT_UNICAST)."""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import json
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPInterface = ipaddress.IPv4Interface | ipaddress.IPv6Interface
T = TypeVar("T")
# Space no container is given an address in: "this network" (0/8, the unspecified address in it), loopback,
# multicast, and class E with the limited broadcast (RFC 6890); IPv6's unspecified, loopback and multicast.
NOT_UNICAST: tuple[IPNetwork, ...] = tuple(
    ipaddress.ip_network(n)
    for n in ("0.0.0.0/8", "127.0.0.0/8", "224.0.0.0/4", "240.0.0.0/4", "::/128", "::1/128", "ff00::/8")
)


@dataclass(frozen=True, slots=True)
class Range:
    subnet: IPNetwork
    first: int  # as an integer, both ends included
    last: int
    gateway: IPAddress | None
    exclude: tuple[IPNetwork, ...]

    @staticmethod
    def parse(doc: Mapping[str, Any]) -> Range:
        subnet = ipaddress.ip_network(str(doc["subnet"]))
        first = int(subnet.network_address) + 1
        last = int(subnet.broadcast_address) - (1 if subnet.version == 4 else 0)
        if doc.get("rangeStart"):
            first = int(ipaddress.ip_address(str(doc["rangeStart"])))
        if doc.get("rangeEnd"):
            last = int(ipaddress.ip_address(str(doc["rangeEnd"])))
        gw = ipaddress.ip_address(str(doc["gateway"])) if doc.get("gateway") else None
        given = [ipaddress.ip_network(str(e)) for e in doc.get("exclude") or []]
        holes = [n for n in NOT_UNICAST if n.version == subnet.version and n.overlaps(subnet)]
        # Merged: size() counts each excluded address once.
        merged: list[Any] = [*given, *holes]  # of the subnet's family, which collapse_addresses needs
        exclude = tuple(ipaddress.collapse_addresses(merged))
        return Range(subnet, first, last, gw, exclude)

    def usable(self, value: int) -> bool:
        if not self.first <= value <= self.last:
            return False
        # By the subnet's family: ip_address() takes a small integer for IPv4 even in an IPv6 subnet (::/96).
        addr = ipaddress.IPv6Address(value) if self.subnet.version == 6 else ipaddress.IPv4Address(value)
        if self.gateway is not None and addr == self.gateway:
            return False
        return not any(addr in e for e in self.exclude)

    @property
    def size(self) -> int:
        """How many addresses it hands out."""
        n = self.last - self.first + 1
        if self.gateway is not None and self.first <= int(self.gateway) <= self.last:
            n -= 1
        for e in self.exclude:
            lo, hi = max(self.first, int(e.network_address)), min(self.last, int(e.broadcast_address))
            if lo <= hi:
                n -= hi - lo + 1 - (1 if self.gateway is not None and lo <= int(self.gateway) <= hi else 0)
        return max(0, n)

    def address(self, value: int) -> IPAddress:
        return ipaddress.IPv4Address(value) if self.subnet.version == 4 else ipaddress.IPv6Address(value)


@dataclass(frozen=True, slots=True)
class Pool:
    network: str  # the network's name on the node (a namespaced one's: namespace.name)
    sets: tuple[tuple[Range, ...], ...]  # one per address family
    block_size: int | None = None  # as the intent says (None: blocks.size() picks); 1: a claim per address

    @staticmethod
    def of(network: str, conflist: Mapping[str, Any]) -> Pool | None:
        """The pool a compiled conflist names, or None when its addresses are not netcomp's to give."""
        doc = (conflist.get("netcomp") or {}).get("pool")
        if not isinstance(doc, Mapping) or doc.get("type") != "cluster":
            return None
        return _parsed(network, json.dumps(doc, sort_keys=True, default=str))

    @property
    def per_address(self) -> bool:
        """Its addresses are claimed one object each (blockSize 1), not from blocks."""
        return self.block_size == 1

    def size(self, family_set: int = 0) -> int:
        return sum(r.size for r in self.sets[family_set])

    def describe(self, family_set: int = 0) -> str:
        return ", ".join(str(r.subnet) for r in self.sets[family_set])

    def subnets(self) -> str:
        """Every range set's subnets, for a message."""
        return ", ".join(self.describe(i) for i in range(len(self.sets))) or "no ranges"

    def candidates(self, family_set: int, seed: str) -> Iterator[tuple[Range, IPAddress]]:
        """Every address of a range set once, from where `seed` says (spread)."""
        for r, pos in spread([(r, r.last - r.first + 1) for r in self.sets[family_set]], seed):
            if r.usable(r.first + pos):
                yield r, r.address(r.first + pos)

    def range_of(self, address: IPAddress) -> Range | None:
        """The range that hands `address` out (inside its rangeStart..rangeEnd, not its gateway, not excluded)."""
        for rs in self.sets:
            for r in rs:
                if address in r.subnet and r.usable(int(address)):
                    return r
        return None

    def range_for(self, address: IPAddress) -> Range | None:
        """The range whose subnet holds `address` (its prefix length and gateway)."""
        return next((r for rs in self.sets for r in rs if address in r.subnet), None)

    def reservable(self, address: IPAddress) -> str | None:
        """Why `address` cannot be claimed exactly (None: it can): a pod may ask for any host address of the
        network's subnet, inside the range handed out or not (DANM's static addresses, Multus's `ips` outside a
        dynamic range), except the subnet's own network and broadcast address, the gateway and what is excluded."""
        r = self.range_for(address)
        if r is None:
            return "outside its subnets"
        net = r.subnet
        if net.prefixlen < net.max_prefixlen - 1 and (
            address == net.network_address or (net.version == 4 and address == net.broadcast_address)
        ):
            return f"the {'network' if address == net.network_address else 'broadcast'} address of {net}"
        if r.gateway is not None and address == r.gateway:
            return "its gateway"
        if any(address in e for e in r.exclude):
            return "excluded from it"
        return None


@functools.lru_cache(maxsize=256)
def _parsed(network: str, text: str) -> Pool:
    """Pool.of's pool, parsed once per network and pool document (an ADD asks for it per attachment, several times)."""
    doc = json.loads(text)
    size = doc.get("blockSize")
    return Pool(
        network,
        tuple(tuple(Range.parse(r) for r in rs) for rs in doc.get("ranges") or []),
        size if isinstance(size, int) and size > 0 else None,
    )


def spread(spans: Sequence[tuple[T, int]], seed: str) -> Iterator[tuple[T, int]]:
    """Every position of the spans, (its span's item, its index there), once, starting at an offset that depends
    on `seed`: nodes claiming from one pool at once mostly start apart, so they seldom reach for the same one."""
    total = sum(n for _, n in spans)
    start = zlib.crc32(seed.encode()) % total if total > 0 else 0
    for i in range(total):
        pos = (start + i) % total
        for item, n in spans:
            if pos < n:
                yield item, pos
                break
            pos -= n


def claim_name(network: str, address: IPAddress) -> str:
    """The name of the claim of `address` in `network`: a DNS subdomain (what Kubernetes takes as an object's
    name) that no other (network, address) pair has: network names are DNS labels (no dots; a namespaced one is
    `namespace.name`), the address is tagged with its family and spelled with '-' ("v4-10-0-0-5", "v6-fd00--5")."""
    text = str(address).replace(".", "-").replace(":", "-")
    return f"{network.replace('/', '.')}.v{address.version}-{text}".lower()


def network_label(network: str) -> str:
    """The value of the netcomp.io/network label of a network's objects (what a node selects its objects by): its
    name, dots for the namespace's slash; a name longer than a label value may be (63) is hashed."""
    text = network.replace("/", ".").lower()
    return text if len(text) <= 63 else "h-" + hashlib.sha256(text.encode()).hexdigest()[:40]
