"""The loop half of the daemon's server: one thread reads every connection of its socket (a selector over
non-blocking sockets, so an idle or slow connection costs a file descriptor, never a thread) and refuses what may
not be served before any work: a peer uid that is not allowed, too many connections, a request not whole within
headerTimeout or larger than its bounds. A complete request goes to the Router (server.py), which answers it,
holds it in its queue or releases it to a worker. The loop does I/O only: it decides nothing about a request."""

from __future__ import annotations

import contextlib
import functools
import heapq
import logging
import os
import selectors
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable

from netcomp.cni.codes import E_DECODE, E_OTHER, E_PEER, E_TRY_LATER
from netcomp.daemon.server import http1, protocol
from netcomp.daemon.server.connections import LINGER, QUEUED, READING, WRITING, Conn, Limits, Router
from netcomp.daemon.server.ratelog import RateLimited
from netcomp.errors import printable
from netcomp.metrics import Metrics

log = logging.getLogger("netcomp.server")
LINGER_SECONDS, LINGER_BYTES = 2.0, 64 * 1024 * 1024
WRITE_TIMEOUT = 30.0
TOO_MANY = "too many connections; try again later"
BUSY = "netcomp is busy; try again later"
# accept(2) failing for want of fds or memory: stop accepting this long (what waits stays in the backlog), not
# woken for the same connection at once as asyncio's loop is (selector_events.py, _accept_connection).
ACCEPT_PAUSE = 1.0
# Connections accepted per round at most, so that a flood of connects does not hold off the tick and the timers.
ACCEPT_BATCH = 64
# accept(2)'s errors and the refusals of peers are logged once in this many seconds at most.
ACCEPT_LOG_EVERY = REFUSAL_LOG_EVERY = 60.0
_SPENT = http1.Incoming()  # what a connection the loop let go of holds instead of its request (never fed)


