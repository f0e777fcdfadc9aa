"""What a node knows of its own blocks of the networks it serves, and what it does with a block's record as the
store shows it; blockalloc.BlockAllocator gives addresses from it. The watch follows the blocks labelled with this
node only; another node's block is read when this node needs it (to borrow from it), and nothing of it is kept
but what it lends this node.

Records come in order from the watch (whole from a list), and out of order as the answers to this node's writes,
after which the watch may still show older versions. So an answer only tells the version to make the next grant on
and what the node's containers' entries say; what was lent, and whether a grant made on version V was written, is
taken from the watch only: it was when the watch, having shown V, shows a version with it, and was not when that
version lacks it (a write on V never applies to a later version). Reads of other nodes' blocks are begun by several
threads at once and taken in in any order, after this node's writes to them as well: a grant a read shows is
taken, but what a read lacks (a request, a loan) counts only when the read was begun after this node knew of it
(BlockView.reads numbers them)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from netcomp.ipam.blockcheck import bits, fit, offsets, report
from netcomp.ipam.blocks import Layout, block_name, set_bits
from netcomp.ipam.blockstate import BlockRecord, BlockStore, Borrowed, Held, LocalRecord, Seen, claim_of
from netcomp.ipam.pool import IPAddress, Pool
from netcomp.ipam.store import Claim

log = logging.getLogger("netcomp.ipam")
TOMBSTONE = 10.0  # seconds a block whose object just went is not claimed (its holder may be claiming it again)


@dataclass(slots=True)
class BlockAsk:
    """A request of this node on another node's block: answered once a read of the block begun after the request
    was written no longer has it."""

    key: str
    block: str
    written: int = -1  # BlockView.reads once the request is written (-1: not yet)
    granted: list[tuple[str, int]] = field(default_factory=list)
    answered: bool = False


def compact(rec: BlockRecord) -> Seen:
    """A block's record as compact as allocation needs."""
    lent = {off: str(doc.get("node", "")) for off, doc in offsets(rec, rec.lent).items()}
    return Seen(rec.name, rec.network, rec.net, rec.node, rec.uid, rec.rv, bits(rec, rec.used), lent,
                rec.node_in_cluster)  # fmt: skip


class Wakes:
    """What the view asks of the block worker (background.Worker). Before it starts, asking does nothing: the
    worker looks at everything when it starts."""

    def wake(self, *, write: bool = False, lend: bool = False, recover: bool = False) -> None: ...

    def prefetch(self, key: tuple[str, int]) -> None: ...

    def flush(self, timeout: float) -> bool:
        return True


