"""This module holds what the policies that select a pod come to on the node, in the form the pod's nftables table
is written from (nft.py): for each interface of the pod that a policy isolates, what may pass in each direction.
It knows nothing of Kubernetes: the policies, their selectors and their peers are resolved to addresses and
ports before they get here (resolve.py)."""

from __future__ import annotations

from dataclasses import dataclass
from ipaddress import IPv4Network, IPv6Network

Net = IPv4Network | IPv6Network
PROTOCOLS = ("tcp", "udp", "sctp")


@dataclass(frozen=True, slots=True, order=True)
class Ports:
    """A port or a range of ports (`first` to `last`, both in) of one protocol."""

    protocol: str  # one of PROTOCOLS
    first: int
    last: int

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS or not 1 <= self.first <= self.last <= 65535:
            raise ValueError(f"not a port range: {self.protocol} {self.first}-{self.last}")


@dataclass(frozen=True, slots=True)
class Allow:
    """What one rule lets pass: traffic from (ingress) or to (egress) `peers` on `ports`. `peers` None: any
    address; an empty tuple: none (a selector that selects no pod yet). `ports` empty: every port of every
    protocol."""

    peers: tuple[Net, ...] | None
    ports: tuple[Ports, ...] = ()


@dataclass(frozen=True, slots=True)
class InterfaceRules:
    """One interface of the pod: a direction that is None is not isolated (everything passes); a tuple isolates
    it, and only what one of its Allows lets through passes (an empty tuple: nothing but what every interface
    needs, nft.py says what). `policies`: `namespace/name` of each policy that selects the pod for the
    interface's network, for people (explain, the table's comments)."""

    ifname: str
    network: str
    ingress: tuple[Allow, ...] | None
    egress: tuple[Allow, ...] | None
    policies: tuple[str, ...] = ()

    @property
    def isolated(self) -> bool:
        return self.ingress is not None or self.egress is not None


@dataclass(frozen=True, slots=True)
class PodRules:
    """Every isolated interface of one pod, in the order of its interfaces; none: the pod needs no table (nft.py
    removes the one it has)."""

    interfaces: tuple[InterfaceRules, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.interfaces)