class Loop:
    """The thread that accepts and reads every connection, refuses what may not be served, and writes the answers
    a worker handed back; complete requests go to its `router`."""

    def __init__(self, sock: socket.socket, metrics: Metrics, limits: Limits, router: Router) -> None:
        self.sock = sock
        self.metrics = metrics
        self.limits = limits
        self.router = router
        self.on_tick: Callable[[], None] = lambda: None  # each tick_every s: a stuck loop stops feeding the watchdog
        self.tick_every = 0.5
        self._count_lock = threading.Lock()  # workers close connections too
        self._conns = 0
        self._per_peer: Counter[int] = Counter()
        self._sel = selectors.DefaultSelector()
        self._timers: list[tuple[float, int, Conn]] = []  # (deadline, seq, conn): a heap; stale ones skipped
        self._seq = 0
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._wake_lock = threading.Lock()  # nobody writes to the pipe once the loop closed it
        self._stop = False
        self._thread: threading.Thread | None = None
        self._accept_paused_until = 0.0
        self._accept_said = RateLimited(log, ACCEPT_LOG_EVERY, logging.ERROR)
        self._refusal_said = RateLimited(log, REFUSAL_LOG_EVERY)
        self._handed_back: list[tuple[Conn, memoryview]] = []  # answers' rests from workers, for the loop to write

    # ---------------------------------------------------------------------------------------------- the loop

    def start(self) -> None:
        """Serve on a thread of its own; the socket is being served when this returns."""
        self.sock.setblocking(False)
        self._sel.register(self.sock, selectors.EVENT_READ, None)
        self._sel.register(self._wake_r, selectors.EVENT_READ, self)
        self._thread = threading.Thread(target=self._run, name="serve", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the loop; every connection it still has is closed without an answer."""
        self._stop = True
        self.wake()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def wake(self) -> None:
        """Run a round of the loop soon (from any thread)."""
        with self._wake_lock:
            if self._wake_w >= 0:
                with contextlib.suppress(BlockingIOError):  # full: the loop is being woken already
                    os.write(self._wake_w, b"\0")

    def _run(self) -> None:
        next_tick = time.monotonic()
        try:
            while not self._stop:
                now = time.monotonic()
                if now >= next_tick:
                    self._guarded(self.on_tick, "tick failed")
                    next_tick = now + self.tick_every
                if self._accept_paused_until and now >= self._accept_paused_until:
                    self._guarded(self._resume_accepting, "bug while accepting again")
                due = min(next_tick, self._timers[0][0]) if self._timers else next_tick
                if self._accept_paused_until:
                    due = min(due, self._accept_paused_until)
                for key, _ in self._sel.select(max(0.0, due - time.monotonic())):
                    if key.data is None:
                        try:  # written out, not through _guarded: a request whole at its accept is read here
                            self._accept()
                        except Exception:
                            log.exception("bug while accepting a connection")
                    elif key.data is self:
                        with contextlib.suppress(BlockingIOError):
                            os.read(self._wake_r, 4096)
                    elif key.data.state == WRITING:
                        self._guarded(functools.partial(self._write, key.data), "bug while writing an answer")
                    else:
                        self._read(key.data)
                # A bug in one of these must not end the serving: every connection would wait for nothing.
                self._guarded(lambda: self._expire(time.monotonic()), "bug while expiring timers")
                self._guarded(self.router.after_round, "bug while starting queued requests")
                if self._handed_back:
                    self._guarded(self._take_back, "bug while taking back an answer to write")
        finally:
            for key in list(self._sel.get_map().values()):
                if isinstance(key.data, Conn):
                    self.close(key.data)
            for c in self.router.drop_held():
                self.close(c)
            self._sel.close()
            self.sock.close()  # what still waits in the backlog is refused (a shim tries again), not left hanging
            # In one section: a worker's answer handed back before it is taken here; after it, send_answer sees
            # the loop gone and closes the connection itself. None is left open and counted.
            with self._wake_lock:
                left, self._handed_back = self._handed_back, []
                os.close(self._wake_r)
                os.close(self._wake_w)
                self._wake_r = self._wake_w = -1
            for c, _ in left:
                self.closed(c)

    @staticmethod
    def _guarded(fn: Callable[[], object], what: str) -> None:
        try:
            fn()
        except Exception:
            log.exception(what)

    def _accept(self) -> None:
        lim = self.limits
        yielded = False
        for _ in range(ACCEPT_BATCH):
            try:
                sock, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:  # out of fds, say: what is waiting stays in the backlog, accepted once there is room
                self._accept_error(e)
                return
            pid, uid = http1.peer(sock)
            with self._count_lock:
                full = self._conns >= lim.max_connections or self._per_peer[pid] >= lim.max_per_peer
                if not full:
                    self._conns += 1
                    self._per_peer[pid] += 1
                    self.metrics.connections.set(self._conns)
            if full:
                self.metrics.rejected.labels("connections").inc()
                self.refused(Conn(sock, pid, uid), 503, TOO_MANY)
                with contextlib.suppress(OSError):
                    sock.send(http1.response(503, protocol.error_body(E_TRY_LATER, TOO_MANY)))
                sock.close()
                continue
            sock.setblocking(False)
            c = Conn(sock, pid, uid)
            if uid not in lim.allowed_uids:
                self.metrics.rejected.labels("peer").inc()
                msg = f"peer uid {uid} may not use the netcomp socket"
                self.refuse(c, http1.Refuse(403, E_PEER, msg, "allowedUids in netcomp.yaml", linger=True))
                continue
            self._read(c)  # the request may be whole already
            # A connect wakes the loop, often on the client's CPU before the client has written: giving up the CPU
            # once (sched_yield) lets it write first (docs/benchmarks.md). Once per round: a yield can cost a
            # busy CPU's time slice.
            nothing_yet = c.mine and c.state == READING and not c.registered and c.req.head is None and not c.req.buf
            if nothing_yet and not yielded:
                yielded = True
                os.sched_yield()
                self._read(c)
            if c.mine and c.state == READING and not c.registered:
                self.watch(c)
                self.timer(c, time.monotonic() + lim.header_timeout)

    def _resume_accepting(self) -> None:
        try:
            self._sel.register(self.sock, selectors.EVENT_READ, None)
            self._accept_paused_until = 0.0
        except OSError as e:  # epoll out of memory too: tried again after another pause, never given up
            log.error("cannot watch the listening socket again: %s; trying again in %g s", e, ACCEPT_PAUSE)
            self._accept_paused_until = time.monotonic() + ACCEPT_PAUSE

    def _accept_error(self, e: OSError) -> None:
        self._sel.unregister(self.sock)
        self._accept_paused_until = time.monotonic() + ACCEPT_PAUSE
        self._accept_said("cannot accept a connection: %s; accepting again in %g s", e, ACCEPT_PAUSE)

    def refused(self, c: Conn, status: int, msg: str) -> None:
        """Say in the log that a peer was refused, with its uid and pid, at most once a minute."""
        self._refusal_said("refused a request of pid %d (uid %d): %d %s", c.pid, c.uid, status, printable(msg, 200))

    def timer(self, c: Conn, deadline: float) -> None:
        c.deadline = deadline
        self._seq += 1
        heapq.heappush(self._timers, (deadline, self._seq, c))

    def _expire(self, now: float) -> None:
        while self._timers and self._timers[0][0] <= now:
            deadline, _, c = heapq.heappop(self._timers)
            if c.deadline != deadline or not c.mine:
                continue  # rescheduled, closed, or a worker's since
            if c.state == READING:
                self.metrics.rejected.labels("timeout").inc()
                msg = f"request not complete within {self.limits.header_timeout:g}s"
                self.refuse(c, http1.Refuse(408, E_DECODE, msg, linger=True))  # it may be sending still
            elif c.state == QUEUED:  # waited queueTimeout
                self.router.dropped(c)
                self.metrics.rejected.labels("busy").inc()
                self.refuse(c, http1.Refuse(429, E_TRY_LATER, BUSY))
            else:  # lingering, or a client that did not read its answer within WRITE_TIMEOUT
                self.close(c)

    def _read(self, c: Conn) -> None:
        try:
            self._readable(c)
        except Exception:
            log.exception("bug while serving a connection")
            if c.mine:
                if c.state == QUEUED:
                    self.router.dropped(c)
                with contextlib.suppress(Exception):
                    self.answer_now(c, 500, protocol.error_body(E_OTHER, "internal error", "this is a bug in netcomp"))

    def _readable(self, c: Conn) -> None:
        try:
            data: bytes | None = c.sock.recv(1 << 20 if c.state == LINGER else 65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            log.debug("client went away: %s", type(e).__name__)
            data = None
        if c.state == LINGER:
            c.left -= len(data or b"")
            if not data or c.left <= 0:
                self.close(c)
        elif c.state == QUEUED:
            if not data and http1.hung_up(c.sock):  # left the queue; a half-close alone still waits its answer
                log.info("a client hung up while its request waited; not started")
                self.router.dropped(c)
                self.close(c)
            elif not data:
                self._unregister(c)  # half-closed: nothing more to read; checked again at its start
        elif not data:
            log.debug("client went away before its request was complete")
            self.close(c)
        else:
            try:
                complete = c.req.feed(data, self.limits.max_body)
            except http1.Refuse as r:
                if r.status == 413:
                    self.metrics.rejected.labels("size").inc()
                self.refuse(c, r)
                return
            if complete:
                self.router.route(c)

    # ---------------------------------------------------------------------------------------------- answers

    def release(self, c: Conn, *, blocking: bool = True) -> None:
        """The loop lets go of the connection (a worker has it now, to write the answer and close): its timers
        are stale, and its writes block, up to WRITE_TIMEOUT (blocking), or not at all (for send_answer)."""
        self._unregister(c)
        c.mine = False
        c.req = _SPENT  # its timers hold it until their deadline; the worker has what it needs of the request
        if blocking:
            c.sock.settimeout(WRITE_TIMEOUT)

    def send_answer(self, c: Conn, data: bytes) -> None:
        """From a worker that has the connection (released with blocking=False): the answer written now as far as
        the socket takes it, the rest handed back to the loop, which writes it as the client reads (up to
        WRITE_TIMEOUT) and closes. A client that does not read holds a connection, never a worker."""
        try:
            n = c.sock.send(data)
        except BlockingIOError:
            n = 0
        except OSError as e:  # the client left: nobody to tell
            log.debug("answer not sent: %s", type(e).__name__)
            n = len(data)
        if n >= len(data):
            self.closed(c)
            return
        with self._wake_lock:
            handed = self._wake_w >= 0  # else the loop is gone: nobody to write the rest
            if handed:
                self._handed_back.append((c, memoryview(data)[n:]))
        if handed:
            self.wake()
        else:
            self.closed(c)

    def _take_back(self) -> None:
        with self._wake_lock:
            items, self._handed_back = self._handed_back, []
        deadline = time.monotonic() + WRITE_TIMEOUT
        for c, rest in items:
            c.mine, c.state, c.out = True, WRITING, rest
            if self.watch(c, selectors.EVENT_WRITE):
                self.timer(c, deadline)

    def _write(self, c: Conn) -> None:
        assert c.out is not None
        try:
            n = c.sock.send(c.out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            log.debug("answer not sent: %s", type(e).__name__)
            self.close(c)
            return
        c.out = c.out[n:]
        if not c.out:
            self.close(c)

    def answer_now(self, c: Conn, status: int, body: bytes) -> None:
        """A short answer from the loop, then close: it fits in the socket's buffer, or the client is not reading
        (and then gets nothing more)."""
        with contextlib.suppress(OSError):
            c.sock.send(http1.response(status, body))
        self.close(c)

    def refuse(self, c: Conn, r: http1.Refuse) -> None:
        """The error; with `linger` (the body was not read) the writing half closed and what the client still
        sends read and dropped (bounded), so that it reads the answer instead of failing on a reset."""
        body = protocol.error_body(r.code, r.msg, r.details)
        self.refused(c, r.status, r.msg)
        if not r.linger:
            self.answer_now(c, r.status, body)
            return
        try:
            c.sock.send(http1.response(r.status, body))
            c.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self.close(c)
            return
        c.state, c.left = LINGER, LINGER_BYTES
        self.watch(c)
        self.timer(c, time.monotonic() + LINGER_SECONDS)

    def watch(self, c: Conn, events: int = selectors.EVENT_READ) -> bool:
        """Keep reading the connection (a queued one: to see its client hang up), or writing it (EVENT_WRITE).
        False when epoll cannot take it (out of memory): the connection is closed, not kept counted unwatched."""
        if not c.registered:
            try:
                self._sel.register(c.sock, events, c)
            except OSError as e:
                log.error("cannot watch a connection: %s; closing it", e)
                self.close(c)
                return False
            c.registered = True
        return True

    def _unregister(self, c: Conn) -> None:
        if c.registered:
            c.registered = False
            self._sel.unregister(c.sock)

    def close(self, c: Conn) -> None:
        """The loop closes a connection of its own."""
        if not c.mine:
            return
        self._unregister(c)
        c.mine = False
        c.req, c.out = _SPENT, None
        self.closed(c)

    def closed(self, c: Conn) -> None:
        """Close the connection and count it gone (the loop's or a worker's)."""
        c.sock.close()
        with self._count_lock:
            self._conns -= 1
            self._per_peer[c.pid] -= 1
            if not self._per_peer[c.pid]:
                del self._per_peer[c.pid]
            self.metrics.connections.set(self._conns)
