"""The daemon's HTTP server (daemon/server/) as the standard library's `http.client` meets it over the unix socket:
a connection serves one request (every answer says `Connection: close`, so a kept-alive client connects again),
pipelined requests after the first are not served, a body that comes in pieces is waited for, and a head that is
too large or malformed gets its CNI error and the connection's end. The real Server and Loop serve stub views
(`/status`) and a stub query (`/echo`); `/cni` has no delegator here, so only requests refused before one is
needed are sent there."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import http.client
import io
import json
import os
import shutil
import socket
import struct
import tempfile
import termios
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from netcomp.daemon.server.connections import Limits
from netcomp.daemon.server.http1 import MAX_HEAD
from netcomp.daemon.server.server import Server, listen
from netcomp.metrics import Metrics
from tests.lab.poll import until
from tests.lab.wire import CONF, cni, env

TIMEOUT = 30.0  # every socket's: a server that does not answer fails the test, never hangs it


class Lab:
    """A Server on a socket of its own; `/status` counts its calls, `/slow` waits for `go` (set at the end
    whatever happens, so no worker is left waiting), `/echo` answers the length and digest of the body it got."""

    def __init__(self, path: str, limits: Limits) -> None:
        self.path = path
        self.status_calls = 0
        self.slow_entered, self.go = threading.Event(), threading.Event()
        sock, _ = listen(path)
        self.server = Server(
            sock,
            None,  # type: ignore[arg-type]  # no CNI request reaches a delegator here
            Metrics(),
            limits=limits,
            views={"/status": self._status, "/slow": self._slow},
            queries={"/echo": lambda body: {"bytes": len(body), "sha256": hashlib.sha256(body).hexdigest()}},
        )
        self.server.ready.set()

    def _status(self, _: object) -> dict[str, int]:
        self.status_calls += 1  # views run on workers, one at a time here
        return {"calls": self.status_calls}

    def _slow(self, _: object) -> dict[str, bool]:
        self.slow_entered.set()
        return {"went": self.go.wait(TIMEOUT)}

    def raw(self) -> socket.socket:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(TIMEOUT)
        s.connect(self.path)
        return s


@contextlib.contextmanager
def serving(limits: Limits | None = None) -> Iterator[Lab]:
    # A short directory in /tmp: pytest's temp paths of parametrized tests can pass sun_path's 108 bytes.
    tmp = tempfile.mkdtemp(prefix="nc-http-", dir="/tmp")
    lab = Lab(os.path.join(tmp, "run", "netcomp.sock"), limits or Limits(allowed_uids={os.getuid()}))
    try:
        lab.server.start()
        yield lab
    finally:
        lab.go.set()
        lab.server.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    thread = lab.server.loop._thread
    assert thread is not None and not thread.is_alive(), "the serving loop did not stop"


@pytest.fixture
def lab() -> Iterator[Lab]:
    with serving(Limits(allowed_uids={os.getuid()}, header_timeout=TIMEOUT)) as lab:
        yield lab


class UnixHTTPConnection(http.client.HTTPConnection):
    """http.client over the daemon's socket; counts the connections it opened (it opens one again by itself once
    an answer said `Connection: close`)."""

    def __init__(self, path: str) -> None:
        super().__init__("netcomp", timeout=TIMEOUT)
        self.unix_path = path
        self.connects = 0

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(self.timeout)
            s.connect(self.unix_path)
        except BaseException:
            s.close()
            raise
        self.sock = s
        self.connects += 1


class _Capture:
    """What http.client's HTTPConnection writes to its socket, kept: a request in http.client's own framing."""

    def __init__(self) -> None:
        self.data = bytearray()

    def sendall(self, data: bytes) -> None:
        self.data += data

    def close(self) -> None:
        pass


def framed(method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> bytes:
    conn = http.client.HTTPConnection("netcomp")
    capture = _Capture()
    conn.sock = capture
    conn.request(method, path, body=body, headers=headers or {})
    return bytes(capture.data)


class _Kept(io.BufferedReader):
    def close(self) -> None:
        pass  # the test closes the socket; an answer read whole must not take the others' buffer with it


class Answers:
    """Answers read in turn from one socket with http.client.HTTPResponse, through one buffer: each response
    would make a buffer of its own and lose what the one before read ahead (a 102 and its final answer arrive
    together)."""

    def __init__(self, sock: socket.socket) -> None:
        self.fp = _Kept(socket.SocketIO(sock, "rb"))

    def makefile(self, mode: str) -> io.BufferedReader:
        return self.fp

    def next(self, method: str = "GET") -> tuple[http.client.HTTPResponse, bytes]:
        resp = http.client.HTTPResponse(self, method=method)  # type: ignore[arg-type]
        resp.begin()
        return resp, resp.read()


def ended(s: socket.socket) -> bool:
    """The server closed (or shut the writing half of) the connection: its next read is the end, or a reset
    (a unix socket closed with bytes unread reports ECONNRESET once, after what was sent before)."""
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return s.recv(1) == b""


def answered(conn: http.client.HTTPConnection) -> tuple[int, dict[str, Any], bool]:
    """The status and JSON of the answer to the request `conn` just sent, and whether the server ended the
    connection after it (read on a duplicate of the socket: http.client closes its own after such an answer)."""
    assert conn.sock is not None
    with contextlib.closing(conn.sock.dup()) as s:
        resp = conn.getresponse()
        doc = json.loads(resp.read())
        return resp.status, doc, resp.will_close and ended(s)


def unsent(s: socket.socket) -> int:
    """Bytes written to a unix stream socket that its peer has not read yet (SIOCOUTQ)."""
    (n,) = struct.unpack("i", fcntl.ioctl(s.fileno(), termios.TIOCOUTQ, b"\0" * 4))
    return int(n)


def nothing_to_read(s: socket.socket) -> bool:
    try:
        s.setblocking(False)
        s.recv(1, socket.MSG_PEEK)
    except BlockingIOError:
        return True
    finally:
        s.settimeout(TIMEOUT)
    return False


def echo_of(body: bytes) -> dict[str, Any]:
    return {"bytes": len(body), "sha256": hashlib.sha256(body).hexdigest()}


# ---------------------------------------------------------------------------------------------------------- keep-alive


def test_each_request_on_a_kept_alive_connection_is_answered_on_a_connection_of_its_own(lab: Lab) -> None:
    """http.client keeps a connection alive unless an answer says close: every one of the server's does, so six
    requests through one HTTPConnection take six connections, and each answer is its own request's."""
    conn = UnixHTTPConnection(lab.path)
    try:
        for i in range(3):
            conn.request("GET", "/status")
            resp = conn.getresponse()
            assert (resp.status, json.loads(resp.read())) == (200, {"calls": i + 1})
            assert resp.getheader("Connection") == "close" and resp.will_close
            body = b'{"n": %d, "pad": "%s"}' % (i, b"x" * 1000 * i)
            conn.request("POST", "/echo", body=body, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            assert (resp.status, json.loads(resp.read())) == (200, echo_of(body))
            assert resp.will_close
    finally:
        conn.close()
    assert conn.connects == 6


def test_a_request_that_asks_for_keep_alive_still_ends_its_connection(lab: Lab) -> None:
    with contextlib.closing(lab.raw()) as s:
        s.sendall(framed("GET", "/status", headers={"Connection": "keep-alive"}))
        resp, body = Answers(s).next()
        assert (resp.status, json.loads(body), resp.getheader("Connection")) == (200, {"calls": 1}, "close")
        assert ended(s)


# ---------------------------------------------------------------------------------------------------------- pipelining


def test_pipelined_requests_after_the_first_are_not_served(lab: Lab) -> None:
    """Three requests written at once: the first is answered with `Connection: close` and the connection ends;
    the other two are never run (RFC 9112 9.6: after close, no further request is processed; 9.3.2: the
    client retries what was not answered)."""
    with contextlib.closing(lab.raw()) as s:
        body = b'{"first": true}'
        s.sendall(framed("POST", "/echo", body) + framed("GET", "/status") + framed("GET", "/status"))
        answers = Answers(s)
        resp, got = answers.next("POST")
        assert (resp.status, json.loads(got)) == (200, echo_of(body)) and resp.will_close
        with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError)):
            answers.next()
    # The connection is closed server-side (the end was read above): nothing of it can be routed any more.
    until(lambda: lab.server.loop._conns == 0, "every connection closed", TIMEOUT)
    assert lab.status_calls == 0


