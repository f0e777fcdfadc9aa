"""HTTP/1.1 on a unix socket: the Multus-thick-compatible CNI API and the operator's endpoints.

One loop, on a thread of its own, accepts and reads every connection (a selector over non-blocking sockets);
only a complete request reaches a worker thread (workers.py), which serves it (api.py) and writes the answer
itself, so an idle or slow connection costs a file descriptor and a little memory, never a thread, and a served
request goes from the loop to its worker once and never back. What the loop enforces, before any work:
- the peer's uid (SO_PEERCRED) must be allowed;
- at most `maxConnections` connections, and `maxConnectionsPerPeer` from one process (a client holding many
  connections open cannot starve the runtime's shims, which are one process per request);
- the request's head and body must arrive within `headerTimeout`, the head within 64 KiB, the body within
  `maxRequestBytes` and declared by Content-Length;
- at most `maxInFlight` requests are served at once; more wait in a queue (at most `maxQueued`, each up to
  `queueTimeout`) and are served in turn; only beyond that is the answer "try again later" (CNI code 11). A
  request whose client hung up while it waited is not started.
Every answer, to anything (non-HTTP bytes, unknown methods and paths included), is a CNI error object in JSON.
A client that asks with `X-Netcomp-Shim: 1` gets "102 Processing" as its request is started: the netcomp shim
then knows the daemon took it. `POST /healthz` (Multus's shim's readiness check) says whether a CNI request would
be taken now; `GET /healthz` only that the daemon is alive. The loop also calls `on_tick` every `tick_every`
seconds (the watchdog: a loop that is stuck stops feeding it).

Issue 14 measured the asyncio loop this replaces at 0.4 ms of CPU per request (a task, a stream reader and
writer, futures chained from the worker back to the loop, the loop woken to write the answer): 40% of the
daemon's Python time per ADD+DEL. The HTTP itself is http.py's."""

from __future__ import annotations

import contextlib
import heapq
import json
import logging
import os
import selectors
import socket
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from netcomp.cni.codes import E_DECODE, E_INVALID_CONFIG, E_OTHER, E_PEER, E_TOO_LARGE, E_TRY_LATER
from netcomp.daemon import api, http, protocol
from netcomp.daemon.metrics import Metrics
from netcomp.daemon.workers import Workers
from netcomp.delegate.delegator import Delegator

log = logging.getLogger("netcomp.server")
MAX_HEAD = 64 * 1024
LINGER_SECONDS, LINGER_BYTES = 2.0, 64 * 1024 * 1024
WRITE_TIMEOUT = 30.0
_GET = (protocol.HEALTHZ_PATH, protocol.READYZ_PATH, protocol.METRICS_PATH)
_POST = (protocol.CNI_PATH, protocol.DELEGATE_PATH, protocol.HEALTHZ_PATH)  # Multus's shim POSTs /healthz
_READING, _QUEUED, _LINGER = "reading", "queued", "linger"
_PROCESSING = b"HTTP/1.1 102 Processing\r\n\r\n"
TOO_MANY, BUSY = "too many connections; try again later", "netcomp is busy or stopping; try again later"


@dataclass
class Limits:
    allowed_uids: set[int] = field(default_factory=lambda: {0})
    max_in_flight: int = 64
    max_queued: int = 1024
    queue_timeout: float = 30.0
    max_connections: int = 1024
    max_per_peer: int = 64
    header_timeout: float = 5.0
    max_body: int = 1024 * 1024


@dataclass(eq=False, slots=True)
class _Conn:
    """A connection while the loop has it: being read, waiting for a slot, or lingering after a refusal."""

    sock: socket.socket
    pid: int
    state: str = _READING
    deadline: float = 0.0
    buf: bytearray = field(default_factory=bytearray)
    head: tuple[str, str, dict[str, str]] | None = None
    need: int = 0  # bytes of body expected after the head
    left: int = 0  # bytes a lingering connection may still send
    body: bytes = b""
    mine: bool = True  # the loop's; False once a worker has it (the worker writes the answer and closes)


