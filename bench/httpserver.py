#!/usr/bin/env python3
"""The daemon's hand-written HTTP server (netcomp/daemon/server/: one selector loop, workers) against the standard
library's (socketserver.ThreadingUnixStreamServer with http.server.BaseHTTPRequestHandler, HTTP/1.1: a thread per
connection) given the same bounds by hand: the peer's uid (SO_PEERCRED), a cap on connections (and per peer), a
limit on requests in flight with a bounded queue and a busy answer (429, CNI code 11), a deadline for the whole
request (408), the head's size (431) and the body's (413), Content-Length only (411). Both serve POST /cni with
the same trivial handler (a CNI request of about 1 KB decoded, a result of about 1 KB encoded), each in a process
of its own; the real server through its own route, admission and workers, only `handlers.cni` replaced.

Shapes, each measured on both servers in turn within every round (the order alternating), so that both share the
machine's noise:

  (1) one request per connection: connect, send, read the answer, close (what a shim does for each CNI request)
  (2) keep-alive, one client in sequence: a request does not ask to close; a client connects again only when
      the answer says `Connection: close` (the hand-written server's always does)
  (3) 10 clients at once (10 processes), each doing (1) in a loop

Printed per shape: median and p99 latency per request, for (3) the requests served per second, and the ratio
stdlib / hand-written of each (above 1: the hand-written one is faster); then each server's CPU per request (user
+ system, every thread, those that ended too: getrusage in the server's process, its start-up left out) and
context switches per request (voluntary / involuntary, from the same getrusage: /proc/PID/task/*/status loses
the threads that ended, which for the stdlib's server is every connection's). A server serves one shape only,
so that its counters are that shape's. No root needed.
Usage: bench/httpserver.py [--rounds N] [--requests N]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import http.server
import io
import json
import multiprocessing
import os
import resource
import select
import shutil
import socket
import socketserver
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CLIENTS = 10  # shape (3)
SHAPES = ("one request per connection", "keep-alive, in sequence", f"{CLIENTS} clients at once")


# ------------------------------------------------------------------------------------------ the work, the same on both


def cni_request() -> bytes:
    """A runtime's ADD as a shim sends it (about 1.1 KB): the CNI environment and the conflist in base64."""
    conf = {
        "cniVersion": "1.0.0",
        "name": "storage",
        "plugins": [
            {
                "type": "macvlan",
                "master": "bond0.120",
                "mode": "bridge",
                "mtu": 9000,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": "10.120.0.0/16", "rangeStart": "10.120.4.1", "rangeEnd": "10.120.7.254"}]],
                    "routes": [{"dst": "10.200.0.0/16", "gw": "10.120.0.1"}],
                },
            },
            {"type": "tuning", "sysctl": {"net.ipv4.conf.IFNAME.arp_ignore": "1"}},
        ],
    }
    cid = "4f0c0c4a3a62074cf47813f2ed9dd" * 2 + "e8843b"
    env = {
        "CNI_COMMAND": "ADD",
        "CNI_CONTAINERID": cid,
        "CNI_NETNS": "/var/run/netns/cni-5b7c6f0e-2d1a-4c5e-9f3b-8a1d2e3f4a5b",
        "CNI_IFNAME": "net1",
        "CNI_ARGS": f"IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-7d4b9c8f6-x2x9q;"
        f"K8S_POD_INFRA_CONTAINER_ID={cid};K8S_POD_UID=3c1e2f4a-5b6d-4e7f-8a9b-0c1d2e3f4a5b",
        "CNI_PATH": "/opt/cni/bin:/usr/lib/cni",
    }
    return json.dumps({"env": env, "config": base64.b64encode(json.dumps(conf).encode()).decode()}).encode()