def test_a_request_pipelined_while_the_first_runs_leaves_its_answer_whole(lab: Lab) -> None:
    """The second request arrives after the loop handed the first to a worker: it stays unread in the socket
    when the worker closes it. The first answer is still read whole (a unix socket keeps what was sent before
    the reset); the second is not run."""
    with contextlib.closing(lab.raw()) as s:
        s.sendall(framed("GET", "/slow"))
        assert lab.slow_entered.wait(TIMEOUT)
        s.sendall(framed("GET", "/status"))
        lab.go.set()
        answers = Answers(s)
        resp, got = answers.next()
        assert (resp.status, json.loads(got)) == (200, {"went": True})
        with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError)):
            answers.next()
    until(lambda: lab.server.loop._conns == 0, "every connection closed", TIMEOUT)
    assert lab.status_calls == 0


# ---------------------------------------------------------------------------------------------------- bodies in pieces


def _send_in_pieces(s: socket.socket, data: bytes, cuts: list[int]) -> None:
    """`data` sent in pieces cut at `cuts`; after each but the last, the server has read it (SIOCOUTQ at 0) and
    has not answered."""
    start = 0
    for end in [*cuts, len(data)]:
        s.sendall(data[start:end])
        start = end
        if end < len(data):
            until(lambda: unsent(s) == 0, f"the server did not read the piece ending at {end}", TIMEOUT, 0.005)
            assert nothing_to_read(s), "answered before the request was whole"


