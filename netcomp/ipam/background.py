"""The block allocator's threads for what goes to the store off an ADD's path. One lends at once, since a
borrower's ADD waits for it. The other claims again a block whose object went (or hands its addresses in use to the
node that holds it now), settles the asks this node made on other nodes' blocks once they are over, gives back
borrowed addresses nobody uses, claims a block ahead of need, and writes behind which container uses which
address: only what differs, once the node's CNI requests leave a quiet moment (Server.wait_quiet), never ahead of
the cache. A store that cannot be reached is tried again after a back-off. A stopped daemon's worker is closed
after its last flush: it writes nothing more."""

from __future__ import annotations

import ipaddress
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from netcomp import faults
from netcomp.ipam.blocks import lowest
from netcomp.ipam.blockstate import BlockRecord, Borrowed, Held
from netcomp.ipam.blockview import Wakes
from netcomp.ipam.store import Conflict, Gone, StoreUnavailable, Taken, holder_doc

if TYPE_CHECKING:
    from netcomp.ipam.blockalloc import BlockAllocator

log = logging.getLogger("netcomp.ipam")
MAX_BACKOFF = 30.0
# Seconds the write-behind waits at most for a quiet moment: a burst's ADDs coalesce into one write per block.
WRITE_LIMIT = 10.0