class Server:
    def __init__(
        self,
        sock: socket.socket,
        delegator: Delegator,
        metrics: Metrics,
        *,
        limits: Limits,
        views: Mapping[str, Callable[[], Any]],
        actions: Mapping[str, Callable[[], Any]] = {},
    ) -> None:
        """`views`: the operator's GET endpoints by path, each a function giving the JSON document (/status,
        /attachments, /ipam); `actions`: POST endpoints that do something and give a JSON document (/ipam/gc).
        Both run on workers of their own, apart from the CNI requests' slots."""
        # Bind nothing here: the listening socket is made (or inherited from systemd) by the caller.
        self.sock = sock
        self.delegator = delegator
        self.metrics = metrics
        self.limits = limits
        self.views = dict(views)
        self.actions = dict(actions)
        self.ready = threading.Event()
        self.draining = threading.Event()
        self.on_tick: Callable[[], None] = lambda: None
        self.tick_every = 0.5
        self.served = 0
        self._busy = 0
        self._waiting = 0
        self._last_change = 0.0  # time.monotonic() of the last request taken or finished
        # Notified whenever requests in flight or queued change (drain waits on it; so can tests and tools). Its
        # lock also guards the connection counts, which workers change as they close theirs.
        self.changed = threading.Condition()
        self._conns = 0
        self._per_peer: Counter[int] = Counter()
        self._requests = Workers("request", limits.max_in_flight)
        self._others = Workers("view", 4)  # views, metrics, actions: never in the CNI requests' way
        self._sel = selectors.DefaultSelector()
        self._queue: deque[_Conn] = deque()  # the loop's own
        self._timers: list[tuple[float, int, _Conn]] = []  # (deadline, seq, conn): a heap, stale ones skipped
        self._seq = 0
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._wake_lock = threading.Lock()  # a worker never writes to the pipe once the loop closed it
        self._stop = False
        self._thread: threading.Thread | None = None

    # ---------------------------------------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Start serving on a thread of its own; the socket is being served when this returns."""
        self.sock.setblocking(False)
        self._sel.register(self.sock, selectors.EVENT_READ, None)
        self._sel.register(self._wake_r, selectors.EVENT_READ, self)
        self._thread = threading.Thread(target=self._run, name="serve", daemon=True)
        self._thread.start()

    def enter(self) -> None:
        with self.changed:
            self._busy += 1
            self._last_change = time.monotonic()
            self.changed.notify_all()
        self.metrics.in_flight.inc()

    def leave(self) -> None:
        self.metrics.in_flight.dec()
        with self.changed:
            self._busy -= 1
            self.served += 1
            self._last_change = time.monotonic()
            self.changed.notify_all()
            wake = bool(self._waiting)
        if wake:
            self._wake()  # a slot is free for the next in the queue

    def wait_quiet(self, settle: float, limit: float) -> bool:
        """Until no request has been in flight or queued for `settle` seconds, or `limit` seconds passed (False):
        for work that must not compete with requests for the CPU, such as the cluster's writes."""
        deadline = time.monotonic() + limit
        with self.changed:
            while True:
                now = time.monotonic()
                if now >= deadline:
                    return False
                if self._busy or self._waiting:
                    self.changed.wait(deadline - now)
                    continue
                quiet_for = now - self._last_change
                if quiet_for >= settle:
                    return True
                self.changed.wait(min(settle - quiet_for, deadline - now))

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Until predicate() (about in_flight, queued, served) holds, or timeout."""
        with self.changed:
            return self.changed.wait_for(predicate, timeout)

    @property
    def in_flight(self) -> int:
        return self._busy

    @property
    def queued(self) -> int:
        return self._waiting

    def drain(self, timeout: float) -> bool:
        """Stop taking work; wait up to timeout for what is in flight (answered by then). True when all was."""
        self.draining.set()
        self._wake()  # what waits in the queue is told to try again later
        return self.wait_for(lambda: self._busy == 0, timeout)

    def shutdown(self) -> None:
        """Stop the loop (every connection it still has is closed without an answer) and the workers."""
        self._stop = True
        self._wake()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._requests.shutdown()
        self._others.shutdown()

    def _wake(self) -> None:
        with self._wake_lock:
            if self._wake_w >= 0:
                with contextlib.suppress(BlockingIOError):  # full: the loop is being woken already
                    os.write(self._wake_w, b"\0")

    # ---------------------------------------------------------------------------------------------- the loop

    def _run(self) -> None:
        next_tick = time.monotonic()
        try:
            while not self._stop:
                now = time.monotonic()
                if now >= next_tick:
                    try:
                        self.on_tick()
                    except Exception:
                        log.exception("tick failed")
                    next_tick = now + self.tick_every
                due = min(next_tick, self._timers[0][0]) if self._timers else next_tick
                for key, _ in self._sel.select(max(0.0, due - time.monotonic())):
                    try:
                        if key.data is None:
                            self._accept()
                        elif key.data is self:
                            with contextlib.suppress(BlockingIOError):
                                os.read(self._wake_r, 4096)
                        else:
                            self._readable(key.data)
                    except Exception:
                        log.exception("bug while serving a connection")
                        if isinstance(key.data, _Conn) and key.data.mine:
                            body = protocol.error_body(E_OTHER, "internal error", "this is a bug in netcomp")
                            self._answer_now(key.data, 500, body)
                self._expire(time.monotonic())
                self._start_queued()
        finally:
            for key in list(self._sel.get_map().values()):
                if isinstance(key.data, _Conn):
                    self._close(key.data)
            for c in self._queue:
                self._close(c)
            self._sel.close()
            with self._wake_lock:
                os.close(self._wake_r)
                os.close(self._wake_w)
                self._wake_r = self._wake_w = -1

    def _accept(self) -> None:
        lim = self.limits
        while True:
            try:
                sock, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:  # out of fds, say: what is waiting stays in the backlog
                log.error("cannot accept a connection: %s", e)
                return
            pid, uid = http.peer(sock)
            with self.changed:
                conns = self._conns
                full = conns >= lim.max_connections or self._per_peer[pid] >= lim.max_per_peer
                if not full:
                    conns = self._conns = conns + 1
                    self._per_peer[pid] += 1
            if full:
                self.metrics.rejected.labels("connections").inc()
                with contextlib.suppress(OSError):
                    sock.send(
                        http.response(503, protocol.error_body(E_TRY_LATER, "too many connections; try again later"))
                    )
                sock.close()
                continue
            self.metrics.connections.set(conns)
            sock.setblocking(False)
            c = _Conn(sock, pid)
            if uid not in lim.allowed_uids:
                self.metrics.rejected.labels("peer").inc()
                msg = f"peer uid {uid} may not use the netcomp socket"
                self._refuse(c, http.Refuse(403, E_PEER, msg, "allowedUids in netcomp.yaml", linger=True), new=True)
                continue
            self._sel.register(sock, selectors.EVENT_READ, c)
            self._timer(c, time.monotonic() + lim.header_timeout)

    def _timer(self, c: _Conn, deadline: float) -> None:
        c.deadline = deadline
        self._seq += 1
        heapq.heappush(self._timers, (deadline, self._seq, c))

    def _expire(self, now: float) -> None:
        while self._timers and self._timers[0][0] <= now:
            deadline, _, c = heapq.heappop(self._timers)
            if c.deadline != deadline or not c.mine:
                continue  # rescheduled, closed, or a worker's since
            if c.state == _READING:
                self.metrics.rejected.labels("timeout").inc()
                msg = f"request not complete within {self.limits.header_timeout:g}s"
                self._refuse(c, http.Refuse(408, E_DECODE, msg))
            elif c.state == _QUEUED:
                self._dequeue(c)
                self.metrics.rejected.labels("busy").inc()
                self._refuse(c, http.Refuse(429, E_TRY_LATER, BUSY))
            else:
                self._close(c)

    def _readable(self, c: _Conn) -> None:
        try:
            data = c.sock.recv(1 << 20 if c.state == _LINGER else 65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            log.debug("client went away: %s", type(e).__name__)
            data = None
        if c.state == _LINGER:
            c.left -= len(data or b"")
            if not data or c.left <= 0:
                self._close(c)
            return
        if c.state == _QUEUED:
            if not data and http.hung_up(c.sock):  # left the queue; a half-close alone still waits its answer
                log.info("a client hung up while its request waited; not started")
                self._dequeue(c)
                self._close(c)
            elif not data:
                self._sel.unregister(c.sock)  # half-closed: nothing more to read, checked again at its start
            return
        if not data:
            log.debug("client went away before its request was complete")
            self._close(c)
            return
        c.buf += data
        try:
            complete = self._parse(c)
        except http.Refuse as r:
            if r.status == 413:
                self.metrics.rejected.labels("size").inc()
            self._refuse(c, r)
            return
        if complete:
            self._route(c)

    def _parse(self, c: _Conn) -> bool:
        """Whether the request is complete; http.Refuse when it is not one to serve."""
        if c.head is None:
            end = c.buf.find(b"\r\n\r\n", 0, MAX_HEAD + 4)
            if end < 0:
                if len(c.buf) > MAX_HEAD:
                    raise http.Refuse(431, E_DECODE, "request head over 64 KiB", linger=True)
                return False
            c.head = http.parse_head(bytes(c.buf[: end + 4]))
            del c.buf[: end + 4]
            if c.head[0] == "POST":
                c.need = self._length(c.head[2])
        if len(c.buf) < c.need:
            return False
        c.body = bytes(c.buf[: c.need])
        c.buf = bytearray()
        return True

    def _length(self, headers: dict[str, str]) -> int:
        if "transfer-encoding" in headers:
            raise http.Refuse(411, E_DECODE, "send the request with a Content-Length, not chunked", linger=True)
        length = headers.get("content-length")
        if length is None or not length.isdigit() or len(length) > 12:
            raise http.Refuse(411, E_DECODE, "a request needs a Content-Length", linger=True)
        n = int(length)
        if n > self.limits.max_body:
            raise http.Refuse(
                413, E_TOO_LARGE, f"request of {n} bytes is over the limit of {self.limits.max_body}", linger=True
            )
        return n

    # ---------------------------------------------------------------------------------------------- requests

    def _route(self, c: _Conn) -> None:
        assert c.head is not None
        method, path, _ = c.head
        if method == "GET" and path in (protocol.HEALTHZ_PATH, protocol.READYZ_PATH):
            if path == protocol.HEALTHZ_PATH:
                self._answer_now(c, 200, b'{"ok":true}')
            else:
                ready = self.ready.is_set() and not self.draining.is_set()
                self._answer_now(c, 200 if ready else 503, json.dumps({"ready": ready}).encode())
        elif method == "GET" and (path == protocol.METRICS_PATH or path in self.views):
            view = self.metrics.render if path == protocol.METRICS_PATH else self.views[path]
            ctype = "text/plain; version=0.0.4" if path == protocol.METRICS_PATH else "application/json"
            self._hand_over(c, self._others, lambda: _document(view, ctype))
        elif method == "POST" and path in self.actions:
            action = self.actions[path]
            self._hand_over(c, self._others, lambda: _document(action, "application/json"))
        elif method == "POST" and path == protocol.HEALTHZ_PATH:
            self._readiness(c)
        elif method == "POST" and path in _POST:
            self._take(c)
        elif path in _GET or path in _POST or path in self.views or path in self.actions:
            msg = f"method {method[:20]} not allowed on {path[:100]}"
            self._answer_now(c, 405, protocol.error_body(E_INVALID_CONFIG, msg))
        else:
            self._answer_now(c, 404, protocol.error_body(E_INVALID_CONFIG, f"no such endpoint {path[:100]!r}"))

    def _readiness(self, c: _Conn) -> None:
        """POST /healthz: Multus's shim asks it before every ADD and CHECK (polling every 100 ms for up to 60 s
        while the answer is not 200) and once before a DEL. It answers whether a CNI request would be taken now,
        so that the shim waits out a daemon that is stopping (its connection then waits in the socket unit's
        backlog for the next one) instead of sending a request that is refused. GET /healthz stays liveness."""
        if self.ready.is_set() and not self.draining.is_set():
            self._answer_now(c, 200, b'{"ok":true}')
        else:
            what = "stopping" if self.draining.is_set() else "starting"
            self._answer_now(c, 503, protocol.error_body(E_TRY_LATER, f"netcomp is {what}; try again later"))

    def _take(self, c: _Conn) -> None:
        """A CNI request: started now when a slot is free, else queued (or refused: queue full, stopping)."""
        if not self.ready.is_set():
            self._answer_now(c, 503, protocol.error_body(E_TRY_LATER, "netcomp is starting; try again later"))
            return
        with self.changed:
            free = self._busy < self.limits.max_in_flight and not self._queue
            room = self._waiting < self.limits.max_queued and not self.draining.is_set()
        if free:
            self._start(c, check=False)
        elif not room:
            self.metrics.rejected.labels("busy").inc()
            self._answer_now(c, 429, protocol.error_body(E_TRY_LATER, BUSY))
        else:
            c.state = _QUEUED
            self._queue.append(c)
            self._queue_changed(+1)
            self._timer(c, time.monotonic() + self.limits.queue_timeout)

    def _start_queued(self) -> None:
        while self._queue:
            with self.changed:
                if self._busy >= self.limits.max_in_flight and not self.draining.is_set():
                    return
            c = self._queue.popleft()
            self._queue_changed(-1)
            self._start(c, check=True)  # told to try again later when the daemon is stopping

    def _dequeue(self, c: _Conn) -> None:
        with contextlib.suppress(ValueError):
            self._queue.remove(c)
            self._queue_changed(-1)

    def _queue_changed(self, delta: int) -> None:
        with self.changed:
            self._waiting += delta
            self.changed.notify_all()
        self.metrics.queued.set(self._waiting)

    def _start(self, c: _Conn, *, check: bool) -> None:
        """Hand the request to a worker, which serves it and answers. `check`: it waited in the queue, and is
        not started if its client hung up meanwhile."""
        if self.draining.is_set():
            self._answer_now(c, 503, protocol.error_body(E_TRY_LATER, "netcomp is stopping; try again later"))
            return
        if check and http.hung_up(c.sock):
            log.info("a client hung up while its request waited; not started")
            self._close(c)
            return
        assert c.head is not None
        shim = c.head[2].get(protocol.SHIM_HEADER.lower()) == "1"
        path, body = c.head[1], c.body
        if shim:
            with contextlib.suppress(OSError):  # not blocking yet; a client that left: its request still runs
                c.sock.send(_PROCESSING)
        self._release(c)
        self.enter()

        def serve() -> None:
            try:
                if path == protocol.DELEGATE_PATH:
                    status, answer = api.delegate(self.delegator, body)
                else:
                    status, answer = api.cni(self.delegator, self.metrics, body, bare=shim)
                _send(c.sock, http.response(status, answer))
            finally:
                self.leave()
                self._closed(c)

        self._requests.submit(serve)

    # ---------------------------------------------------------------------------------------------- answers

    def _release(self, c: _Conn) -> None:
        """The loop lets go of the connection (a worker has it now, to write the answer and close): its timers
        are stale, and its writes block, up to WRITE_TIMEOUT."""
        with contextlib.suppress(KeyError, ValueError):
            self._sel.unregister(c.sock)
        c.mine = False
        c.sock.settimeout(WRITE_TIMEOUT)

    def _hand_over(self, c: _Conn, workers: Workers, answer: Callable[[], tuple[int, bytes, str]]) -> None:
        self._release(c)

        def serve() -> None:
            try:
                status, body, ctype = answer()
                _send(c.sock, http.response(status, body, ctype))
            finally:
                self._closed(c)

        workers.submit(serve)

    def _answer_now(self, c: _Conn, status: int, body: bytes) -> None:
        """A short answer from the loop, then close: it fits in the socket's buffer, or the client is not reading
        (and then gets nothing more)."""
        with contextlib.suppress(OSError):
            c.sock.send(http.response(status, body))
        self._close(c)

    def _refuse(self, c: _Conn, r: http.Refuse, *, new: bool = False) -> None:
        """The error, and with `linger` (the body was not read) the writing half closed and what the client still
        sends read and dropped (bounded), so that it reads the answer instead of failing on a reset. `new`: a
        connection not registered yet."""
        body = protocol.error_body(r.code, r.msg, r.details)
        if not r.linger:
            self._answer_now(c, r.status, body)
            return
        try:
            c.sock.send(http.response(r.status, body))
            c.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._close(c)
            return
        c.state, c.left, c.buf = _LINGER, LINGER_BYTES, bytearray()
        if new:
            self._sel.register(c.sock, selectors.EVENT_READ, c)
        self._timer(c, time.monotonic() + LINGER_SECONDS)

    def _close(self, c: _Conn) -> None:
        """The loop closes a connection of its own."""
        if not c.mine:
            return
        c.mine = False
        with contextlib.suppress(KeyError, ValueError):
            self._sel.unregister(c.sock)
        self._closed(c)

    def _closed(self, c: _Conn) -> None:
        """Closes the connection and counts it gone (the loop's or a worker's)."""
        c.sock.close()
        with self.changed:
            self._conns -= 1
            self._per_peer[c.pid] -= 1
            if not self._per_peer[c.pid]:
                del self._per_peer[c.pid]
            conns = self._conns
        self.metrics.connections.set(conns)


def _document(fn: Callable[[], Any], ctype: str) -> tuple[int, bytes, str]:
    """An operator's endpoint's answer: its document, or a CNI error when it failed."""
    try:
        doc = fn()
    except Exception as e:
        log.exception("an endpoint failed")
        return 500, protocol.error_body(E_OTHER, f"internal error: {type(e).__name__}: {e}", "a bug"), ctype
    if isinstance(doc, bytes):
        return 200, doc, ctype
    return 200, json.dumps(doc, indent=2).encode(), ctype


def _send(sock: socket.socket, data: bytes) -> None:
    try:
        sock.sendall(data)
    except OSError as e:  # the client left (or stopped reading for WRITE_TIMEOUT): nobody to tell
        log.debug("answer not sent: %s", type(e).__name__)


def listen(path: str) -> tuple[socket.socket, bool]:
    """The listening socket and whether it was inherited: from systemd (LISTEN_FDS, socket activation; the socket
    unit owns the file and its modes) or bound here, with its directory 0700 and the socket 0600."""
    if os.environ.get("LISTEN_PID") == str(os.getpid()) and int(os.environ.get("LISTEN_FDS", "0") or 0) >= 1:
        sock = socket.socket(fileno=3)
        sock.set_inheritable(False)  # plugins are exec'd without closing fds (cni/invoke.py)
        for k in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
            os.environ.pop(k, None)
        return sock, True
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    os.chmod(directory, 0o700)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(path)
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(128)
    return sock, False
