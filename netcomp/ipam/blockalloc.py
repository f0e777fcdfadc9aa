"""Addresses from blocks a node holds, unique across every node of a network, with no call to the store on an
ADD's path once the node holds a block with a free address. A node claims a block by creating its object (the
name is the lock), choosing it from the names of the network's blocks read then, and gives its addresses from
what it knows itself; the records are written behind, never ahead of the cache (background.py). With no block
free, it borrows single addresses from other nodes' blocks, read then, as Calico's libcalico-go/lib/ipam/ipam.go
lets a host, but only a block's holder gives its addresses: it lends them on a version of its record. The node
follows none of the blocks it reads. docs/kubernetes.md, "How blocks work"."""

from __future__ import annotations

import functools
import ipaddress
import logging
import secrets
import time
import uuid
import zlib
from collections.abc import Iterator

from netcomp import faults, libc
from netcomp.cni.codes import E_TRY_LATER
from netcomp.errors import DelegateError
from netcomp.ipam.allocator import Holder, exhausted, held_by, refuse_exact, unavailable
from netcomp.ipam.blocks import Layout, block_name, lowest, parse_block_name
from netcomp.ipam.blockstate import BlockRecord, Borrowed, Held, Seen, claim_of
from netcomp.ipam.blockview import TOMBSTONE, BlockAsk, BlockView, compact
from netcomp.ipam.pool import IPAddress, IPNetwork, Pool
from netcomp.ipam.store import Claim, Gone, StoreUnavailable, Taken, holder_doc

log = logging.getLogger("netcomp.ipam")
CREATE_TRIES = 64  # creates of blocks the names said were free, refused (others were faster), before giving up
CANDIDATES = 16  # other nodes' blocks an ADD that borrows keeps from its read of them (the freest)
SILENT = 60.0  # seconds a block that left an ask unanswered is not asked again (its holder may not serve it)
ASK_FLOOR = 1.0  # seconds an ask waits at the least (a holder answers at once; a busy one in a second)
NO_BLOCK = "no free address in the blocks this node holds, and it cannot claim an address block"