def test_a_body_in_pieces_is_waited_for(lab: Lab) -> None:
    """The head's blank line cut in two, then the body in four pieces, each read by the server before the next
    is sent: one answer, for the whole body."""
    body = json.dumps({"env": {"CNI_COMMAND": "ADD"}, "pad": "x" * 3000}).encode()
    request = framed("POST", "/echo", body)
    head_end = request.index(b"\r\n\r\n")
    cuts = [head_end + 3, head_end + 4 + 1, head_end + 4 + 1000, head_end + 4 + 2000]
    with contextlib.closing(lab.raw()) as s:
        _send_in_pieces(s, request, cuts)
        resp, got = Answers(s).next("POST")
        assert (resp.status, json.loads(got)) == (200, echo_of(body))


def test_a_cni_body_in_pieces_reaches_the_handler_whole(lab: Lab) -> None:
    """The same on /cni (a CNI request's worker, not an operator's): a body cut anywhere would not be JSON; the
    whole one is decoded and refused for its command, the first check after the decoding."""
    body = cni(env(CNI_COMMAND="EXPLODE", CNI_ARGS="X=" + "y" * 2000), CONF)
    request = framed("POST", "/cni", body)
    start = request.index(b"\r\n\r\n") + 4
    with contextlib.closing(lab.raw()) as s:
        _send_in_pieces(s, request, [start - 1, start + 10, start + 700, len(request) - 1])
        resp, got = Answers(s).next("POST")
        err = json.loads(got)
        assert resp.status == 400 and err["code"] == 4 and "CNI_COMMAND" in err["msg"], err


def test_a_body_that_never_comes_whole_gets_408_and_the_end() -> None:
    with serving(Limits(allowed_uids={os.getuid()}, header_timeout=0.3)) as lab, contextlib.closing(lab.raw()) as s:
        s.sendall(framed("POST", "/echo", b"x" * 100)[:-40])
        resp, got = Answers(s).next("POST")  # blocks until the server gives up: no sleep here
        err = json.loads(got)
        assert resp.status == 408 and err["code"] == 6 and "not complete within 0.3s" in err["msg"]
        assert ended(s)