def handle(body: bytes) -> bytes:
    """The trivial handler both servers run: the request decoded, a CNI result (about 1 KB) encoded."""
    req = json.loads(body)
    env, conf = req["env"], json.loads(base64.b64decode(req["config"]))
    mac = "0a:58:0a:78:04:0b"
    result = {
        "cniVersion": conf["cniVersion"],
        "interfaces": [
            {"name": "bond0.120", "mac": "3c:fd:fe:9e:2b:10"},
            {"name": env["CNI_IFNAME"], "mac": mac, "sandbox": env["CNI_NETNS"]},
        ],
        "ips": [
            {"address": "10.120.4.11/16", "gateway": "10.120.0.1", "interface": 1},
            {"address": "fd00:120::4:b/64", "gateway": "fd00:120::1", "interface": 1},
        ],
        "routes": [{"dst": "10.200.0.0/16", "gw": "10.120.0.1"}, {"dst": "fd00:200::/48", "gw": "fd00:120::1"}],
        "dns": {"nameservers": ["10.96.0.10"], "domain": "cluster.local", "search": ["default.svc.cluster.local"]},
        "netcomp": {"network": conf["name"], "container": env["CNI_CONTAINERID"], "args": env["CNI_ARGS"]},
    }
    return json.dumps(result).encode()


# --------------------------------------------------------------------------------------------- the hand-written server


def serve_real(path: str) -> Callable[[], None]:
    """netcomp's Server on `path` with its default limits (this uid allowed), `handlers.cni` replaced by the
    trivial handler: the route, the admission and queue, the workers and the answer are the daemon's."""
    from netcomp.daemon.server import handlers
    from netcomp.daemon.server.connections import Limits
    from netcomp.daemon.server.server import Server, listen
    from netcomp.metrics import Metrics

    def cni(delegator: object, metrics: object, body: bytes, *, bare: bool) -> handlers.Outcome:
        return handlers.Outcome(200, handle(body))

    handlers.cni = cni
    sock, _ = listen(path)
    server = Server(sock, None, Metrics(), limits=Limits(allowed_uids={os.getuid()}), views={})  # type: ignore[arg-type]
    server.ready.set()
    server.start()
    return server.shutdown


# ---------------------------------------------------------------------------------------- the stdlib's server, bounded
# From here to the next ruler: the standard library's server given the hand-written one's bounds (its lines are
# counted in docs/benchmarks.md). The limits are netcomp's defaults (connections.py Limits).

MAX_CONNECTIONS, MAX_PER_PEER, MAX_IN_FLIGHT, MAX_QUEUED, QUEUE_TIMEOUT = 1024, 64, 64, 1024, 30.0
HEADER_TIMEOUT, WRITE_TIMEOUT, MAX_HEAD, MAX_BODY = 5.0, 30.0, 64 * 1024, 1024 * 1024
LINGER_SECONDS, LINGER_BYTES = 2.0, 64 * 1024 * 1024
ALLOWED_UIDS = {os.getuid()}
BUSY, NOT_HTTP = "netcomp is busy; try again later", "not an HTTP/1.1 request"
_PEERCRED = struct.Struct("3i")


class Refuse(Exception):
    def __init__(self, status: int, code: int, msg: str) -> None:
        super().__init__(msg)
        self.status, self.code, self.msg = status, code, msg


def error_body(code: int, msg: str) -> bytes:
    return json.dumps({"cniVersion": "1.0.0", "code": code, "msg": msg}).encode()


def refuse_at_once(sock: socket.socket, status: int, code: int, msg: str) -> None:
    """An answer from the accepting thread, before any handler: it fits in the socket's buffer or is dropped."""
    body = error_body(code, msg)
    head = f"HTTP/1.1 {status} Refused\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    with contextlib.suppress(OSError):
        sock.setblocking(False)
        sock.send(head.encode() + b"Connection: close\r\n\r\n" + body)


