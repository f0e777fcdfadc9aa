"""What a block is, as its object records it (BlockRecord) and as a node keeps it: the compact form of the blocks of
its networks (Seen), the blocks it holds (Held), the addresses other nodes lent it (Borrowed), and its crash-safe
record of the blocks it holds (LocalRecord, a file beside the cache). It also says what a block store does."""

from __future__ import annotations

import ipaddress
import json
import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from netcomp.cni.spec import loads_foreign
from netcomp.errors import printable
from netcomp.fsutil import atomic_write, read_bounded
from netcomp.ipam.blocks import MAX_SIZE
from netcomp.ipam.pool import IPAddress, IPNetwork
from netcomp.ipam.store import Claim, holder_fields

log = logging.getLogger("netcomp.ipam")
RECORD_KIND = "netcompBlocksV1"


@dataclass(slots=True)
class BlockRecord:
    """A block as its object says, entries by address text. `used`: the holder's containers' addresses
    (store.holder_doc), written behind by the holder. `lent`: addresses lent to other nodes, {node, request} written
    by the holder, completed with the container by the borrower, removed by the borrower when it gives one back.
    `requests`: other nodes' asks, {node, addresses (exact ones; none: any one)}, removed by the holder's answer."""

    name: str
    network: str
    cidr: str
    node: str
    node_in_cluster: bool = False
    used: dict[str, dict[str, Any]] = field(default_factory=dict)
    lent: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: dict[str, dict[str, Any]] = field(default_factory=dict)
    uid: str = ""
    rv: str = ""
    created: float = 0.0
    writers: tuple[str, ...] = ()  # who wrote the object (its managedFields' managers), to name them
    token: str = ""  # the creating node's secret for this object (written ahead in its record): its proof of making it

    @property
    def net(self) -> IPNetwork:
        return ipaddress.ip_network(self.cidr)


def claim_of(rec: BlockRecord, address: str, doc: dict[str, Any], node: str) -> Claim:
    """A record's entry (store.holder_doc) as a claim (for show, GC and tests): `node` holds it."""
    return Claim(rec.name, rec.network, address, node, **holder_fields(doc), node_in_cluster=rec.node_in_cluster,
                 uid=rec.uid, created=rec.created, block=rec.name)  # fmt: skip


@dataclass(slots=True)
class Seen:
    """A block of a served network, as compact as allocation needs: its holder, which offsets its record says are
    used, and which are lent to whom."""

    name: str
    network: str
    net: IPNetwork
    owner: str
    uid: str
    rv: str
    used: int  # bits: offsets the record's `used` has
    lent: dict[int, str]  # offset -> the node it is lent to
    node_in_cluster: bool = False


@dataclass(slots=True)
class Held:
    """A block this node holds: what it gives from it (its containers' addresses, in its cache; those of ADDs in
    flight; those lent to other nodes, or being lent; those taken by an AddressClaim object) and what the
    block's record says of its containers (`written`, to write behind only what differs)."""

    name: str
    network: str
    family_set: int
    net: IPNetwork
    uid: str = ""
    local: dict[int, Claim] = field(default_factory=dict)
    pending: set[int] = field(default_factory=set)
    lent: dict[int, dict[str, Any]] = field(default_factory=dict)  # offset -> its entry in the record
    # offset -> [the record version a grant of it is made on, whether the watch has shown that version]
    lending: dict[int, list[Any]] = field(default_factory=dict)
    taken: set[int] = field(default_factory=set)
    written: dict[int, dict[str, Any]] = field(default_factory=dict)
    asked: dict[str, dict[str, Any]] = field(default_factory=dict)  # requests of other nodes on the record
    answered: set[str] = field(default_factory=set)  # those answered by a write the watch has not shown yet
    rv: str = ""
    watched: str = ""  # the last version the watch (or a list) showed; rv may be newer, from a write's answer
    cursor: int = 0
    empty_since: float | None = None
    lost: bool = False  # its object is gone or another's: nothing is given from it
    taker: BlockRecord | None = None  # the record of the node that holds it now
    since: int = 0  # BlockView.reads when it was held: only a read begun later can show it another node's

    def busy(self) -> int:
        """The offsets given, in flight, lent, being lent or taken, as bits."""
        return sum(1 << off for off in set().union(self.local, self.pending, self.lent, self.lending, self.taken))

    def empty(self) -> bool:
        return not (self.local or self.pending or self.lent or self.lending)

    def address(self, off: int) -> IPAddress:
        return self.net.network_address + off


@dataclass(slots=True)
class Borrowed:
    """An address another node's block lent this node: free (granted, not yet used), in flight, or used."""

    block: str
    network: str
    family_set: int
    address: IPAddress
    request: str
    claim: Claim | None = None
    pending: bool = False
    written: bool = False  # its holder is in the lender's record
    returning: bool = False  # being given back: no ADD may take it
    since: int = 0  # BlockView.reads when it was seen lent: only a read begun later can show it is not


MAX_RECORD = 64 << 20  # the blocks a node holds and what they lent: far below this