# -------------------------------------------------------------------------------------- heads and bodies over the caps


def _big_head(size: int) -> bytes:
    """A GET /status head of exactly `size` bytes, blank line included."""
    base = framed("GET", "/status", headers={"X-Pad": ""})
    return base.replace(b"X-Pad: \r\n", b"X-Pad: " + b"p" * (size - len(base)) + b"\r\n")


def test_a_head_of_64_kib_is_served(lab: Lab) -> None:
    head = _big_head(MAX_HEAD)
    assert len(head) == MAX_HEAD
    with contextlib.closing(lab.raw()) as s:
        s.sendall(head)
        resp, got = Answers(s).next()
        assert (resp.status, json.loads(got)) == (200, {"calls": 1})


@pytest.mark.parametrize("shape", ["one header", "many headers"])
def test_a_head_over_64_kib_gets_431_and_the_end(lab: Lab, shape: str) -> None:
    """Sent by http.client itself (putheader), all of it: the server answers once the cap is passed and reads
    what else comes without serving it."""
    conn = UnixHTTPConnection(lab.path)
    try:
        conn.putrequest("GET", "/status")
        if shape == "one header":
            conn.putheader("X-Big", "b" * (MAX_HEAD + 4096))
        else:
            for i in range(90):  # under http.client's own cap of 100 headers, each far under its line cap
                conn.putheader(f"X-Pad-{i}", "p" * 1000)
        conn.endheaders()
        status, err, end = answered(conn)
        assert status == 431 and err["code"] == 6 and "over 64 KiB" in err["msg"] and end
    finally:
        conn.close()
    assert lab.status_calls == 0


def test_a_body_over_max_body_gets_413_and_the_end() -> None:
    with serving(Limits(allowed_uids={os.getuid()}, max_body=4096)) as lab:
        conn = UnixHTTPConnection(lab.path)
        try:
            conn.request("POST", "/echo", body=b"z" * 5000)
            status, err, end = answered(conn)
            assert status == 413 and err["code"] == 101 and "5000 bytes is over the limit of 4096" in err["msg"]
            assert end
            conn.request("POST", "/echo", body=b"z" * 4096)  # the cap itself is served (a new connection)
            resp = conn.getresponse()
            assert (resp.status, json.loads(resp.read())) == (200, echo_of(b"z" * 4096))
        finally:
            conn.close()


def test_a_chunked_body_from_http_client_gets_411_and_the_end(lab: Lab) -> None:
    """http.client sends a body of unknown length (an iterable) chunked; the server takes only Content-Length."""
    conn = UnixHTTPConnection(lab.path)
    try:
        conn.request("POST", "/echo", body=iter([b'{"a":', b" 1}"]))
        status, err, end = answered(conn)
        assert status == 411 and err["code"] == 6 and "not chunked" in err["msg"] and end
    finally:
        conn.close()


# ----------------------------------------------------------------------------------------------------- malformed heads

_GET = b"GET /status HTTP/1.1\r\nHost: netcomp\r\n"
_POST = b"POST /echo HTTP/1.1\r\nHost: netcomp\r\n"
NOT_HTTP, MALFORMED, NO_LENGTH = "not an HTTP/1.1 request", "malformed header line", "a request needs a Content-Length"
BAD_LENGTH, BARE_LF = "malformed Content-Length", "must end in CRLF"


