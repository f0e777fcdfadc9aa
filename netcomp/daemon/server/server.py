"""HTTP/1.1 on a unix socket: the Multus-thick-compatible CNI API and the operator's endpoints (docs/delegation.md,
"The wire format"). The Server routes what its Loop (loop.py) reads: a CNI request runs on a worker (handlers.py),
at most `maxInFlight` at once and up to `maxQueued` more held in its queue for `queueTimeout`, beyond that "try
again later"; the operator's endpoints run on workers of their own; `/healthz` and `/readyz` are answered at once."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import socket
import threading
import time
import urllib.parse
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from netcomp import fsutil
from netcomp.cni.codes import E_INVALID_CONFIG, E_OTHER, E_TRY_LATER
from netcomp.daemon.server import handlers, http1, protocol
from netcomp.daemon.server.connections import QUEUED, Conn, Limits
from netcomp.daemon.server.loop import BUSY, Loop
from netcomp.daemon.server.workers import Workers
from netcomp.delegate.delegator import Delegator
from netcomp.metrics import Metrics

__all__ = ["Server", "listen"]
log = logging.getLogger("netcomp.server")
_GET = (protocol.HEALTHZ_PATH, protocol.READYZ_PATH, protocol.METRICS_PATH)
_POST = (protocol.CNI_PATH, protocol.DELEGATE_PATH, protocol.HEALTHZ_PATH)  # Multus's shim POSTs /healthz
_PROCESSING = b"HTTP/1.1 102 Processing\r\n\r\n"
STOPPING = "netcomp is stopping; try again later"
# The cluster's writes (network-status, events, EndpointSlices, the address blocks' write-behind) wait until no
# CNI request has been served for QUIET seconds, and never longer than QUIET_LIMIT (wait_quiet).
QUIET, QUIET_LIMIT = 0.05, 2.0


class Server:
    """The Router of its Loop: routing, the queue's admission, the workers, what is in flight."""

    def __init__(
        self,
        sock: socket.socket,
        delegator: Delegator,
        metrics: Metrics,
        *,
        limits: Limits,
        views: Mapping[str, Callable[[Mapping[str, str]], Any]],
        queries: Mapping[str, Callable[[bytes], Any]] = {},
    ) -> None:
        """`views`: the operator's GET endpoints by path, each a function of the query string's parameters giving
        the JSON document (/status, /attachments, /ipam?network=NAME); `queries`: its POST endpoints, each a
        function of the request's body (/explain, /ipam/gc). All run on workers of their own, apart from the CNI
        requests' slots."""
        self.loop = Loop(sock, metrics, limits, self)
        self.metrics = metrics
        self.delegator = delegator
        self.views = dict(views)
        self.queries = dict(queries)
        self.ready = threading.Event()
        # Why the daemon is not ready although it serves (a compile that does not finish: Daemon.stuck), or None.
        self.stuck: Callable[[], str | None] = lambda: None
        self.draining = threading.Event()
        self.served = 0
        self.in_flight = 0  # requests taken, not yet answered (under `changed`, as are queued and served)
        self.queued = 0  # len(held), for the other threads (under `changed`)
        self.held: deque[Conn] = deque()  # the queue: requests waiting for a worker (the loop's thread only)
        self._last_change = 0.0  # time.monotonic() of the last request taken or finished
        # Notified whenever requests in flight or queued change (drain waits on it; so can tests and tools).
        self.changed = threading.Condition()
        self._never = threading.Event()  # wait_quiet's sleep: an Event no one sets
        self._requests = Workers("request", limits.max_in_flight)
        self._others = Workers("view", 4)

    # ---------------------------------------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Start serving on a thread of its own; the socket is being served when this returns."""
        self.loop.start()

    def enter(self) -> bool:
        """A request taken in flight, under the lock drain() waits on (a drain never misses it); False, and
        nothing taken, once the daemon is draining."""
        with self.changed:
            if self.draining.is_set():
                return False
            self.in_flight += 1
            self._last_change = time.monotonic()
            self.changed.notify_all()
        self.metrics.in_flight.inc()
        return True

    def leave(self, *, counted: bool = False) -> None:
        """A request is done. `counted`: served was counted already (before its answer went out)."""
        self.metrics.in_flight.dec()
        with self.changed:
            self.in_flight -= 1
            self.served += 0 if counted else 1
            self._last_change = time.monotonic()
            self.changed.notify_all()
            waiting = self.queued
        if waiting:
            self.loop.wake()  # a slot is free for the next in the queue

    def wait_quiet(self, settle: float = QUIET, limit: float = QUIET_LIMIT) -> bool:
        """Until no request has been in flight or queued for `settle` seconds, or `limit` seconds passed (False):
        for work that must not compete with requests for the CPU, such as the cluster's writes. The waiter is never
        woken by a request's start or end: that would put it on the CPU and the GIL beside the request."""
        deadline = time.monotonic() + limit
        while True:
            with self.changed:
                busy, last = self.in_flight or self.queued, self._last_change
            now = time.monotonic()
            if now >= deadline:
                return False
            if not busy and now - last >= settle:
                return True
            self._never.wait(min((now if busy else last) + settle, deadline) - now)

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Until predicate() (about in_flight, queued, served) holds, or timeout."""
        with self.changed:
            return self.changed.wait_for(predicate, timeout)

    def drain(self, timeout: float) -> bool:
        """Stop taking work; wait up to timeout for what is in flight (answered by then). True when all was."""
        self.draining.set()
        self.loop.wake()  # what waits in the queue is told to try again later
        return self.wait_for(lambda: self.in_flight == 0, timeout)

    def shutdown(self) -> None:
        """Stop the loop (every connection still open is closed without an answer) and the workers."""
        self.loop.stop()
        self._requests.shutdown()
        self._others.shutdown()

    # ---------------------------------------------------------------------------------------------- routing

    def route(self, c: Conn) -> None:
        assert c.req.head is not None
        method, target, _ = c.req.head
        path, _, qs = target.partition("?")
        loop = self.loop
        if method == "GET" and path == protocol.HEALTHZ_PATH:
            loop.answer_now(c, 200, b'{"ok":true}')
        elif method == "GET" and path == protocol.READYZ_PATH:
            stuck = self.stuck()
            ready = self.ready.is_set() and not self.draining.is_set() and stuck is None
            doc = {"ready": ready, **({"why": stuck} if stuck else {})}
            loop.answer_now(c, 200 if ready else 503, json.dumps(doc).encode())
        elif method == "GET" and path == protocol.METRICS_PATH:
            self._hand_over(c, self.metrics.render, "text/plain; version=0.0.4")
        elif method == "GET" and path in self.views:
            view, args = self.views[path], dict(urllib.parse.parse_qsl(qs[:1024]))
            self._hand_over(c, lambda: view(args))
        elif method == "POST" and path in self.queries:
            query, body = self.queries[path], c.req.body
            self._hand_over(c, lambda: query(body))
        elif method == "POST" and path == protocol.HEALTHZ_PATH:
            self._readiness(c)
        elif method == "POST" and path in _POST:
            self._take(c)
        elif path in _GET or path in _POST or path in self.views or path in self.queries:
            msg = f"method {method[:20]} not allowed on {path[:100]}"
            loop.answer_now(c, 405, protocol.error_body(E_INVALID_CONFIG, msg))
        else:
            loop.answer_now(c, 404, protocol.error_body(E_INVALID_CONFIG, f"no such endpoint {path[:100]!r}"))

    def _readiness(self, c: Conn) -> None:
        """POST /healthz, which Multus's shim polls before its requests: whether a CNI request would be taken now,
        so that the shim waits out a daemon that is starting or stopping. GET /healthz stays liveness."""
        if self.ready.is_set() and not self.draining.is_set():
            self.loop.answer_now(c, 200, b'{"ok":true}')
        else:
            what = "stopping" if self.draining.is_set() else "starting"
            self.loop.answer_now(c, 503, protocol.error_body(E_TRY_LATER, f"netcomp is {what}; try again later"))

    # ---------------------------------------------------------------------------------------------- the queue

    def _take(self, c: Conn) -> None:
        """A CNI request: started now when a slot is free, else held in the queue (or refused: queue full,
        stopping)."""
        loop = self.loop
        if not self.ready.is_set() or self.draining.is_set():
            self._readiness(c)  # its 503: starting, or stopping
            return
        with self.changed:
            free = self.in_flight < loop.limits.max_in_flight and not self.held
            room = len(self.held) < loop.limits.max_queued and not self.draining.is_set()
        if free:
            self._start(c, waited=False)
        elif not room:
            self.metrics.rejected.labels("busy").inc()
            loop.refuse(c, http1.Refuse(429, E_TRY_LATER, BUSY))
        else:  # held until a slot is free, its client hangs up, or it waited queueTimeout (answered: busy)
            c.state = QUEUED
            self.held.append(c)
            self._held_changed()
            loop.watch(c)  # to see its client hang up
            loop.timer(c, time.monotonic() + loop.limits.queue_timeout)

    def after_round(self) -> None:
        """What the queue holds started while a slot is free (told to try again later once draining)."""
        while self.held:
            with self.changed:
                if self.in_flight >= self.loop.limits.max_in_flight and not self.draining.is_set():
                    return
            c = self.held.popleft()
            self._held_changed()
            self._start(c, waited=True)

    def dropped(self, c: Conn) -> None:
        with contextlib.suppress(ValueError):
            self.held.remove(c)
            self._held_changed()

    def drop_held(self) -> list[Conn]:
        left, self.held = list(self.held), deque()
        self._held_changed()
        return left

    def _held_changed(self) -> None:
        with self.changed:
            self.queued = len(self.held)
            self.changed.notify_all()
        self.metrics.queued.set(len(self.held))

    # ---------------------------------------------------------------------------------------------- workers

    def _start(self, c: Conn, *, waited: bool) -> None:
        """Hand the request to a worker, which serves it and answers. A request whose client hung up (while it
        waited in the queue, say: `waited`) is not started."""
        loop = self.loop
        if not c.mine:  # closed meanwhile (a bug's answer)
            return
        if http1.hung_up(c.sock):
            log.info("a client hung up %s; not started", "while its request waited" if waited else "at once")
            loop.close(c)
            return
        assert c.req.head is not None
        shim = c.req.head[2].get(protocol.SHIM_HEADER.lower()) == "1"
        path, body = c.req.head[1].partition("?")[0], c.req.body
        if not self.enter():
            loop.answer_now(c, 503, protocol.error_body(E_TRY_LATER, STOPPING))
            return
        if shim:
            with contextlib.suppress(OSError):  # not blocking yet; a client that left: its request still runs
                c.sock.send(_PROCESSING)
        loop.release(c)
        try:
            self._requests.submit(functools.partial(self._serve, c, path, body, shim))
        except RuntimeError as e:  # stopped meanwhile, or no thread to be had: told to try again, not left waiting
            log.error("cannot hand a request to a worker: %s", e)
            _send(c.sock, http1.response(503, protocol.error_body(E_TRY_LATER, f"{e}; try again later")))
            self.leave(counted=True)
            loop.closed(c)

    def _serve(self, c: Conn, path: str, body: bytes, shim: bool) -> None:
        """On a worker: the request run, its answer written, then its log line (a line wakes journald: off the
        answer's path), then out of flight."""
        counted = False
        outcome: handlers.Outcome | None = None
        try:
            with fsutil.unlinks_after():  # a DEL's record is unlinked once its answer is out
                if path == protocol.DELEGATE_PATH:
                    outcome = handlers.delegate(self.delegator, body)
                else:
                    outcome = handlers.cni(self.delegator, self.metrics, body, bare=shim)
                with self.changed:  # served before the client can read its answer; in flight until it is out,
                    self.served += 1  # so that a drain that ends has answered everything
                    counted = True
                _send(c.sock, http1.response(outcome.status, outcome.body))
        finally:
            try:
                self.loop.closed(c)  # the answer is out (and the end of it, for a client that reads to the end)
                if outcome is not None:
                    outcome.log()
            finally:  # a log handler that fails (and fails again on the bug's line) never keeps it in flight
                self.leave(counted=counted)

    def _hand_over(self, c: Conn, endpoint: Callable[[], Any], ctype: str = "application/json") -> None:
        """An operator's endpoint, served by a worker; the loop writes what the socket does not take at once (a big
        /status or /metrics), so that clients that do not read never hold the workers."""
        self.loop.release(c, blocking=False)

        def serve() -> None:
            data = b""
            try:
                data = http1.response(*_document(endpoint, ctype))
            finally:
                self.loop.send_answer(c, data)

        try:
            self._others.submit(serve)
        except RuntimeError as e:
            log.error("cannot hand a request to a worker: %s", e)
            self.loop.send_answer(c, http1.response(503, protocol.error_body(E_TRY_LATER, f"{e}; try again later")))


def _document(fn: Callable[[], Any], ctype: str) -> tuple[int, bytes, str]:
    """An operator's endpoint's answer: its document, or a CNI error when it failed (or was asked wrongly)."""
    try:
        doc = fn()
    except protocol.ProtocolError as e:  # a query's body that cannot be read: the client's fault, said so
        return 400, protocol.error_body(e.code, e.msg, e.details), "application/json"
    except Exception as e:
        log.exception("an endpoint failed")
        body = protocol.error_body(E_OTHER, f"internal error: {type(e).__name__}: {e}", "this is a bug in netcomp")
        return 500, body, "application/json"
    return 200, doc if isinstance(doc, bytes) else json.dumps(doc, indent=2).encode(), ctype


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