class BlockAllocator(BlockView):
    # ------------------------------------------------------------------------------------------------ start

    def load(self, claims: list[Claim]) -> None:
        """The blocks this node's record says it holds, and its cache's claims of blocks (every address its
        containers use, and those of ADDs a crash left half done: they are undone by recovery, which releases
        them)."""
        with self._lock:
            self.held.update((h.name, h) for h in self.record.load())
            self.claiming_ahead = dict(self.record.claiming)
            self.asking = dict(self.record.asking)
            for c in claims:
                if not c.block or c.uses_ipam_claim():
                    continue  # a pod's use of an IPAMClaim's address: the claim's own entry is loaded
                addr = ipaddress.ip_address(c.address)
                h = self.held.get(c.block)
                if h is not None and addr in h.net:
                    h.local[int(addr) - int(h.net.network_address)] = c
                elif c.block not in self.held:
                    prefix = c.block.rsplit("-", 1)[-1]  # blocks.block_name ends in the block's prefix length
                    net = ipaddress.ip_network(f"{c.address}/{prefix}", strict=False) if prefix.isdigit() else None
                    off = int(addr) - int(net.network_address) if net is not None else -1
                    self.recorded.setdefault(c.block, {})[off] = c
                    fs = self._family_set(c.network, addr)
                    self.borrowed[(c.block, off)] = Borrowed(c.block, c.network, fs, addr, "", c, written=False)
            for h in self.held.values():
                h.empty_since = time.monotonic() if h.empty() else None

    # ------------------------------------------------------------------------------------------------ giving

    def claim(self, pool: Pool, family_set: int, holder: Holder, exact: IPAddress | None = None) -> Claim:
        layout = self.layouts.get((pool.network, family_set)) or Layout(pool, family_set)
        if exact is not None:
            return self._exact(layout, holder, exact)
        key = (pool.network, family_set)
        deadline = time.monotonic() + self.timeout
        while True:
            with self._lock:
                got = self._take(layout, holder)
                if got is not None:
                    return got
                if key in self.claiming or not (self.synced.is_set() or self.last_error):
                    if self._wait(deadline):
                        continue  # another ADD is claiming a block, or the first list is not in yet
                    if key in self.claiming:
                        raise DelegateError(E_TRY_LATER, f"network {pool.network!r}: still waiting for a block", "")
                self.claiming.add(key)
            if self.claim_reserved(layout, key, on_add_path=True):
                continue
            got = self._borrow(layout, holder, None, deadline)
            if got is not None:
                return got
            # A loan read on the way (a killed daemon's ask got it) is taken; one nobody uses (granted to another
            # ADD's ask, or on its way back, to be asked for again) is waited for.
            with self._lock:
                got = self._take(layout, holder)
                if got is not None:
                    return got
                going = any(b.claim is None and not b.pending and b.network == pool.network
                            for b in self.borrowed.values())  # fmt: skip
                if going and self._wait(deadline):
                    continue
            raise exhausted(pool, family_set)

    def _wait(self, deadline: float) -> bool:
        left = deadline - time.monotonic()
        return left > 0 and (self.updated.wait(left) or time.monotonic() < deadline)

    def _claim(self, h: Held | Borrowed, addr: IPAddress, holder: Holder, block: str) -> Claim:
        return Claim(block, h.network, str(addr), self.node, **holder.fields(), node_in_cluster=self.node_in_cluster,
                     block=block)  # fmt: skip

    def _take(self, layout: Layout, holder: Holder) -> Claim | None:
        """An address of a held block (or a free borrowed one), marked in flight. With the lock held."""
        network, fs = layout.pool.network, layout.family_set
        for h in self.held.values():
            if h.network != network or h.family_set != fs or h.lost:
                continue
            free = layout.usable(h.net) & ~h.busy()
            off = lowest(free, h.cursor)
            if off < 0:
                continue
            h.pending.add(off)
            h.cursor, h.empty_since = off + 1, None
            low = layout.size // 4  # this block's free addresses are counted first: the others only when few are
            if (free & ~(1 << off)).bit_count() < low and self.free_count(layout) < low:
                self.worker.prefetch((network, fs))
            return self._claim(h, h.address(off), holder, h.name)
        for b in self.borrowed.values():
            if b.network == network and b.family_set == fs and self._free_loan(b):
                b.pending = True
                return self._claim(b, b.address, holder, b.block)
        return None

    def _free_loan(self, b: Borrowed) -> bool:
        """Lent to this node for an ask a killed daemon made (on that block: `asking`), used by nobody and not being
        given back. A grant nobody here asked for is never taken, and one a waiting ADD asked for is its own."""
        if b.claim is not None or b.pending or b.returning or b.request in self.asks:
            return False
        return bool(b.request) and self.asking.get(b.request) == b.block

    def free_count(self, layout: Layout) -> int:
        network, fs = layout.pool.network, layout.family_set
        return sum(
            (layout.usable(h.net) & ~h.busy()).bit_count()
            for h in self.held.values()
            if h.network == network and h.family_set == fs and not h.lost
        )

    def claim_reserved(self, layout: Layout, key: tuple[str, int], *, on_add_path: bool) -> bool:
        """claim_free for a pool whose `key` the caller put in `claiming` (under the lock): the key is taken out
        again whatever happens, and waiters are told."""
        try:
            return self.claim_free(layout, on_add_path=on_add_path)
        finally:
            with self._lock:
                self.claiming.discard(key)
                self.updated.notify_all()

    def claim_free(self, layout: Layout, *, on_add_path: bool) -> bool:
        """Claim a block nobody holds; True when this node holds one more. The names of the network's blocks are
        read (never their records: a node follows only its own), then the first block in this node's order that
        none of them is, nor overlaps (a block of another size, from before a blockSize change), is created; when
        another node created it first, the API server refuses the create and the next is tried. False when every
        block is held (or, off an ADD's path, the store cannot be reached); DelegateError 11 on it then."""
        network = layout.pool.network
        try:
            taken = self.store.names(network)
        except StoreUnavailable as e:
            self.last_error = str(e)
            if not on_add_path:
                return False
            raise unavailable(network, f"{NO_BLOCK}: {e}") from None
        others = [n for n in map(functools.partial(parse_block_name, network), self._other_sized(layout, taken)) if n]
        tries = 0
        try:
            for net in layout.blocks(self.node):
                name = block_name(network, net)
                if name in taken or self._resting(name) or any(net.overlaps(o) for o in others):
                    continue
                got = self.claim_block(layout, net, on_add_path=on_add_path)
                if got is not None:
                    return got
                tries += 1  # another node was faster
                if tries >= CREATE_TRIES:
                    break
            return False
        finally:
            taken.clear()
            libc.malloc_trim()  # the names read are garbage now: given back to the system

    @staticmethod
    def _other_sized(layout: Layout, names: set[str]) -> list[str]:
        """The names among `names` of blocks of the layout's family whose size is not its blocks' (a blockSize
        changed), told from the prefix length every name ends in: only those are read back."""
        family = f".v{layout.ranges[0].subnet.version}-" if layout.ranges else ""
        sizes = {f"-{b.prefixlen}" for r in layout.ranges if (b := layout.block_of(r.subnet.network_address))}
        return [n for n in names if family in n and not n.endswith(tuple(sizes))]

    def _resting(self, name: str) -> bool:
        """A block this node knows of (its own), or whose object just went (its holder may claim it again)."""
        with self._lock:
            gone = self.tombstones.get(name, -TOMBSTONE)
            return name in self.view or name in self.held or time.monotonic() - gone < TOMBSTONE

    def claim_block(self, layout: Layout, net: IPNetwork, *, on_add_path: bool) -> bool | None:
        """Create the block's object; True when this node holds it now, None when another holds it. DelegateError
        11 on an ADD's path when the store cannot be reached (elsewhere: False)."""
        network = layout.pool.network
        rec = BlockRecord(block_name(network, net), network, str(net), self.node, self.node_in_cluster)
        with self._lock:
            # The token of an earlier create of this name that may have been made (its answer lost) is kept.
            rec.token = self.claiming_ahead.setdefault(rec.name, secrets.token_hex(16))
            self.creating.add(rec.name)
            self.save()
        if not self.write_record():  # ahead of the create: a crash after it leaves a block this node knows it made
            with self._lock:
                self.creating.discard(rec.name)
            if not on_add_path:
                return False
            raise unavailable(network, f"{NO_BLOCK}: its record of its blocks cannot be written ({self.record.path})")
        try:
            got = self.store.create(rec)
        except Taken as t:
            self.counted("conflict", network)
            other = t.holder if isinstance(t.holder, BlockRecord) else None
            if other is not None and other.node == self.node and other.token == rec.token:
                got = other  # ours: an earlier create whose answer was lost
            else:
                with self._lock:
                    self.creating.discard(rec.name)
                    self.claiming_ahead.pop(rec.name, None)
                    self.save()
                    if other is None:
                        self.tombstones[rec.name] = time.monotonic() + 3600  # not a block of this network
                        log.warning("block %s of network %s: %s, never touched", net, network, t.foreign)
                return None
        except StoreUnavailable as e:
            self.last_error = str(e)
            with self._lock:
                self.creating.discard(rec.name)  # still claiming_ahead: the create may have been made
            if not on_add_path:
                return False
            raise unavailable(network, f"{NO_BLOCK}: {e}") from None
        faults.point("after-block-claim")
        with self._lock:
            self.creating.discard(rec.name)
            self.claiming_ahead.pop(rec.name, None)
            h = Held(rec.name, network, layout.family_set, net, uid=got.uid, rv=got.rv, since=self.reads)
            h.taken = self._taken(h, layout)
            h.empty_since = time.monotonic()
            self.held[h.name] = h
            self.tombstones.pop(h.name, None)
            self._observed(got, "answer")
            self.save()
            self.updated.notify_all()
        self.write_record()
        self.counted("block", network)
        log.info("network %s: holds block %s now (%s)", network, net, rec.name)
        return True

    # ------------------------------------------------------------------------------------------------ exact

    def _exact(self, layout: Layout, holder: Holder, addr: IPAddress) -> Claim:
        pool = layout.pool
        refuse_exact(pool, layout.family_set, addr)
        who = self.taken(pool.network, addr)
        if who is not None:
            raise held_by(pool.network, addr, who)
        net = layout.block_of(addr)
        assert net is not None, "reservable: in a subnet of the set"
        name = block_name(pool.network, net)
        off = int(addr) - int(net.network_address)
        deadline = time.monotonic() + self.timeout
        for _ in range(3):
            with self._lock:
                h = self.held.get(name)
                if h is not None and h.lost:
                    raise DelegateError(
                        E_TRY_LATER,
                        f"address {addr} of network {pool.network!r}: its block's object is gone and this node is "
                        "claiming it again",
                        "no plugin was run",
                    )
                if h is not None:
                    if h.busy() >> off & 1:
                        raise held_by(pool.network, addr, self._who(h, off))
                    h.pending.add(off)
                    h.empty_since = None
                    return self._claim(h, addr, holder, name)
                own = self.view.get(name)
            rec = None
            if own is None or own.owner != self.node:
                try:
                    rec = self.store.get(name)  # another node's block is read when needed, never followed
                except StoreUnavailable as e:
                    raise unavailable(pool.network, f"address {addr}: its block cannot be read: {e}") from None
                if rec is None:
                    self.claim_block(layout, net, on_add_path=True)  # held now, or another node was faster
                    continue
            if rec is None or rec.node == self.node:  # its object is being made by this node: held in a moment
                with self._lock:
                    self._wait(min(deadline, time.monotonic() + 1))
                continue
            got = self._borrow(layout, holder, (compact(rec), off), deadline)
            if got is not None:
                return got
            raise held_by(pool.network, addr, self._who_elsewhere(name, addr))
        raise DelegateError(E_TRY_LATER, f"address {addr} of network {pool.network!r}: its block changed hands", "")

    def _who(self, h: Held, off: int) -> str:
        c = h.local.get(off)
        if c is not None:
            return c.holder()
        if off in h.lent:
            return f"node {h.lent[off].get('node')}"
        if off in h.taken:
            return self.taken(h.network, h.address(off)) or "an AddressClaim"
        return f"an ADD in flight on node {self.node}"

    def _who_elsewhere(self, name: str, addr: IPAddress) -> str:
        try:
            rec = self.store.get(name)
        except StoreUnavailable:
            rec = None
        if rec is None:
            return "another node"
        doc = rec.used.get(str(addr))
        if doc is not None:
            return claim_of(rec, str(addr), doc, rec.node).holder()
        lent = rec.lent.get(str(addr))
        if lent is not None:
            return claim_of(rec, str(addr), lent, str(lent.get("node"))).holder()
        return f"node {rec.node}"

    # ------------------------------------------------------------------------------------------------ borrowing

    def _candidates(self, layout: Layout) -> list[Seen]:
        """Other nodes' blocks of the set whose records say they have a free address, the freest first (at most
        CANDIDATES): read now, a page at a time, as only a node that borrows needs them. What they lend this node
        is taken on the way (a grant that came late is given back). DelegateError 11 when they cannot be read."""
        network = layout.pool.network
        version = layout.ranges[0].subnet.version if layout.ranges else 0
        out: list[tuple[int, int, Seen]] = []
        begun = self.begin_read()
        try:
            for page in self.store.pages([network]):
                for rec in page:
                    if rec.network != network or rec.node == self.node or rec.net.version != version:
                        continue
                    if any(o.get("node") == self.node for o in rec.lent.values()):
                        self.seen(rec, "read", begun)
                    s = compact(rec)
                    with self._lock:
                        free = self._room(layout, s)
                    if free > 0:
                        out.append((-free, zlib.crc32(f"{self.node}/{s.name}".encode()), s))
                out = sorted(out, key=lambda x: x[:2])[:CANDIDATES]
        except StoreUnavailable as e:
            why = "no free address in the blocks this node holds, none to claim, and other nodes' cannot be read"
            raise unavailable(network, f"{why}: {e}") from None
        return [s for *_, s in out]

    def _room(self, layout: Layout, s: Seen) -> int:
        """How many addresses another node's block may lend (0: none, or not asked now). With the lock held."""
        if s.name in self.held or self.denied.get(s.name) == s.rv or layout.block_of(s.net.network_address) != s.net:
            return 0  # nothing to lend since its last answer; or a block of another size, which gives nothing
        if self.silent.get(s.name, 0.0) > time.monotonic():
            return 0  # did not answer the last ask: its holder may not be serving it
        lent = sum(1 << off for off in s.lent)
        free = (layout.usable(s.net) & ~s.used & ~lent).bit_count()
        return free - sum(1 for a in self.asks.values() if a.block == s.name and not a.answered)

    def _borrow(self, layout: Layout, holder: Holder, exact: tuple[Seen, int] | None, deadline: float) -> Claim | None:
        """Ask other nodes' blocks for one address (exactly `exact`: (block, offset)), one block after another,
        until one lends it; None when none does. The ask is recorded ahead (the worker withdraws it once over and
        gives back what came late); its answer is read from the block, as this node follows only its own."""
        targets = [exact[0]] if exact is not None else self._candidates(layout)
        for i, s in enumerate(targets):
            if time.monotonic() >= deadline:
                break
            key = f"{self.node}.{uuid.uuid4().hex[:8]}"
            ask = BlockAsk(key, s.name)
            request: dict[str, object] = {"node": self.node}
            if exact is not None:
                request["addresses"] = [str(s.net.network_address + exact[1])]
            with self._lock:
                self.asks[key] = ask
                self.asking[key] = s.name
                self.save()
            if not self.write_record():
                self._forget(key)
                raise unavailable(layout.pool.network, f"{NO_BLOCK}: its record cannot be written") from None
            try:
                self.store.ask(s.name, s.uid, key, request)
            except Gone:
                self._forget(key)
                continue
            except StoreUnavailable as e:
                self._forget(key)
                why = "no free address in the blocks this node holds, none to claim, and it cannot ask another node"
                raise unavailable(layout.pool.network, f"{why} for one: {e}") from None
            with self._lock:
                ask.written = self.reads  # a read begun from now on shows the request, or its answer
            faults.point("mid-ask")
            # The time left shared by the blocks left, at least ASK_FLOOR each: one whose holder never answers
            # costs its share only, and one that answers as holders do is never cut short.
            now = time.monotonic()
            share = max((deadline - now) / (len(targets) - i), min(ASK_FLOOR, deadline - now))
            self._await(ask, now + share)
            with self._lock:
                got = None
                for k in ask.granted:
                    b = self.borrowed.get(k)
                    if b is not None and got is None and b.claim is None and not b.pending:
                        b.pending = True
                        got = self._claim(b, b.address, holder, b.block)
                    elif b is not None and b.claim is None and not b.pending:
                        b.request = ""  # more than asked for: given back
                answered = ask.answered
            self._forget(key)
            if got is not None:
                self.counted("borrow", layout.pool.network)
                return got
            if not answered and share >= ASK_FLOOR:
                with self._lock:
                    self.silent[s.name] = time.monotonic() + SILENT
        return None

    def _await(self, ask: BlockAsk, until: float) -> None:
        """Until the ask is answered or `until`: its block read again and again, soon at first (a holder answers
        at once), then less often."""
        pause = 0.005
        while True:
            with self._lock:
                if ask.answered or ask.granted or (left := until - time.monotonic()) <= 0:
                    return
                self.updated.wait(min(pause, left))
                if ask.answered or ask.granted:
                    return
            pause = min(pause * 2, 0.25)
            begun = self.begin_read()
            try:
                rec = self.store.get(ask.block)
            except StoreUnavailable:
                continue
            if rec is None:
                with self._lock:
                    ask.answered = True  # gone: nothing will be lent from it
                return
            self.seen(rec, "read", begun)

    def _forget(self, key: str) -> None:
        """The ask is over: the worker withdraws it and gives back what was lent to it and is not used."""
        with self._lock:
            self.asks.pop(key, None)
        self.worker.wake()

    # ------------------------------------------------------------------------------------------------ settling

    def settle(self, claims: list[Claim]) -> None:
        with self._lock:
            for c, at in self._placed(claims):
                if at is not None:
                    h, off = at
                    h.pending.discard(off)
                    h.local[off] = c
                elif (b := self._borrowed_of(c)) is not None:
                    b.pending, b.claim, b.written = False, c, False
        self.worker.wake(write=True)

    def _placed(self, claims: list[Claim]) -> Iterator[tuple[Claim, tuple[Held, int] | None]]:
        """Each claim given from a block, with the held block its address is in and its offset there (None: this
        node does not hold it, the address was borrowed)."""
        for c in claims:
            if c.block:
                addr, h = ipaddress.ip_address(c.address), self.held.get(c.block)
                yield c, (h, int(addr) - int(h.net.network_address)) if h is not None and addr in h.net else None

    def entry_of(self, block: str, addr: IPAddress) -> tuple[bool, Claim | None]:
        """Whether this node holds the block (or has the address borrowed from it), and who has the address then
        (None: nobody; an ADD in flight counts as nobody, as its exact claim is refused)."""
        with self._lock:
            h = self.held.get(block)
            if h is not None and not h.lost and addr in h.net:
                off = int(addr) - int(h.net.network_address)
                if off in h.lent:
                    rec = BlockRecord(h.name, h.network, str(h.net), self.node, uid=h.uid)
                    return True, claim_of(rec, str(addr), h.lent[off], str(h.lent[off].get("node")))
                return True, h.local.get(off)
            b = next((b for (n, _), b in self.borrowed.items() if n == block and b.address == addr), None)
            return (True, b.claim) if b is not None and b.claim is not None else (False, None)

    def write_now(self, claims: list[Claim]) -> bool:
        """The entries of claims given from blocks this node holds written to their records now, not behind (an
        IPAMClaim's, which another node checks before its status says it); True when every one is written. The
        worker writes what is left (a borrowed address's entry, one that failed)."""
        done = True
        for c, at in self._placed(claims):
            if at is None:
                done = False
                continue
            h, _ = at
            try:
                rec = self.store.write_used(h.name, h.uid, {c.address: holder_doc(c)})
            except (Gone, StoreUnavailable):
                done = False
                continue
            self.seen(rec, "answer")
        return done

    def _borrowed_of(self, c: Claim) -> Borrowed | None:
        addr = ipaddress.ip_address(c.address)
        return next((b for (n, _), b in self.borrowed.items() if n == c.block and b.address == addr), None)

    def release(self, claims: list[Claim], reason: str = "release") -> None:
        with self._lock:
            for c, at in self._placed(claims):
                if at is not None:
                    h, off = at
                    if (cur := h.local.get(off)) is not None and cur.container_id != c.container_id:
                        continue  # given again since: not this claim's any more
                    h.local.pop(off, None)
                    h.pending.discard(off)
                    if h.empty():
                        h.empty_since = time.monotonic()
                else:
                    b = self._borrowed_of(c)
                    if b is None or (b.claim is not None and b.claim.container_id != c.container_id):
                        continue
                    b.claim, b.pending, b.request = None, False, ""  # given back to its lender by the worker
                self.counted(reason, c.network)
            self.updated.notify_all()
        self.worker.wake(write=True)

    def release_empty(self) -> list[str]:
        """Delete this node's blocks empty for longer than the grace period, as Calico's kube-controllers release an
        empty block's affinity, and the empty blocks naming it that it never made; the names of its own deleted."""
        now = time.monotonic()
        freed = []
        with self._lock:
            idle = [h for h in self.held.values() if h.empty_since is not None and now - h.empty_since >= self.grace]
            todo = [h for h in idle if h.empty() and not (h.lost or h.written or h.asked.keys() - h.answered)]
            for h in todo:
                del self.held[h.name]  # nothing is given from it while it goes
            self.strays = {n: t for n, t in self.strays.items() if n in self.view and n not in self.held}
            strays = [(n, self.view[n]) for n, t in self.strays.items() if now - t >= self.grace]
        for name, s in strays:
            if s.owner != self.node or s.used or s.lent:
                continue
            try:
                if self.store.delete(name, s.uid, s.rv):  # only while it is the version seen empty
                    log.warning("deleted block %s: empty, naming this node, never made by it", name)
                    with self._lock:
                        self.strays.pop(name, None)  # kept otherwise (a newer version, the store away): tried again
            except StoreUnavailable as e:
                log.warning("cannot delete block %s (empty, naming this node, never made by it): %s", name, e)
        for h in todo:
            try:
                ok = self.store.delete(h.name, h.uid, h.rv)
                if ok:
                    faults.point("after-block-release")
            except StoreUnavailable as e:
                ok = None
                log.warning("cannot release block %s: %s", h.name, e)
            with self._lock:
                # Kept when the store is away, or when its record changed meanwhile (a request, a lent address).
                seen = self.view.get(h.name)
                if ok is None or (ok is False and seen is not None and seen.owner == self.node):
                    self.held[h.name] = h
                else:
                    self.view.pop(h.name, None)
                    freed.append(h.name)
                    self.counted("release-block", h.network)
                    log.info("network %s: released block %s (empty for %.0fs)", h.network, h.net,
                             now - (h.empty_since or now))  # fmt: skip
                self.save()
                self.updated.notify_all()
            self.write_record()
        return freed