@pytest.mark.parametrize(
    ("request_bytes", "status", "words"),
    [
        (b"GET /status\r\nHost: netcomp\r\n\r\n", 400, NOT_HTTP),  # no version
        (b"GET  /status HTTP/1.1\r\n\r\n", 400, NOT_HTTP),  # two spaces
        (b"GET status HTTP/1.1\r\n\r\n", 400, NOT_HTTP),  # not a path
        (b"G3T /status HTTP/1.1\r\n\r\n", 400, NOT_HTTP),
        (b"GET /status HTTP/2.0\r\n\r\n", 400, NOT_HTTP),
        (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 400, NOT_HTTP),  # HTTP/2's preface
        (_GET + b"Broken header\r\n\r\n", 400, MALFORMED),
        (_GET + b"X-Space : x\r\n\r\n", 400, MALFORMED),  # whitespace before the colon: RFC 9112 5.1's 400
        (_GET + b"X-Fold: a\r\n folded\r\n\r\n", 400, MALFORMED),  # obs-fold
        (_GET + b": no name\r\n\r\n", 400, MALFORMED),
        (_GET + "X-Ünï: x\r\n\r\n".encode(), 400, MALFORMED),
        (_POST + b"Content-Length: abc\r\n\r\n", 400, BAD_LENGTH),  # RFC 9112 6.3: 400, not 411
        (_POST + b"Content-Length: -1\r\n\r\n", 400, BAD_LENGTH),
        (_POST + b"Content-Length: +5\r\n\r\nhello", 400, BAD_LENGTH),
        (_POST + b"Content-Length: 0x10\r\n\r\n", 400, BAD_LENGTH),
        (_POST + b"Content-Length: 5, 5\r\n\r\nhello", 400, BAD_LENGTH),
        (_POST + b"Content-Length: 1234567890123\r\n\r\n", 400, BAD_LENGTH),
        (_POST + b"\r\n", 411, NO_LENGTH),
        (b"GET /status HTTP/1.1\nHost: netcomp\n\n", 400, BARE_LF),  # at once, not after headerTimeout
        (_GET + b"\n", 400, BARE_LF),
        (_GET + b"X-A: b\n\r\n", 400, BARE_LF),
        (_POST + b"Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", 400, "conflicting Content-Length headers"),
        (_POST + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 411, "not chunked"),
        (_POST + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\nhello", 411, "not chunked"),
        (_GET + b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 411, "not chunked"),
    ],
)
def test_a_malformed_head_gets_its_4xx_and_the_end(lab: Lab, request_bytes: bytes, status: int, words: str) -> None:
    with contextlib.closing(lab.raw()) as s:
        s.sendall(request_bytes)
        resp, got = Answers(s).next()
        err = json.loads(got)
        assert (resp.status, err["code"]) == (status, 6) and words in err["msg"], (resp.status, err)
        assert resp.will_close and ended(s)
    assert lab.status_calls == 0


def test_the_same_content_length_twice_is_one(lab: Lab) -> None:
    with contextlib.closing(lab.raw()) as s:
        s.sendall(_POST + b"Content-Length: 5\r\ncontent-length: 5\r\n\r\nhello")
        resp, got = Answers(s).next("POST")
        assert (resp.status, json.loads(got)) == (200, echo_of(b"hello"))


# ------------------------------------------------------------------------------------------- the peer, interim answers


def test_a_peer_not_allowed_gets_403_and_the_end() -> None:
    with serving(Limits(allowed_uids={os.getuid() + 1})) as lab:
        conn = UnixHTTPConnection(lab.path)
        try:
            conn.request("GET", "/status")
            status, err, end = answered(conn)
            assert status == 403 and err["code"] == 100 and f"peer uid {os.getuid()}" in err["msg"] and end
        finally:
            conn.close()
        assert lab.status_calls == 0


def test_a_shims_interim_answer_is_a_message_of_its_own(lab: Lab) -> None:
    """`X-Netcomp-Shim: 1` on /cni: `102 Processing` as the request is taken, then the final answer on the same
    connection; http.client reads each as a response (its getresponse() would stop at the 102: only a shim, which
    expects it, asks for it)."""
    body = b"{not json"
    with contextlib.closing(lab.raw()) as s:
        s.sendall(framed("POST", "/cni", body, headers={"X-Netcomp-Shim": "1"}))
        answers = Answers(s)
        interim, nothing = answers.next("POST")
        assert (interim.status, nothing) == (102, b"")
        resp, got = answers.next("POST")
        err = json.loads(got)
        assert resp.status == 400 and err["code"] == 6 and "not JSON" in err["msg"]
        assert ended(s)