class BlockView:
    def __init__(
        self,
        store: BlockStore,
        node: str,
        record: LocalRecord,
        *,
        node_in_cluster: bool = False,
        grace: float = 60.0,
        timeout: float = 5.0,
        taken: Callable[[str, IPAddress], str | None] = lambda network, address: None,
        counted: Callable[[str, str], None] = lambda event, network: None,
    ) -> None:
        """`taken(network, address)`: who holds it by an AddressClaim object (None: nobody); `timeout`: how long
        an ADD waits for a block or a lender; `grace`: seconds a block stays held once empty."""
        self.store, self.node, self.record = store, node, record
        self.node_in_cluster, self.grace, self.timeout = node_in_cluster, grace, timeout
        self.taken, self.counted = taken, counted
        self._lock = threading.RLock()
        # blocks.json is written outside _lock (write_record), one write at a time, newest snapshot last
        self._write_lock = threading.Lock()
        self._generation = 0  # saves asked for (under _lock)
        self._written = 0  # the generation on disk (set under _write_lock)
        self.updated = threading.Condition(self._lock)  # notified whenever what the node knows changes
        self.pools: dict[str, Pool] = {}
        self.layouts: dict[tuple[str, int], Layout] = {}
        self.view: dict[str, Seen] = {}  # the blocks of the networks served, by name
        self.held: dict[str, Held] = {}
        self.borrowed: dict[tuple[str, int], Borrowed] = {}
        self.asks: dict[str, BlockAsk] = {}
        # Asks this node made (key -> block), recorded ahead of the ask: once over, the worker withdraws each and
        # reads its block, to give back what was lent to it late (or to a daemon killed before it took it).
        self.asking: dict[str, str] = {}
        self.recorded: dict[str, dict[int, Claim]] = {}  # the cache's claims by block, for a block adopted later
        self.tombstones: dict[str, float] = {}
        self.denied: dict[str, str] = {}  # blocks that answered an ask with nothing, and the version they did it in
        self.silent: dict[str, float] = {}  # blocks that did not answer an ask, and until when none is asked again
        # Empty blocks naming this node that it never made (a hostile create, or its record lost), and since when:
        # deleted past the grace period as its own empty blocks are, so that no CIDR is lost for good.
        self.strays: dict[str, float] = {}
        self.claiming: set[tuple[str, int]] = set()
        self.creating: set[str] = set()  # blocks whose object this node is creating (the watch may show it first)
        # Blocks this node's record says it is creating (written before the create): the only blocks naming this
        # node it takes for its own without having recorded them held (it was killed between the two).
        self.claiming_ahead: dict[str, str] = {}  # name -> the token its object carries
        self.to_adopt: dict[str, BlockRecord] = {}  # blocks a list names this node in, adopted once the list is whole
        self.synced = threading.Event()
        self.reads = 0  # reads of other nodes' blocks begun (begin_read): a read's number orders it after what was seen
        self.last_error: str | None = None  # why the store could not be followed (None: it is)
        self.worker = Wakes()  # background.Worker, once started
        self.kept_holders: set[str] = set()  # IPAMClaims whose files cannot be read: their entries kept as recorded

    def serve(self, pools: dict[str, Pool]) -> bool:
        """The pools of the networks this node serves (block ones); True when the set of networks changed."""
        with self._lock:
            changed = set(pools) != set(self.pools)
            self.pools = dict(pools)
            self.layouts = {(n, i): Layout(p, i) for n, p in pools.items() for i in range(len(p.sets))}
            for name in [n for n, s in self.view.items() if s.network not in pools and n not in self.held]:
                del self.view[name]
            return changed

    def _family_set(self, network: str, addr: IPAddress) -> int:
        pool = self.pools.get(network)
        if pool is not None:
            for i, rs in enumerate(pool.sets):
                if rs and rs[0].subnet.version == addr.version:
                    return i
        return 0

    def covers(self, network: str, addr: IPAddress) -> bool:
        """The address is in a block of the network (given from blocks, never claimed on its own)."""
        with self._lock:
            return any(s.network == network and addr in s.net for s in self.view.values()) or any(
                h.network == network and addr in h.net for h in self.held.values()
            )

    def retake(self, network: str | None = None) -> None:
        """The AddressClaim objects of `network` (None: of any) changed: which addresses of the blocks held in
        it they take, again."""
        with self._lock:
            changed = False
            for h in self.held.values():
                if network is not None and h.network != network:
                    continue
                layout = self.layouts.get((h.network, h.family_set))
                if layout is not None and (taken := self._taken(h, layout)) != h.taken:
                    h.taken, changed = taken, True
            if changed:
                self.save()
                self.updated.notify_all()
        self.write_record()

    def _taken(self, h: Held, layout: Layout) -> set[int]:
        # At most a block's size of questions (blocks.MAX_SIZE): every block held is one of the pool's.
        return {off for off in set_bits(layout.usable(h.net)) if self.taken(h.network, h.address(off)) is not None}

    def save(self) -> None:
        """The blocks held changed (called with the lock held): the next write_record writes them."""
        self._generation += 1

    def write_record(self) -> bool:
        """The node's record of its blocks written, when a save asked for it since the last write: True once on
        disk, False (logged) when it cannot be. Called without the lock, which an ADD takes: a write is two fsyncs."""
        snap = self.snapshot()
        return self.write_snapshot(*snap) if snap is not None else True

    def snapshot(self) -> tuple[int, bytes] | None:
        """What the record says of the blocks held now, and the generation of that; None when it is on disk."""
        with self._lock:
            if self._generation <= self._written:
                return None
            return self._generation, self.record.encode(self.held.values(), self.claiming_ahead, self.asking)

    def write_snapshot(self, generation: int, data: bytes) -> bool:
        """A snapshot written, one at a time, unless a newer one is on disk already: two writers never leave an
        older state after a newer one."""
        with self._write_lock:
            if generation <= self._written:
                return True
            try:
                self.record.write(data)
            except OSError as e:
                log.error("cannot write %s (the blocks this node holds): %s", self.record.path, e.strerror)
                return False
            self._written = generation
            return True

    # ------------------------------------------------------------------------------------------------ the view

    def begin_read(self) -> int:
        """The number of a read of another node's block about to begin, for seen()."""
        with self._lock:
            self.reads += 1
            return self.reads

    def seen(self, rec: BlockRecord, source: str = "watch", begun: int = 0) -> None:
        """A block's record as the store shows it now: `source` "watch", "list" (in order: this node's blocks),
        "read" (another node's, read by the read numbered `begun`) or "answer" (to a write of this node; the module
        docstring says why it matters)."""
        with self._lock:
            self._observed(rec, source, begun)
            self.updated.notify_all()
        self.write_record()

    def gone(self, name: str) -> None:
        with self._lock:
            s = self.view.pop(name, None)
            h = self.held.get(name)
            if h is not None:
                if not h.lost:
                    self.lose(h, None)
            elif s is not None and (s.used or s.lent):
                # Not released (a release is of an empty block): its holder may claim it again.
                self.tombstones[name] = time.monotonic()
            for key, b in list(self.borrowed.items()):
                if key[0] == name and b.claim is None and not b.pending:
                    del self.borrowed[key]
            for ask in self.asks.values():
                if ask.block == name:
                    ask.answered = True
            self.updated.notify_all()

    def listed(self, names: set[str], networks: set[str]) -> None:
        """A whole list of the blocks of `networks` (their names) was seen: any other block of them is gone."""
        with self._lock:
            for name, rec in self.to_adopt.items():
                s = self.view.get(name)  # a list cut short leaves older ones: only this list's version counts
                if name in names and name not in self.held and s is not None and s.rv == rec.rv:
                    self._take_mine(rec, "list")
            self.to_adopt.clear()
            for name in [n for n, s in self.view.items() if s.network in networks and n not in names]:
                self.gone(name)
            for name in [n for n, h in self.held.items() if h.network in networks and n not in names and not h.lost]:
                self.gone(name)
            self.synced.set()
            self.last_error = None
            self.updated.notify_all()

    def unreachable(self, why: str) -> None:
        """The store cannot be followed now: an ADD does not wait for its first list."""
        with self._lock:
            self.last_error = why
            self.updated.notify_all()

    def claims(self, network: str | None = None) -> list[Claim]:
        """Every address in use the node knows of in the blocks of its networks: its own containers', those it lent
        (with their borrowers' containers), and in other nodes' blocks those their records give (with their node
        only: the records are not kept whole)."""
        out: list[Claim] = []
        with self._lock:
            for h in self.held.values():
                if network is not None and h.network != network:
                    continue
                out += h.local.values()
                rec = BlockRecord(h.name, h.network, str(h.net), self.node, uid=h.uid)
                out += [claim_of(rec, str(h.address(off)), doc, str(doc.get("node"))) for off, doc in h.lent.items()]
            out += [b.claim for b in self.borrowed.values() if b.claim and network in (None, b.network)]
            for s in self.view.values():
                if s.name in self.held or s.owner == self.node or (network is not None and s.network != network):
                    continue
                rec, base = BlockRecord(s.name, s.network, str(s.net), s.owner, uid=s.uid), s.net.network_address
                out += [claim_of(rec, str(base + off), {}, s.owner) for off in set_bits(s.used)]
                out += [claim_of(rec, str(base + o), {}, n) for o, n in s.lent.items() if n != self.node]
        return sorted(out, key=Claim.order)

    # ------------------------------------------------------------------------------------------------ records

    def _observed(self, rec: BlockRecord, source: str, begun: int = 0) -> None:
        ordered = source != "answer"
        mine = rec.node == self.node
        h = self.held.get(rec.name)
        pool = self.pools.get(rec.network)
        if pool is None and h is None:
            return  # not a network served: nothing to give from it, nothing to check it against
        sized, why = fit(rec.net, pool) if pool is not None else (True, "")
        if rec.name != block_name(rec.network, rec.net):
            why = f"its name is not {block_name(rec.network, rec.net)}: forged"
        if why and (h is None or h.net != rec.net):
            report(rec, why)
            return
        if not mine and rec.name not in self.creating and self.claiming_ahead.pop(rec.name, None) is not None:
            self.save()  # another node's: this node's create of it never took (and it may be re-pointed here later)
        if source in ("read", "answer") and not mine:
            # Another node's block, read when needed (to borrow) or answered to a write: what it lends this node
            # is taken, nothing of it is kept (the watch follows this node's blocks only).
            if source == "read":
                if h is not None and not h.lost and begun > h.since:
                    self.lose(h, rec)
                self._foreign(rec, begun)
            return
        if source == "read":
            return  # a block naming this node, read as another's: the watch of this node's blocks takes it
        self.view[rec.name] = compact(rec)
        self.tombstones.pop(rec.name, None)
        if mine:
            if h is not None:
                self._own(h, rec, source)
            elif rec.name in self.creating:
                pass  # this node's create, answered in a moment
            elif not sized:
                report(rec, f"{rec.net} is not a block of network {rec.network!r}'s size: never held by this node")
            elif source == "list":
                self.to_adopt[rec.name] = rec  # adopted once the whole list shows no other node's block over it
            else:
                self._take_mine(rec, source)
            return
        if h is not None and not h.lost and ordered:
            self.lose(h, rec)
        if ordered:
            self._foreign(rec, self.reads + 1)

    def _take_mine(self, rec: BlockRecord, source: str) -> None:
        """A block naming this node that it did not know it held: adopted only when its record says it was creating
        it (killed before recording it held), and no other node's block covers part of it. Anyone can write a
        block naming this node, re-point another node's (its containers' addresses live there) and empty its
        `used`: only this node's own write-ahead tells a block it made."""
        if not rec.token or self.claiming_ahead.get(rec.name) != rec.token:
            report(rec, "it names this node, which has no record of creating it: never held by this node")
            if not (rec.used or rec.lent):  # requests hold no address
                self.strays.setdefault(rec.name, time.monotonic())
            else:
                self.strays.pop(rec.name, None)
            return
        others = (s for s in self.view.values() if s.owner != self.node and s.name != rec.name)
        over = [s for s in others if s.net.overlaps(rec.net)]
        if over:
            report(rec, f"it overlaps block {over[0].net} of node {over[0].owner}: never held by this node")
            return
        known = self.recorded.get(rec.name, {})
        strangers = [off for off in offsets(rec, rec.used) if off not in known]
        if strangers:  # another node's block, its node field re-pointed here: its containers' addresses are live
            first = rec.net.network_address + strangers[0]
            report(rec, f"its used names {len(strangers)} addresses no container of this node has ({first}, ...): "
                        "never held by this node")  # fmt: skip
            return
        self._own(self._adopt(rec), rec, source)

    def _adopt(self, rec: BlockRecord) -> Held:
        """A block whose object names this node, which it does not know it holds, made by it (killed between
        creating the object and recording it: _take_mine checks the token): held from now on, with its
        containers' addresses from the cache."""
        net = rec.net
        fs = next(
            (i for (n, i), lay in self.layouts.items() if n == rec.network and lay.block_of(net.network_address)), 0
        )
        h = Held(rec.name, rec.network, fs, net, uid=rec.uid, rv=rec.rv)
        h.local, h.since = self.recorded.pop(rec.name, {}), self.reads
        for off in h.local:
            self.borrowed.pop((rec.name, off), None)
        layout = self.layouts.get((rec.network, fs))
        if layout is not None:
            h.taken = self._taken(h, layout)
        h.empty_since = time.monotonic() if h.empty() else None
        self.held[rec.name] = h
        self.claiming_ahead.pop(rec.name, None)
        log.warning("network %s: block %s names this node, which had no record of it: held again", rec.network, net)
        self.save()
        return h

    def _own(self, h: Held, rec: BlockRecord, source: str) -> None:
        if h.lost:
            log.warning("network %s: block %s is this node's again", h.network, h.net)
        h.uid, h.lost, h.taker = rec.uid, False, None
        h.written = offsets(rec, rec.used)
        for off, doc in h.written.items():  # an IPAMClaim's entry whose file here cannot be read: kept as recorded
            if off not in h.local and isinstance(doc, dict) and doc.get("containerID") in self.kept_holders:
                h.local[off] = claim_of(rec, str(h.address(off)), doc, self.node)
        h.rv = rec.rv
        if source != "answer":
            h.watched = rec.rv
        if source == "answer":
            self.worker.wake(write=True)
            return
        lent = offsets(rec, rec.lent)
        changed = lent.keys() != h.lent.keys()
        h.lent = lent
        for off, (base, shown) in list(h.lending.items()):
            if source == "list" or (shown and rec.rv != base):
                del h.lending[off]  # resolved: lent now when the record has it, free when not
                changed = True
            elif rec.rv == base:
                h.lending[off][1] = True
        h.asked = dict(rec.requests)
        h.answered &= h.asked.keys()
        for off in lent.keys() & (h.local.keys() | h.pending):
            who = h.local[off].holder() if off in h.local else "an ADD in flight"
            log.error("address %s of network %s is lent to node %s and used by %s here", h.address(off), h.network,
                      lent[off].get("node"), who)  # fmt: skip
        if h.empty() and h.empty_since is None:
            h.empty_since = time.monotonic()
        if changed:
            self.save()
        if h.asked:
            self.worker.wake(lend=True)
        self.worker.wake(write=True)

    def _foreign(self, rec: BlockRecord, begun: int) -> None:
        """Another node's block, shown by a read begun as `begun` (the watch: after everything): addresses it lent
        this node (granted to an ask, or to return), those no longer lent to it, and asks it answered."""
        lent_here = {off: doc for off, doc in offsets(rec, rec.lent).items() if doc.get("node") == self.node}
        for off in [o for o in lent_here if self._held_here(rec.net.network_address + o)]:
            del lent_here[off]  # an address a block of this node gives: never borrowed as well
            report(rec, f"it lends {rec.net.network_address + off}, in a block this node holds, to this node")
        used = bits(rec, rec.used)
        for off in [o for o in lent_here if used >> o & 1 and (rec.name, o) not in self.borrowed]:
            del lent_here[off]  # its holder's container has it: a grant written by another than the holder
            report(rec, f"it lends {rec.net.network_address + off} to this node while its used names it")
        fs = self._family_set(rec.network, rec.net.network_address)
        for off, doc in lent_here.items():
            key = (rec.name, off)
            b = self.borrowed.get(key)
            if b is not None:
                b.written = b.written or (b.claim is not None and doc.get("containerID") == b.claim.container_id)
                continue
            request = str(doc.get("request", ""))
            ask = self.asks.get(request)
            if (ask is not None and ask.block != rec.name) or (
                ask is None and self.asking.get(request, rec.name) != rec.name
            ):
                report(rec, f"it grants {rec.net.network_address + off} to a request this node made on another block")
                ask, request = None, ""  # not what was asked: given back
            addr = rec.net.network_address + off
            # A grant to an ask of a daemon killed since (recorded in `asking`) keeps its key: an ADD may take it.
            self.borrowed[key] = Borrowed(rec.name, rec.network, fs, addr, request if request in self.asking else "",
                                          since=self.reads)  # fmt: skip
            if ask is not None:
                ask.granted.append(key)
            else:
                self.worker.wake()  # not asked for (any more): given back
        for key, b in list(self.borrowed.items()):
            if key[0] != rec.name or key[1] in lent_here or begun <= b.since:
                continue  # lent still, or a read begun before this node saw it lent
            if b.claim is not None or b.pending:
                if b.request != "gone":
                    who = b.claim.holder() if b.claim else "an ADD in flight"
                    log.error("address %s of network %s is no longer lent to this node by %s, and %s uses it",
                              b.address, b.network, rec.node, who)  # fmt: skip
                    b.request = "gone"
            else:
                del self.borrowed[key]
        for ask in self.asks.values():
            if ask.block == rec.name and ask.key not in rec.requests and 0 <= ask.written < begun:
                ask.answered = True
                if not ask.granted:
                    self.denied[rec.name] = rec.rv  # nothing to lend: not asked again until it changes

    def _held_here(self, addr: IPAddress) -> bool:
        return any(not h.lost and addr in h.net for h in self.held.values())

    def lose(self, h: Held, taker: BlockRecord | None) -> None:
        """The block's object is gone (taker None) or holds another node now: nothing is given from it; the worker
        claims it again, or records its containers' addresses as lent to this node on the taker's record."""
        h.lost, h.taker = True, taker
        who = f"held by node {taker.node} now" if taker is not None else "gone from the API server"
        log.warning("network %s: block %s (%s) is %s: no address is given from it; %d in use", h.network, h.net,
                    h.name, who, len(h.local) + len(h.pending))  # fmt: skip
        self.worker.wake(recover=True)

    def drop_unused(self, h: Held) -> bool:
        """A lost block whose object is gone and that nothing here uses (no container's address in the cache, none
        lent or being lent) is not held any more rather than claimed again, empty: it is how a block this node
        released looks to a daemon killed before recording the release (BlockAllocator.release_empty). True
        when dropped."""
        with self._lock:
            if not (h.lost and h.taker is None and h.empty()) or self.held.get(h.name) is not h:
                return False
            del self.held[h.name]
            self.save()
            self.updated.notify_all()
        self.write_record()
        log.info("network %s: block %s is gone from the API server and nothing here uses it: not held any more",
                 h.network, h.net)  # fmt: skip
        return True
