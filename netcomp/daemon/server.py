"""HTTP/1.1 on a unix socket: the Multus-thick-compatible CNI API and the operator's endpoints.

Every request is checked before any work: the peer's uid (SO_PEERCRED) must be allowed, the body must have a
Content-Length within the bound, and at most maxInFlight requests are served at once (beyond that: CNI code 11,
"try again later", instead of piling up). Anything malformed is answered with a CNI error, never a crash."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import socketserver
import struct
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

from netcomp import protocol
from netcomp.cni.spec import compact
from netcomp.daemon.metrics import Metrics
from netcomp.delegate.attach import Delegator
from netcomp.delegate.request import parse_request
from netcomp.errors import DelegateError, HostError
from netcomp.protocol import ProtocolError

log = logging.getLogger("netcomp.server")
E_TRY_LATER, E_PEER, E_TOO_LARGE = 11, 100, 101
LINGER_SECONDS, LINGER_BYTES = 2.0, 64 * 1024 * 1024
_PEERCRED = struct.Struct("3i")


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    allow_reuse_address = False
    request_queue_size = 128

    def __init__(
        self,
        sock: socket.socket,
        delegator: Delegator,
        metrics: Metrics,
        *,
        allowed_uids: list[int],
        max_in_flight: int,
        max_body: int,
        status: Callable[[], dict[str, Any]],
    ) -> None:
        # Bind nothing here: the listening socket is made (or inherited from systemd) by the caller.
        super().__init__(sock.getsockname() or "", Handler, bind_and_activate=False)
        self.socket.close()
        self.socket = sock
        self.delegator = delegator
        self.metrics = metrics
        self.allowed_uids = set(allowed_uids)
        self.max_body = max_body
        self.status_fn = status
        self.slots = threading.BoundedSemaphore(max_in_flight)
        self.ready = threading.Event()
        self.draining = threading.Event()
        self._busy = 0
        self._idle = threading.Condition()
        self.served = 0
        self.on_tick: Callable[[], None] = lambda: None

    def service_actions(self) -> None:
        # Called by serve_forever on every turn of the serving loop: the watchdog is fed from here.
        self.on_tick()

    def enter(self) -> bool:
        if self.draining.is_set() or not self.slots.acquire(blocking=False):
            return False
        with self._idle:
            self._busy += 1
        self.metrics.in_flight.inc()
        return True

    def leave(self) -> None:
        self.metrics.in_flight.dec()
        with self._idle:
            self._busy -= 1
            self.served += 1
            self._idle.notify_all()
        self.slots.release()

    @property
    def in_flight(self) -> int:
        return self._busy

    def drain(self, timeout: float) -> bool:
        """Stop taking work; wait up to timeout for what is in flight. True when everything finished."""
        self.draining.set()
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True


class Handler(BaseHTTPRequestHandler):
    server: Server
    protocol_version = "HTTP/1.1"
    server_version = "netcomp"
    timeout = 600  # a delegate may run pluginTimeout seconds; the socket must outlive it
    wbufsize = 1 << 16  # buffered: an answer's head and body leave in one write (see _send)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("http: " + format, *args)

    # ---------------------------------------------------------------------------------------------- answers

    def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()  # the whole answer now: the shim stops reading at Content-Length, before our log line
        self.close_connection = True

    def _cni_error(self, status: int, code: int, msg: str, details: str = "", version: str = "1.0.0") -> None:
        self._send(status, protocol.error_body(code, msg, details, version))

    def _linger(self) -> None:
        """After refusing a body we did not read: stop writing, then read and drop what the client is still
        sending (bounded in bytes and time), so that the kernel does not answer it with a reset that would
        destroy our answer before the client reads it."""
        self.wfile.flush()
        try:
            self.request.shutdown(socket.SHUT_WR)
            self.request.settimeout(LINGER_SECONDS)
            left = LINGER_BYTES
            while left > 0 and (chunk := self.request.recv(min(left, 1 << 20))):
                left -= len(chunk)
        except OSError:
            pass

    def _peer_ok(self) -> bool:
        try:
            _, uid, _ = _PEERCRED.unpack(self.request.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
        except OSError:
            uid = -1
        if uid in self.server.allowed_uids:
            return True
        self.server.metrics.rejected.labels("peer").inc()
        self._cni_error(403, E_PEER, f"peer uid {uid} may not use the netcomp socket", "allowedUids in netcomp.yaml")
        return False

    def _body(self) -> bytes | None:
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self._cni_error(411, protocol.E_DECODE, "a request needs a Content-Length")
            return None
        n = int(length)
        if n > self.server.max_body:
            self.server.metrics.rejected.labels("size").inc()
            self._cni_error(413, E_TOO_LARGE, f"request of {n} bytes is over the limit of {self.server.max_body}")
            self._linger()
            return None
        return self.rfile.read(n)

    # ---------------------------------------------------------------------------------------------- routes

    def do_GET(self) -> None:
        if not self._peer_ok():
            return
        path = self.path.split("?", 1)[0]
        if path == protocol.HEALTHZ_PATH:
            self._send(200, b'{"ok":true}')
        elif path == protocol.READYZ_PATH:
            ready = self.server.ready.is_set() and not self.server.draining.is_set()
            self._send(200 if ready else 503, json.dumps({"ready": ready}).encode())
        elif path == protocol.STATUS_PATH:
            self._send(200, json.dumps(self.server.status_fn(), indent=2).encode())
        elif path == protocol.ATTACHMENTS_PATH:
            self._send(200, json.dumps(self.server.delegator.attachments(), indent=2).encode())
        elif path == protocol.METRICS_PATH:
            self._send(200, self.server.metrics.render(), "text/plain; version=0.0.4")
        else:
            self._cni_error(404, protocol.E_INVALID_CONFIG, f"no such endpoint {path!r}")

    def do_POST(self) -> None:
        if not self._peer_ok():
            return
        path = self.path.split("?", 1)[0]
        if path not in (protocol.CNI_PATH, protocol.DELEGATE_PATH):
            self._cni_error(404, protocol.E_INVALID_CONFIG, f"no such endpoint {path!r}")
            return
        body = self._body()
        if body is None:
            return
        if not self.server.ready.is_set():
            self._cni_error(503, E_TRY_LATER, "netcomp is starting; try again later")
            return
        if not self.server.enter():
            self.server.metrics.rejected.labels("busy").inc()
            self._cni_error(429, E_TRY_LATER, "netcomp is busy or stopping; try again later")
            return
        try:
            if path == protocol.CNI_PATH:
                self._cni(body)
            else:
                self._delegate(body)
        finally:
            self.server.leave()

    def do_PUT(self) -> None:
        self._cni_error(405, protocol.E_INVALID_CONFIG, "method not allowed")

    do_DELETE = do_PATCH = do_PUT

    def _cni(self, body: bytes) -> None:
        t = time.perf_counter()
        verb, cid, version, outcome, nets = "?", "?", "1.0.0", "error", "-"
        try:
            env, config = protocol.decode_request(body)
            req = parse_request(env, config)
            verb, cid, version = req.command, req.container_id or "-", req.cni_version
            nets = self.server.delegator.describe(req)
            result = self.server.delegator.handle(req)
            outcome = "ok"
            if self.headers.get(protocol.SHIM_HEADER) == "1":
                self._send(200, compact(result) if result else b"")
            else:
                self._send(200, compact({"Result": result or None}))
        except ProtocolError as e:
            self._cni_error(400, e.code, e.msg, e.details)
            log.warning("CNI request refused: %s", e.msg)
        except DelegateError as e:
            msg = e.full_msg
            self._cni_error(400, e.code, msg, e.details, version)
            log.warning(
                "CNI %s container=%s networks=%s failed in %.1f ms: code %d: %s%s",
                verb,
                cid,
                nets,
                (time.perf_counter() - t) * 1000,
                e.code,
                msg,
                f" ({e.details})" if e.details else "",
            )
        except HostError as e:
            self._cni_error(400, 5, str(e), version=version)
            log.error("CNI %s container=%s networks=%s host error: %s", verb, cid, nets, e)
        except Exception as e:  # a bug: answer, log, keep serving
            self._cni_error(400, 999, f"internal error: {type(e).__name__}: {e}", "this is a bug in netcomp", version)
            log.exception("CNI %s container=%s internal error", verb, cid)
        finally:
            took = time.perf_counter() - t
            self.server.metrics.requests.labels(verb, outcome).inc()
            self.server.metrics.latency.labels(verb).observe(took)
            if outcome == "ok":
                log.info("CNI %s container=%s networks=%s ok in %.1f ms", verb, cid, nets, took * 1000)

    def _delegate(self, body: bytes) -> None:
        try:
            doc = json.loads(body)
            if not isinstance(doc, dict):
                raise ValueError("not an object")
            command = doc.get("command", "ADD")
            if command not in ("ADD", "DEL"):
                raise DelegateError(protocol.E_INVALID_ENV, f"command must be ADD or DEL, not {command!r}")
            fields = [doc.get(k) for k in ("containerID", "netns", "network")]
            if not all(isinstance(f, str) and f for f in fields[:1] + fields[2:]):
                raise DelegateError(protocol.E_INVALID_CONFIG, "containerID and network are required")
            netns = doc.get("netns") or ""
            if command == "ADD" and not netns:
                raise DelegateError(protocol.E_INVALID_ENV, "netns is required to attach")
            result = self.server.delegator.hotplug(
                command,
                doc["containerID"],
                netns,
                doc["network"],
                doc.get("ifname") or None,
                doc.get("runtimeIfname") or "eth0",
            )
            log.info("hot-plug %s container=%s network=%s ok", command, doc["containerID"], doc["network"])
            self._send(200, compact({"Result": result or None}))
        except (ValueError, UnicodeDecodeError) as e:
            self._cni_error(400, protocol.E_DECODE, f"request is not valid JSON: {e}")
        except DelegateError as e:
            self._cni_error(400, e.code, e.full_msg, e.details)
        except HostError as e:
            self._cni_error(400, 5, str(e))
        except Exception as e:
            self._cni_error(400, 999, f"internal error: {type(e).__name__}: {e}", "this is a bug in netcomp")
            log.exception("hot-plug internal error")


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
