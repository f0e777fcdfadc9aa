"""HTTP/1.1 on a unix socket: the Multus-thick-compatible CNI API and the operator's endpoints.

One asyncio loop, on a thread of its own, reads every connection; only complete requests reach the worker
threads (api.py), so an idle or slow connection costs a file descriptor and a little memory, never a thread.
What the loop enforces, before any work:
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
be taken now; `GET /healthz` only that the daemon is alive.
The HTTP itself is http.py's."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from netcomp.cni.codes import E_DECODE, E_INVALID_CONFIG, E_OTHER, E_PEER, E_TOO_LARGE, E_TRY_LATER
from netcomp.daemon import api, http, protocol
from netcomp.daemon.metrics import Metrics
from netcomp.delegate.delegator import Delegator

log = logging.getLogger("netcomp.server")
MAX_HEAD = 64 * 1024
LINGER_SECONDS, LINGER_BYTES = 2.0, 64 * 1024 * 1024
WRITE_TIMEOUT = 30.0
_GET = (protocol.HEALTHZ_PATH, protocol.READYZ_PATH, protocol.METRICS_PATH)
_POST = (protocol.CNI_PATH, protocol.DELEGATE_PATH, protocol.HEALTHZ_PATH)  # Multus's shim POSTs /healthz


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
        Both run on a worker thread of their own, apart from the CNI requests' slots."""
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
        self._last_change = 0.0  # time.monotonic() of the last request taken or finished
        # Notified whenever requests in flight or queued change (drain waits on it; so can tests and tools).
        self.changed = threading.Condition()
        self._pool = ThreadPoolExecutor(limits.max_in_flight, thread_name_prefix="request")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._conns = 0
        self._per_peer: Counter[int] = Counter()
        self._waiting = 0

    # ---------------------------------------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Start serving on a thread of its own; returns once the socket is being served."""
        started = threading.Event()
        failed: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._main(started))
            except BaseException as e:  # pragma: no cover - start-up failures are re-raised in start()
                failed.append(e)
                started.set()
            finally:
                loop.close()

        self._thread = threading.Thread(target=run, name="serve", daemon=True)
        self._thread.start()
        started.wait()
        if failed:
            raise failed[0]

    async def _main(self, started: threading.Event) -> None:
        self._stop = asyncio.Event()
        self._slots = asyncio.Semaphore(self.limits.max_in_flight)
        server = await asyncio.start_unix_server(self._connection, sock=self.sock, limit=MAX_HEAD, backlog=128)
        started.set()
        ticker = asyncio.ensure_future(self._ticker())
        try:
            await self._stop.wait()
        finally:
            ticker.cancel()
            server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _ticker(self) -> None:
        # The watchdog is fed from here: a loop that is stuck stops feeding it, and systemd restarts the daemon.
        while True:
            try:
                self.on_tick()
            except Exception:
                log.exception("tick failed")
            await asyncio.sleep(self.tick_every)

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

    def _queue_changed(self, delta: int) -> None:
        with self.changed:
            self._waiting += delta
            self.changed.notify_all()
        self.metrics.queued.set(self._waiting)

    @property
    def in_flight(self) -> int:
        return self._busy

    @property
    def queued(self) -> int:
        return self._waiting

    def drain(self, timeout: float) -> bool:
        """Stop taking work; wait up to timeout for what is in flight. True when everything finished."""
        self.draining.set()
        return self.wait_for(lambda: self._busy == 0, timeout)

    def shutdown(self) -> None:
        """Stop the loop (every connection still open is closed without an answer) and the worker threads."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop ended meanwhile
                loop.call_soon_threadsafe(stop.set)
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._pool.shutdown(wait=False, cancel_futures=True)

    # ---------------------------------------------------------------------------------------------- connections

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock: socket.socket = writer.get_extra_info("socket")
        pid, uid = http.peer(sock)
        lim = self.limits
        if self._conns >= lim.max_connections or self._per_peer[pid] >= lim.max_per_peer:
            self.metrics.rejected.labels("connections").inc()
            with contextlib.suppress(Exception):
                writer.write(
                    http.response(503, protocol.error_body(E_TRY_LATER, "too many connections; try again later"))
                )
                writer.close()
            return
        self._conns += 1
        self._per_peer[pid] += 1
        self.metrics.connections.set(self._conns)
        try:
            await self._serve(reader, writer, sock, uid)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError) as e:
            log.debug("client went away: %s", type(e).__name__)
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("bug while serving a connection")
            with contextlib.suppress(Exception):
                await self._write(
                    writer, 500, protocol.error_body(E_OTHER, "internal error", "this is a bug in netcomp")
                )
        finally:
            self._conns -= 1
            self._per_peer[pid] -= 1
            if not self._per_peer[pid]:
                del self._per_peer[pid]
            self.metrics.connections.set(self._conns)
            with contextlib.suppress(Exception):
                writer.close()

    async def _write(
        self, writer: asyncio.StreamWriter, status: int, body: bytes, ctype: str = "application/json"
    ) -> None:
        writer.write(http.response(status, body, ctype))
        if writer.transport.get_write_buffer_size():  # most answers went out whole in write(): no wait, no task
            await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT)

    async def _refuse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, r: http.Refuse) -> None:
        await self._write(writer, r.status, protocol.error_body(r.code, r.msg, r.details))
        if r.linger:
            # We did not read the body: stop writing, then read and drop what the client is still sending
            # (bounded), so that it reads our answer instead of failing on a reset.
            with contextlib.suppress(Exception):
                writer.write_eof()
                async with asyncio.timeout(LINGER_SECONDS):
                    left = LINGER_BYTES
                    while left > 0 and (chunk := await reader.read(min(left, 1 << 20))):
                        left -= len(chunk)

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, sock: socket.socket, uid: int
    ) -> None:
        lim = self.limits
        if uid not in lim.allowed_uids:
            self.metrics.rejected.labels("peer").inc()
            msg = f"peer uid {uid} may not use the netcomp socket"
            await self._refuse(
                reader, writer, http.Refuse(403, E_PEER, msg, "allowedUids in netcomp.yaml", linger=True)
            )
            return
        try:
            async with asyncio.timeout(lim.header_timeout):
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.LimitOverrunError:
                    raise http.Refuse(431, E_DECODE, "request head over 64 KiB", linger=True) from None
                method, path, headers = http.parse_head(head)
                body = b""
                if method == "POST":
                    body = await self._body(reader, headers)
        except TimeoutError:
            self.metrics.rejected.labels("timeout").inc()
            msg = f"request not complete within {lim.header_timeout:g}s"
            await self._refuse(reader, writer, http.Refuse(408, E_DECODE, msg))
            return
        except http.Refuse as r:
            if r.status == 413:
                self.metrics.rejected.labels("size").inc()
            await self._refuse(reader, writer, r)
            return
        if method == "GET" and (path in _GET or path in self.views):
            await self._get(writer, path)
        elif method == "POST" and path in self.actions:
            doc = await asyncio.get_running_loop().run_in_executor(None, self.actions[path])
            await self._write(writer, 200, json.dumps(doc, indent=2).encode())
        elif method == "POST" and path in _POST:
            if path == protocol.HEALTHZ_PATH:
                await self._readiness(writer)
            else:
                await self._post(writer, sock, path, body, headers.get(protocol.SHIM_HEADER.lower()) == "1")
        elif path in _GET or path in _POST or path in self.views or path in self.actions:
            await self._write(
                writer,
                405,
                protocol.error_body(E_INVALID_CONFIG, f"method {method[:20]} not allowed on {path[:100]}"),
            )
        else:
            await self._write(writer, 404, protocol.error_body(E_INVALID_CONFIG, f"no such endpoint {path[:100]!r}"))

    async def _readiness(self, writer: asyncio.StreamWriter) -> None:
        """POST /healthz: Multus's shim asks it before every ADD and CHECK (polling every 100 ms for up to 60 s
        while the answer is not 200) and once before a DEL. It answers whether a CNI request would be taken now,
        so that the shim waits out a daemon that is stopping (its connection then waits in the socket unit's
        backlog for the next one) instead of sending a request that is refused. GET /healthz stays liveness."""
        if self.ready.is_set() and not self.draining.is_set():
            await self._write(writer, 200, b'{"ok":true}')
        else:
            what = "stopping" if self.draining.is_set() else "starting"
            await self._write(writer, 503, protocol.error_body(E_TRY_LATER, f"netcomp is {what}; try again later"))

    async def _body(self, reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
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
        return await reader.readexactly(n)

    async def _get(self, writer: asyncio.StreamWriter, path: str) -> None:
        loop = asyncio.get_running_loop()
        if path == protocol.HEALTHZ_PATH:
            await self._write(writer, 200, b'{"ok":true}')
        elif path == protocol.READYZ_PATH:
            ready = self.ready.is_set() and not self.draining.is_set()
            await self._write(writer, 200 if ready else 503, json.dumps({"ready": ready}).encode())
        elif path == protocol.METRICS_PATH:
            body = await loop.run_in_executor(None, self.metrics.render)
            await self._write(writer, 200, body, "text/plain; version=0.0.4")
        else:
            doc = await loop.run_in_executor(None, self.views[path])
            await self._write(writer, 200, json.dumps(doc, indent=2).encode())

    async def _post(
        self, writer: asyncio.StreamWriter, sock: socket.socket, path: str, body: bytes, shim: bool
    ) -> None:
        if not self.ready.is_set():
            await self._write(writer, 503, protocol.error_body(E_TRY_LATER, "netcomp is starting; try again later"))
            return
        if not await self._take_slot():
            self.metrics.rejected.labels("busy").inc()
            await self._write(
                writer, 429, protocol.error_body(E_TRY_LATER, "netcomp is busy or stopping; try again later")
            )
            return
        try:
            if self.draining.is_set():
                await self._write(writer, 503, protocol.error_body(E_TRY_LATER, "netcomp is stopping; try again later"))
                return
            if http.hung_up(sock):
                log.info("a client hung up while its request waited; not started")
                return
            if shim:
                writer.write(b"HTTP/1.1 102 Processing\r\n\r\n")
            self.enter()
            try:
                fn = functools.partial(api.cni, self.delegator, self.metrics, body, bare=shim)
                if path == protocol.DELEGATE_PATH:
                    fn = functools.partial(api.delegate, self.delegator, body)
                status, answer = await asyncio.get_running_loop().run_in_executor(self._pool, fn)
            finally:
                self.leave()
        finally:
            self._slots.release()
        await self._write(writer, status, answer)

    async def _take_slot(self) -> bool:
        """A slot to serve a request in; waits in the queue when all are taken. False when the queue is full,
        the wait is over queueTimeout, or the daemon is stopping."""
        if not self._slots.locked():
            await self._slots.acquire()
            return True
        if self._waiting >= self.limits.max_queued or self.draining.is_set():
            return False
        self._queue_changed(+1)
        try:
            await asyncio.wait_for(self._slots.acquire(), self.limits.queue_timeout)
            return True
        except TimeoutError:
            return False
        finally:
            self._queue_changed(-1)


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