class Worker(Wakes):
    def __init__(self, alloc: BlockAllocator) -> None:
        self.a = alloc
        self.cv = threading.Condition(alloc._lock)
        self.flags = {"lend": False, "write": False, "recover": False, "other": False}
        self.prefetching: set[tuple[str, int]] = set()
        self.busy = False
        self.lending = False
        self.thread: threading.Thread | None = None
        self.flushing = 0
        self.retry_at = 0.0
        self.backoff = 1.0
        self.closed = False
        # Waits until the node's CNI requests leave the CPU alone (server.Server.wait_quiet), set once serving.
        self.quiet: Callable[..., object] = lambda limit: True

    # ------------------------------------------------------------------------------------------------ asks

    def wake(self, *, write: bool = False, lend: bool = False, recover: bool = False) -> None:
        with self.cv:
            self.flags["write"] |= write
            self.flags["lend"] |= lend
            self.flags["recover"] |= recover
            self.flags["other"] = True
            self.cv.notify_all()

    def prefetch(self, key: tuple[str, int]) -> None:
        with self.cv:
            self.prefetching.add(key)
            self.cv.notify_all()

    def flush(self, timeout: float) -> bool:
        """Until everything this node knows is written (records, borrowed addresses' holders, returns), or
        timeout; tries a store that failed at once. With the thread gone (a stopping daemon), done here."""
        deadline = time.monotonic() + timeout
        with self.cv:
            self.flushing += 1
            self.retry_at = 0.0
            if self.waiting():
                self.flags["write"] = self.flags["other"] = True
            self.cv.notify_all()
        try:
            while not self.closed and (left := deadline - time.monotonic()) > 0:
                alive = self.thread is not None and self.thread.is_alive()
                with self.cv:
                    if not self.waiting():
                        return True
                    if alive:
                        self.cv.wait(min(left, 0.5))
                        self.retry_at = 0.0  # a flush does not wait for a back-off
                        continue
                    flags, prefetch = self._take_work()
                if not (self._lend() and self._round({**flags, "write": True}, prefetch)):
                    break
                with self.cv:
                    if self.waiting():  # what only the API server's next answer resolves: not asked again at once
                        self.cv.wait(min(left, 0.1))
        finally:
            with self.cv:
                self.flushing -= 1
        still = self.waiting()
        if still:
            log.warning("ipam: not all written within %gs: %s", timeout, "; ".join(still[:10]))
        return not still

    def close(self) -> None:
        """Nothing is written from now on: a stopped daemon's last flush is done. Another daemon of this node
        (started after it) writes the records from its own knowledge; a write of this one's, older, would undo
        its entries."""
        with self.cv:
            self.closed = True
            self.cv.notify_all()

    def _take_work(self) -> tuple[dict[str, bool], set[tuple[str, int]]]:
        """What was asked of a round, taken (with the lock held)."""
        flags = dict(self.flags)
        for k in ("write", "recover", "other"):
            self.flags[k] = False
        prefetch, self.prefetching = self.prefetching, set()
        return flags, prefetch

    def waiting(self) -> list[str]:
        """What is left to write (for a flush that timed out)."""
        a = self.a
        out = [f"working: {k}" for k, v in self.flags.items() if v] + (["busy"] if self.busy or self.lending else [])
        out += [f"ask {k} on {b} to settle" for k, b in self._asks_over()]
        for h in a.held.values():
            if h.lost:
                out.append(f"{h.name}: lost")
            if h.lending:
                out.append(f"{h.name}: lending {sorted(h.lending)}")
            if h.asked.keys() - h.answered:
                out.append(f"{h.name}: requests {sorted(h.asked.keys() - h.answered)}")
            if changes := self._changes(h):
                out.append(f"{h.name}: {len(changes)} to write")
        out += [f"{b.block}: lent {b.address} to write" for b in a.borrowed.values() if self._to_write(b)]
        out += [f"{b.block}: lent {b.address} to give back" for b in a.borrowed.values() if self._to_return(b)]
        return out

    # ------------------------------------------------------------------------------------------------ the loop

    def start(self, stop: threading.Event) -> None:
        self.thread = threading.Thread(target=self.run, args=(stop,), name="ipam-blocks", daemon=True)
        self.thread.start()
        threading.Thread(target=self.lend_loop, args=(stop,), name="ipam-lend", daemon=True).start()

    def lend_loop(self, stop: threading.Event) -> None:
        """Answering requests has a thread of its own: a borrower's ADD waits for it, never for a quiet moment."""
        backoff = 1.0
        while not stop.is_set() and not self.closed:
            with self.cv:
                self.cv.wait_for(lambda: self.flags["lend"] or stop.is_set(), 1.0)
                if not self.flags["lend"]:
                    continue
                self.flags["lend"] = False
                self.lending = True
            try:
                ok = self._lend()
            except Exception:
                log.exception("ipam: answering requests failed; trying again")
                ok = False
            with self.cv:
                self.lending = False
                self.cv.notify_all()
                if not ok:
                    self.flags["lend"] = True
            if not ok and stop.wait(backoff):
                return
            backoff = 1.0 if ok else min(backoff * 2, MAX_BACKOFF)

    def run(self, stop: threading.Event) -> None:
        """Until stopped with nothing left to write (a stopping daemon flushes what it knows)."""
        while True:
            with self.cv:
                self.busy = False
                self.cv.notify_all()
                if self.closed or (stop.is_set() and not (self.waiting() and self.flushing)):
                    return  # stopping: what is left is the stopping daemon's flush's (done here without a thread)
                self.cv.wait_for(self._due, 1.0)
                if not self._due() or self.closed:
                    continue
                self.busy = True
                flags, prefetch = self._take_work()
            try:
                ok = self._round(flags, prefetch)
            except Exception:
                log.exception("ipam: the block worker failed; trying again")
                ok = False
            with self.cv:
                if ok:
                    self.backoff = 1.0
                else:
                    self.retry_at = time.monotonic() + self.backoff
                    self.backoff = min(self.backoff * 2, MAX_BACKOFF)
                    self.flags["other"] = True

    def _due(self) -> bool:
        work = any(v for k, v in self.flags.items() if k != "lend") or bool(self.prefetching)
        return work and time.monotonic() >= self.retry_at

    def _round(self, flags: dict[str, bool], prefetch: set[tuple[str, int]]) -> bool:
        ok = self._recover() and self._settle_asks()
        ok = ok and self._prefetch(prefetch) and self._borrowed()
        if ok and flags["write"]:
            if not self.flushing:
                self.quiet(limit=WRITE_LIMIT)
            ok = self._write()
        return ok

    # ------------------------------------------------------------------------------------------------ lending

    def _lend(self) -> bool:
        a = self.a
        with a._lock:
            todo = [h for h in a.held.values() if not h.lost and h.asked.keys() - h.answered]
        for h in todo:
            with a._lock:
                lent, answered = self._grants(h)
                rv = h.rv
                a.save()
            a.write_record()  # what is being lent, on disk before the grant is
            try:
                rec = a.store.grant(h.name, rv, lent, answered)
            except (Conflict, Gone):
                with a._lock:
                    self._undo(h, lent, answered)  # not written: the next version the watch shows is asked again
                a.write_record()
                continue
            except StoreUnavailable as e:
                log.warning("cannot answer the requests on block %s: %s", h.name, e)
                with a._lock:
                    h.answered.difference_update(answered)  # asked again; what may be lent stays so until seen
                return False
            a.seen(rec, "answer")
            if lent:
                log.info("network %s: lent %s of block %s to %s", h.network, ", ".join(lent), h.net,
                         ", ".join(sorted({e["node"] for e in lent.values()})))  # fmt: skip
        return True

    def _grants(self, h: Held) -> tuple[dict[str, dict[str, Any]], list[str]]:
        """What to lend each request not answered yet: its exact addresses when free, else one free address;
        marked as being lent (on the version h.rv) before the write."""
        a = self.a
        layout = a.layouts.get((h.network, h.family_set))
        usable = layout.usable(h.net) if layout is not None else 0
        busy = h.busy()
        for off in h.written:
            busy |= 1 << off  # freed here, its removal from `used` not written yet: borrowers would refuse it
        lent: dict[str, dict[str, Any]] = {}
        answered = []
        for key, req in sorted(h.asked.items()):
            if key in h.answered:
                continue
            answered.append(key)
            node = str(req.get("node") or "")
            if not node or node == a.node:
                continue
            offs = []
            for text in req.get("addresses") or []:
                try:
                    off = int(ipaddress.ip_address(str(text))) - int(h.net.network_address)
                except ValueError:
                    continue
                pool = a.pools.get(h.network)
                free = 0 <= off < h.net.num_addresses and not busy >> off & 1
                if free and pool is not None and pool.reservable(h.address(off)) is None:
                    offs.append(off)
            if not req.get("addresses") and (off := lowest(usable & ~busy)) >= 0:
                offs.append(off)
            for off in offs:
                busy |= 1 << off
                h.lending[off] = [h.rv, h.rv == h.watched]
                lent[str(h.address(off))] = {"node": node, "request": key}
        h.answered.update(answered)
        return lent, answered

    def _undo(self, h: Held, lent: dict[str, dict[str, Any]], answered: list[str]) -> None:
        for text in lent:
            h.lending.pop(int(ipaddress.ip_address(text)) - int(h.net.network_address), None)
        h.answered.difference_update(answered)
        self.a.save()

    # ------------------------------------------------------------------------------------------------ lost blocks

    def _recover(self) -> bool:
        a = self.a
        with a._lock:
            lost = [h for h in a.held.values() if h.lost and not h.pending]
        for h in lost:
            if a.drop_unused(h):
                continue
            if h.taker is None and not self._claim_again(h):
                return False
            if h.taker is not None and not self._hand_over(h):
                return False
        return True

    def _claim_again(self, h: Held) -> bool:
        a = self.a
        with a._lock:
            used = {str(h.address(off)): holder_doc(c) for off, c in h.local.items()}
            lent = {str(h.address(off)): doc for off, doc in h.lent.items()}
        rec = BlockRecord(h.name, h.network, str(h.net), a.node, a.node_in_cluster, used, lent)
        try:
            got = a.store.create(rec)
        except Taken as t:
            if isinstance(t.holder, BlockRecord) and t.holder.node == a.node:
                got = t.holder
            else:
                with a._lock:
                    h.taker = t.holder if isinstance(t.holder, BlockRecord) else None
                    if h.taker is None:  # not a block at all now: nothing to give from, nothing to hand over
                        log.error("block %s: its name is taken by %s; its addresses in use stay with their "
                                  "containers, none is given from it", h.name, t.foreign)  # fmt: skip
                        h.lost, h.taker = True, BlockRecord(h.name, h.network, str(h.net), "?")
                return True
        except StoreUnavailable as e:
            a.last_error = str(e)
            return False
        log.warning("network %s: claimed block %s again, with its %d addresses in use", h.network, h.net, len(used))
        a.seen(got, "answer")
        with a._lock:
            a.save()
        a.write_record()
        return True

    def _hand_over(self, h: Held) -> bool:
        """Another node holds the block now: this node's containers' addresses in it are recorded there as lent
        to this node (what the other node gave meanwhile cannot be known: a conflict is logged), and the block
        leaves this node."""
        a = self.a
        taker = h.taker
        assert taker is not None
        with a._lock:
            uses = dict(h.local)
            seen = a.view.get(h.name)
        if taker.node != "?" and uses:
            mark = {"node": a.node, "request": "recovered", "nodeInCluster": a.node_in_cluster}
            entries = {str(h.address(o)): {**mark, **holder_doc(c)} for o, c in uses.items()}
            clash = [t for t in entries if t in taker.used or t in taker.lent]
            if clash:
                log.error("network %s: node %s holds block %s now and records %s as its own: held by this node's "
                          "containers too", h.network, taker.node, h.net, ", ".join(clash))  # fmt: skip
            try:
                a.store.grant(h.name, seen.rv if seen is not None else taker.rv, entries, [])
            except Conflict:
                return True  # another version: tried again with it
            except Gone:
                with a._lock:
                    h.taker = None  # gone again: claimed again instead
                return True
            except StoreUnavailable as e:
                a.last_error = str(e)
                return False
        with a._lock:
            for off, c in uses.items():
                a.borrowed[(h.name, off)] = Borrowed(h.name, h.network, h.family_set, h.address(off), "recovered", c,
                                                     written=True)  # fmt: skip
            a.held.pop(h.name, None)
            a.save()
        a.write_record()
        log.warning("network %s: block %s left this node; its %d addresses in use are lent to it by node %s",
                    h.network, h.net, len(uses), taker.node)  # fmt: skip
        return True

    # ------------------------------------------------------------------------------------------------ asks

    def _asks_over(self) -> list[tuple[str, str]]:
        """The asks this node recorded that no ADD waits for any more (those of a daemon killed among them)."""
        a = self.a
        return [(k, b) for k, b in a.asking.items() if k not in a.asks]

    def _settle_asks(self) -> bool:
        """Each ask that is over withdrawn, and its block read: what it lent this node for it and nobody uses is
        given back (_borrowed), as this node does not follow other nodes' blocks. Then forgotten."""
        a = self.a
        with a._lock:
            over = self._asks_over()
        for key, name in over:
            try:
                begun = a.begin_read()
                rec = a.store.get(name)
                if rec is not None and key in rec.requests:
                    a.store.ask(name, rec.uid, key, None)
                    begun = a.begin_read()
                    rec = a.store.get(name)  # a grant made before the withdrawal is in this version
            except Gone:
                rec = None
            except StoreUnavailable as e:
                a.last_error = str(e)
                return False
            if rec is not None:
                a.seen(rec, "read", begun)
            with a._lock:
                a.asking.pop(key, None)
                a.save()
        if over:
            a.write_record()
        return True

    # ------------------------------------------------------------------------------------------------ borrowed

    def _to_write(self, b: Borrowed) -> bool:
        return b.claim is not None and not b.written and b.request != "gone"

    def _to_return(self, b: Borrowed) -> bool:
        return b.claim is None and not b.pending and not (b.request and b.request in self.a.asks)

    def _borrowed(self) -> bool:
        """Each borrowed address's holder written into its lender's record, and each free one nobody asked for
        given back: marked `returning` first, so that no ADD takes it while it goes."""
        a = self.a
        with a._lock:
            todo = [(k, b) for k, b in a.borrowed.items() if self._to_write(b) or self._to_return(b)]
            for _, b in todo:
                b.returning = b.claim is None
        try:
            return self._write_borrowed(todo)
        finally:
            with a._lock:
                for key, b in todo:
                    if b.returning and a.borrowed.get(key) is b:
                        b.returning = False  # not given back (the store is away): free to take again
                a.updated.notify_all()

    def _write_borrowed(self, todo: list[tuple[tuple[str, int], Borrowed]]) -> bool:
        a = self.a
        for key, b in todo:
            entry = None
            if b.claim is not None:
                entry = {"node": a.node, "request": b.request or "recovered", "nodeInCluster": a.node_in_cluster,
                         **holder_doc(b.claim)}  # fmt: skip
            try:
                ok = a.store.update_lent(b.block, str(b.address), a.node, entry)
            except Gone:
                ok = False
            except StoreUnavailable as e:
                a.last_error = str(e)
                return False
            with a._lock:
                if entry is None and a.borrowed.get(key) is b:
                    del a.borrowed[key]
                elif entry is not None:
                    b.written = True
                    if not ok:
                        log.error("address %s of network %s is no longer lent to this node; %s uses it", b.address,
                                  b.network, b.claim.holder() if b.claim else "?")  # fmt: skip
        return True

    def _prefetch(self, keys: set[tuple[str, int]]) -> bool:
        a = self.a
        for key in keys:
            with a._lock:
                layout = a.layouts.get(key)
                if layout is None or key in a.claiming or a.free_count(layout) >= layout.size // 4:
                    continue
                a.claiming.add(key)
            a.claim_reserved(layout, key, on_add_path=False)
        return True

    # ------------------------------------------------------------------------------------------------ writing

    def _changes(self, h: Held) -> dict[str, dict[str, Any] | None]:
        if h.lost:
            return {}
        want = {off: holder_doc(c) for off, c in h.local.items()}
        changes: dict[str, dict[str, Any] | None] = {
            str(h.address(off)): doc for off, doc in want.items() if h.written.get(off) != doc
        }
        changes.update({str(h.address(off)): None for off in h.written if off not in want})
        return changes

    def _mark(self, h: Held) -> bool | None:
        """What the block's record should say of whether its node is a Node of the cluster, when it says
        otherwise (the Node registered, or deleted, since the block was claimed); None when it says what is so."""
        seen = self.a.view.get(h.name)
        if h.lost or seen is None or seen.node_in_cluster == self.a.node_in_cluster:
            return None
        return self.a.node_in_cluster

    def _write(self) -> bool:
        a = self.a
        with a._lock:
            todo = [(h, self._changes(h), h.uid, self._mark(h)) for h in a.held.values()]
        first = True
        for h, changes, uid, mark in todo:
            if not changes and mark is None:
                continue
            if not first:
                faults.point("mid-write-behind")
            first = False
            try:
                rec = a.store.write_used(h.name, uid, changes, node_in_cluster=mark)
            except Gone:
                continue  # the watch says so: claimed again, then written
            except StoreUnavailable as e:
                a.last_error = str(e)
                return False
            a.seen(rec, "answer")
        return True