class HeadReader(io.BufferedReader):
    """The connection's reads (DeadlineIO), the head's lines counted against MAX_HEAD."""

    head_left = MAX_HEAD

    def readline(self, size: int | None = -1) -> bytes:
        size = self.head_left + 1 if size is None or size < 0 else min(size, self.head_left + 1)
        line = super().readline(size)
        self.head_left -= len(line)
        if self.head_left < 0:
            raise Refuse(431, 6, "request head over 64 KiB")
        return line


class DeadlineIO(socket.SocketIO):
    """Each read bounded by what is left of the request's deadline: a slow client cannot stretch it read by read."""

    def __init__(self, handler: Bounded) -> None:
        super().__init__(handler.connection, "rb")
        self.handler = handler

    def readinto(self, b: Any) -> int | None:
        left = self.handler.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        self.handler.connection.settimeout(left)
        return super().readinto(b)


class Bounded(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: BoundedServer
    rfile: HeadReader

    def setup(self) -> None:
        self.connection = self.request
        self.deadline = time.monotonic() + HEADER_TIMEOUT
        self.rfile = HeadReader(DeadlineIO(self))
        self.close_connection, self.command, self.request_version = True, "", "HTTP/1.1"  # an answer's, before any
        self.wfile = socketserver._SocketWriter(self.connection)  # type: ignore[attr-defined]

    def handle(self) -> None:
        uid = self.server.peers[self.request][1]
        if uid not in ALLOWED_UIDS:
            return self.refuse(Refuse(403, 100, f"peer uid {uid} may not use the netcomp socket"))
        super().handle()

    def handle_one_request(self) -> None:
        """The stdlib's, with the answers the hand-written server gives: 408 at the deadline, 431 for a large
        head, 400 for a head it does not take, the body's checks; a refused request's connection lingers."""
        self.deadline, self.rfile.head_left = time.monotonic() + HEADER_TIMEOUT, MAX_HEAD
        self.command, self.request_version = "", "HTTP/1.1"  # what an answer before parse_request needs
        try:
            self.raw_requestline = self.rfile.readline(65537)
            if not self.raw_requestline:
                self.close_connection = True
                return
            if not self.parse_request():
                return
            if not self.request_version.startswith("HTTP/1.") or self.headers.defects:  # HTTP/0.9; "Broken"
                raise Refuse(400, 6, NOT_HTTP)
            body = self.read_body()
        except TimeoutError:
            return self.refuse(Refuse(408, 6, f"request not complete within {HEADER_TIMEOUT:g}s"))
        except Refuse as r:
            return self.refuse(r)
        except OSError:  # the client went away
            self.close_connection = True
            return
        if self.command == "POST" and self.path == "/cni":
            self.take(body)
        elif self.command == "GET" and self.path == "/healthz":
            self.answer(200, b'{"ok":true}')
        else:
            self.answer(404, error_body(7, f"no such endpoint {self.path[:100]!r}"))

    def refuse(self, r: Refuse) -> None:
        """The error, then what the client still sends read and dropped (bounded): it reads the answer instead of
        a reset."""
        self.request_version = "HTTP/1.1"
        with contextlib.suppress(OSError):
            self.answer(r.status, error_body(r.code, r.msg), close=True)
            self.connection.shutdown(socket.SHUT_WR)
            end, left = time.monotonic() + LINGER_SECONDS, LINGER_BYTES
            while left > 0 and end > time.monotonic():
                self.connection.settimeout(end - time.monotonic())
                if not (data := self.connection.recv(1 << 20)):
                    break
                left -= len(data)

    def read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding") is not None:
            raise Refuse(411, 6, "send the request with a Content-Length, not chunked")
        lengths = self.headers.get_all("Content-Length") or []
        if len(set(lengths)) > 1:
            raise Refuse(400, 6, "conflicting Content-Length headers")
        if not lengths and self.command != "POST":
            return b""
        if not lengths or not (lengths[0].isascii() and lengths[0].isdigit()) or len(lengths[0]) > 12:
            raise Refuse(411, 6, "a request needs a Content-Length")
        if (n := int(lengths[0])) > MAX_BODY:
            raise Refuse(413, 101, f"request of {n} bytes is over the limit of {MAX_BODY}")
        body = self.rfile.read(n)
        if len(body) < n:
            raise OSError("the client went away")
        return body

    def take(self, body: bytes) -> None:
        """In flight when a slot is free, else waiting in the queue (at most MAX_QUEUED, each QUEUE_TIMEOUT);
        busy beyond. A client that hung up meanwhile is not served."""
        srv = self.server
        with srv.changed:
            if srv.in_flight >= MAX_IN_FLIGHT or srv.waiting:
                if srv.waiting >= MAX_QUEUED:
                    return self.answer(429, error_body(11, BUSY), close=True)
                srv.waiting += 1
                free = srv.changed.wait_for(lambda: srv.in_flight < MAX_IN_FLIGHT, QUEUE_TIMEOUT)
                srv.waiting -= 1
                if not free:
                    return self.answer(429, error_body(11, BUSY), close=True)
            srv.in_flight += 1
        try:
            p = select.poll()
            p.register(self.connection.fileno(), select.POLLHUP)
            if p.poll(0):
                self.close_connection = True
                return
            self.answer(200, handle(body))
        finally:
            with srv.changed:
                srv.in_flight -= 1
                srv.changed.notify()

    def answer(self, status: int, body: bytes, *, close: bool = False) -> None:
        self.close_connection = self.close_connection or close
        self.connection.settimeout(WRITE_TIMEOUT)
        self.send_response_only(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close" if self.close_connection else "keep-alive")
        self.end_headers()
        self.wfile.write(body)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """parse_request's refusals (a bad request line or version, a header line over 64 KiB, over 100 headers),
        as the hand-written server words them."""
        self.refuse(Refuse(431, 6, "request head over 64 KiB") if code == 431 else Refuse(400, 6, NOT_HTTP))

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the hand-written server logs refusals only, once a minute: neither logs here


class BoundedServer(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, path: str) -> None:
        self.changed = threading.Condition()
        self.in_flight = self.waiting = 0
        self.peers: dict[socket.socket, tuple[int, int]] = {}  # a counted connection's peer: pid, uid
        self.per_peer: Counter[int] = Counter()
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        old = os.umask(0o177)
        try:
            super().__init__(path, Bounded)
        finally:
            os.umask(old)

    def verify_request(self, request: Any, client_address: Any) -> bool:
        """Counted against the caps, or refused before any thread is spent on it."""
        try:
            pid, uid, _ = _PEERCRED.unpack(request.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        except OSError:
            pid, uid = -1, -1
        with self.changed:
            if len(self.peers) < MAX_CONNECTIONS and self.per_peer[pid] < MAX_PER_PEER:
                self.peers[request] = pid, uid
                self.per_peer[pid] += 1
                return True
        refuse_at_once(request, 503, 11, "too many connections; try again later")
        return False

    def shutdown_request(self, request: Any) -> None:
        with self.changed:
            pid, _ = self.peers.pop(request, (None, None))
            if pid is not None:
                self.per_peer[pid] -= 1
                if not self.per_peer[pid]:
                    del self.per_peer[pid]
        super().shutdown_request(request)


# -------------------------------------------------------------------------------------------------- a server's process


def server_main(kind: str, path: str) -> None:
    """Serve until stdin ends; print this process's CPU and context switches when serving starts and when it
    ends (every thread's, those that ended too)."""
    if kind == "real":
        stop = serve_real(path)
    else:
        srv = BoundedServer(path)
        threading.Thread(target=srv.serve_forever, name="serve", daemon=True).start()
        stop = srv.shutdown
    print("ready", *usage(), flush=True)
    sys.stdin.read()
    print("done", *usage(), flush=True)
    stop()


def usage() -> tuple[float, int, int]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime, r.ru_nvcsw, r.ru_nivcsw


class ServerProcess:
    def __init__(self, kind: str, path: str) -> None:
        self.kind, self.path = kind, path
        argv = [sys.executable, __file__, "--serve", kind, path]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().split()
        if not line or line[0] != "ready":
            raise SystemExit(f"the {kind} server did not start")
        self.start = (float(line[1]), int(line[2]), int(line[3]))

    def finish(self) -> tuple[float, int, int]:
        """Stop it; its CPU seconds and context switches since it started serving."""
        out, _ = self.proc.communicate(timeout=60)
        done = out.split()
        return float(done[1]) - self.start[0], int(done[2]) - self.start[1], int(done[3]) - self.start[2]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


# ------------------------------------------------------------------------------------------------------------- clients


def framed(*, close: bool) -> bytes:
    body = cni_request()
    connection = "Connection: close\r\n" if close else ""
    head = f"POST /cni HTTP/1.1\r\nHost: netcomp\r\nContent-Type: application/json\r\n{connection}"
    return (head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body


ONE, KEPT = framed(close=True), framed(close=False)
EXPECTED = handle(cni_request())


def read_answer(s: socket.socket) -> bool:
    """One answer read (its head, then its body by Content-Length, nothing after); whether it says close.
    SystemExit for anything but the expected 200."""
    data = b""
    while (end := data.find(b"\r\n\r\n")) < 0:
        chunk = s.recv(65536)
        if not chunk:
            raise SystemExit(f"the server closed before answering: {data[:200]!r}")
        data += chunk
    head = data[:end].decode("latin-1").lower()
    length = int(head.split("content-length:", 1)[1].split("\r\n", 1)[0])
    body = data[end + 4 :]
    while len(body) < length:
        chunk = s.recv(65536)
        if not chunk:
            raise SystemExit("the server closed in the middle of an answer")
        body += chunk
    if not head.startswith("http/1.1 200") or body != EXPECTED:
        raise SystemExit(f"unexpected answer: {data[:300]!r}")
    return "connection: close" in head


def connect(path: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(60)
    s.connect(path)
    return s


def one_per_connection(path: str, n: int) -> tuple[float, float, list[float]]:
    """(start, end, latency of each request), seconds on CLOCK_MONOTONIC (the same in every process)."""
    lat = []
    t0 = time.monotonic()
    for _ in range(n):
        t = time.perf_counter()
        with contextlib.closing(connect(path)) as s:
            s.sendall(ONE)
            read_answer(s)
        lat.append(time.perf_counter() - t)
    return t0, time.monotonic(), lat


def kept_alive(path: str, n: int) -> tuple[float, float, list[float]]:
    lat = []
    s: socket.socket | None = None
    t0 = time.monotonic()
    try:
        for _ in range(n):
            t = time.perf_counter()
            if s is None:
                s = connect(path)
            s.sendall(KEPT)
            if read_answer(s):
                s.close()
                s = None
            lat.append(time.perf_counter() - t)
    finally:
        if s is not None:
            s.close()
    return t0, time.monotonic(), lat


def _client(args: tuple[str, int]) -> tuple[float, float, list[float]]:
    return one_per_connection(*args)


def at_once(pool: Any, path: str, n: int) -> tuple[float, float, list[float]]:
    """CLIENTS processes, each n requests of shape (1); from the first one's start to the last one's end."""
    runs = pool.map(_client, [(path, n)] * CLIENTS, chunksize=1)
    return min(r[0] for r in runs), max(r[1] for r in runs), [x for r in runs for x in r[2]]


# ------------------------------------------------------------------------------------------------------------- the run


def p99(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=100)[98]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=10, help="rounds, each every shape on both servers (10)")
    ap.add_argument("--requests", type=int, default=150, help="requests per batch; in (3) per client (150)")
    ap.add_argument("--serve", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        server_main(*args.serve)
        return
    tmp = tempfile.mkdtemp(prefix="nc-httpbench-", dir="/tmp")
    servers: dict[tuple[int, str], ServerProcess] = {}
    pool = multiprocessing.get_context("fork").Pool(CLIENTS)
    try:
        for shape in range(3):
            for kind in ("real", "stdlib"):
                servers[shape, kind] = ServerProcess(kind, os.path.join(tmp, f"{kind}{shape}", "s.sock"))
        runners: list[Callable[[str, int], tuple[float, float, list[float]]]] = [
            one_per_connection,
            kept_alive,
            lambda path, n: at_once(pool, path, n),
        ]
        lat: dict[tuple[int, str], list[float]] = {k: [] for k in servers}
        rate: dict[tuple[int, str], list[float]] = {k: [] for k in servers}
        served: Counter[tuple[int, str]] = Counter()  # by each server, the warm-up's too (its CPU is in the total)
        for (shape, kind), srv in servers.items():  # warm-up, untimed: threads, caches, the pool's processes
            served[shape, kind] += len(runners[shape](srv.path, max(10, args.requests // 10))[2])
        t_start, load = time.monotonic(), os.getloadavg()[0]
        for r in range(args.rounds):
            for shape in range(3):
                for kind in ("real", "stdlib") if r % 2 == 0 else ("stdlib", "real"):
                    t0, t1, xs = runners[shape](servers[shape, kind].path, args.requests)
                    lat[shape, kind] += xs
                    served[shape, kind] += len(xs)
                    rate[shape, kind].append(len(xs) / (t1 - t0))
        used = {k: srv.finish() for k, srv in servers.items()}
    finally:
        pool.terminate()
        pool.join()
        for srv in servers.values():
            srv.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    wall = time.monotonic() - t_start
    print(
        f"HTTP server, {time.strftime('%Y-%m-%d %H:%M')}, {args.rounds} rounds of {args.requests} requests "
        f"(shape 3: {CLIENTS} x {args.requests}); {wall:.0f} s; load average {load:.2f} at the start"
    )
    print("  latency, ms: median / p99; stdlib / hand-written")
    for shape, name in enumerate(SHAPES):
        hw, sl = lat[shape, "real"], lat[shape, "stdlib"]
        m_hw, m_sl, q_hw, q_sl = (statistics.median(hw), statistics.median(sl), p99(hw), p99(sl))
        line = (
            f"  ({shape + 1}) {name:27s} hand-written {m_hw * 1e3:6.3f} / {q_hw * 1e3:6.3f}   "
            f"stdlib {m_sl * 1e3:6.3f} / {q_sl * 1e3:6.3f}   ratio median {m_sl / m_hw:5.2f}, p99 {q_sl / q_hw:5.2f}"
        )
        if shape == 2:
            r_hw, r_sl = statistics.median(rate[shape, "real"]), statistics.median(rate[shape, "stdlib"])
            line += f"\n      requests/s (median of rounds): hand-written {r_hw:7.0f}   stdlib {r_sl:7.0f}   "
            line += f"ratio {r_sl / r_hw:5.2f}"
        print(line)
    print("  server CPU per request, ms (all threads), and context switches per request (voluntary + involuntary)")
    for shape, name in enumerate(SHAPES):
        cells = []
        for kind in ("real", "stdlib"):
            cpu, vol, inv = used[shape, kind]
            n = served[shape, kind]
            cells.append((cpu / n * 1e3, vol / n, inv / n))
        (c_hw, v_hw, i_hw), (c_sl, v_sl, i_sl) = cells
        print(
            f"  ({shape + 1}) {name:27s} hand-written {c_hw:6.3f} ms, {v_hw:5.1f} + {i_hw:4.1f}   "
            f"stdlib {c_sl:6.3f} ms, {v_sl:5.1f} + {i_sl:4.1f}   CPU ratio {c_sl / c_hw:5.2f}"
        )


if __name__ == "__main__":
    main()