class LocalRecord:
    """The blocks this node holds, in a file of its own (atomic writes), so that a daemon started while the API
    server is away still gives addresses from them: each block's uid, the offsets it lent or is lending (with the
    record version a grant was made on) and those AddressClaim objects take."""

    def __init__(self, path: Path, node: str) -> None:
        self.path, self.node = path, node
        self.claiming: dict[str, str] = {}  # as load found them: blocks whose create this node had begun, and tokens
        self.asking: dict[str, str] = {}  # as load found them: asks this node made on other nodes' blocks

    def load(self) -> list[Held]:
        try:
            doc = loads_foreign(read_bounded(self.path, MAX_RECORD, follow=False))
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as e:
            log.error("cannot read %s (the blocks this node holds): %s; they are found again on the API server",
                      self.path, e)  # fmt: skip
            return []
        if not isinstance(doc, dict) or doc.get("kind") != RECORD_KIND or doc.get("node") != self.node:
            log.warning("%s is not this node's record of its blocks: ignored", self.path)
            return []
        claiming = doc.get("claiming")
        if isinstance(claiming, dict):
            self.claiming = {n: t for n, t in list(claiming.items())[:4096] if isinstance(t, str) and t}
        asking = doc.get("asking")
        if isinstance(asking, dict):
            self.asking = {k: b for k, b in list(asking.items())[:4096] if isinstance(b, str) and b}
        out = []
        blocks = doc.get("blocks")
        for name, b in (blocks if isinstance(blocks, dict) else {}).items():
            try:
                out.append(_held(name, b))
            except (KeyError, ValueError, TypeError, AttributeError) as e:
                log.warning("%s: block %s left out: %s", self.path, printable(name)[:253], printable(str(e))[:200])
        return out

    def encode(
        self, held: Iterable[Held], claiming: Mapping[str, str] | None = None, asking: Mapping[str, str] | None = None
    ) -> bytes:
        """The record of these blocks as the file holds it, taken while they cannot change. `claiming`: the blocks
        whose object this node is about to create, with the secret token the object carries, written ahead of the
        create: anyone can write a block naming this node, but not its token. `asking`: the asks (key -> block)
        this node made on other nodes' blocks and has not settled yet, written ahead of the ask."""
        doc = {
            "kind": RECORD_KIND,
            "node": self.node,
            "claiming": dict(sorted((claiming or {}).items())),
            "asking": dict(sorted((asking or {}).items())),
            "blocks": {
                h.name: {
                    "network": h.network,
                    "familySet": h.family_set,
                    "cidr": str(h.net),
                    "uid": h.uid,
                    "lent": {str(k): v for k, v in sorted(h.lent.items())},
                    "lending": {str(k): v[0] for k, v in sorted(h.lending.items())},
                    "taken": sorted(h.taken),
                }
                for h in held
                if not h.lost
            },
        }
        return json.dumps(doc, indent=1).encode() + b"\n"

    def write(self, data: bytes) -> None:
        """A snapshot (encode) on disk, atomically; one writer at a time, as atomic_write's temp file has one name
        per path. OSError as atomic_write raises it."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        atomic_write(self.path, data, mode=0o600)


def _held(name: str, b: Any) -> Held:
    """A block of the record as encode wrote it: its offsets inside it. ValueError (KeyError, TypeError,
    AttributeError) for anything else."""
    net = ipaddress.ip_network(str(b["cidr"]))
    family_set = b["familySet"]
    if net.num_addresses > MAX_SIZE or not isinstance(family_set, int) or family_set < 0:
        raise ValueError("not a block (its cidr or familySet)")

    def offset(text: Any) -> int:
        off = int(text)
        if not 0 <= off < net.num_addresses:
            raise ValueError(f"offset {off} is outside {net}")
        return off

    lent = {offset(k): v for k, v in (b.get("lent") or {}).items()}
    if not all(isinstance(v, dict) for v in lent.values()):
        raise ValueError("a lent entry is not a mapping")
    held = Held(name, str(b["network"]), family_set, net, str(b.get("uid", "")))
    held.lent = lent
    held.lending = {offset(k): [str(v), False] for k, v in (b.get("lending") or {}).items()}
    held.taken = {offset(x) for x in b.get("taken") or []}
    return held


class BlockStore(Protocol):
    kind: str

    def create(self, rec: BlockRecord) -> BlockRecord:
        """The record as stored. Taken (its holder the record that has the name, or foreign); StoreUnavailable."""

    def get(self, name: str) -> BlockRecord | None:
        """StoreUnavailable; None when there is no such block."""

    def write_used(
        self, name: str, uid: str, changes: dict[str, dict[str, Any] | None], node_in_cluster: bool | None = None
    ) -> BlockRecord:
        """Set (or remove: None) entries of `used`, and `nodeInCluster` when given, on the object of that uid. Gone;
        StoreUnavailable."""

    def grant(self, name: str, rv: str, lent: dict[str, dict[str, Any]], answered: list[str]) -> BlockRecord:
        """On version rv only: add `lent` entries and remove the `answered` requests. Conflict (another version),
        Gone; StoreUnavailable (which may have written it: the next version seen says)."""

    def ask(self, name: str, uid: str, key: str, request: dict[str, Any] | None) -> None:
        """Set (None: withdraw) a request of this node. Gone; StoreUnavailable."""

    def update_lent(self, name: str, address: str, node: str, entry: dict[str, Any] | None) -> bool:
        """Replace (None: remove) a lent entry only while it is lent to `node`; False when it is not (any more).
        Gone; StoreUnavailable."""

    def delete(self, name: str, uid: str, rv: str) -> bool:
        """Remove the block only while it is that version; False when it is gone or changed. StoreUnavailable."""

    def pages(self, networks: list[str] | None) -> Iterator[list[BlockRecord]]:
        """Every block of those networks (None: of all), a page at a time. StoreUnavailable."""

    def names(self, network: str) -> set[str]:
        """The names of every block of the network (never their records). StoreUnavailable."""
