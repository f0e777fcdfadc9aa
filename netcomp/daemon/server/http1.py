"""The little HTTP/1.1 the daemon speaks, as functions: a request head parsed (or refused with a CNI error),
an answer framed, and what the socket says of its peer. The server (server.py) is the loop around them. It is
hand-written, not the stdlib's http.server, for the shim's one request per connection (bench/httpserver.py compares
the two)."""

from __future__ import annotations

import re
import select
import socket
import struct
from http import HTTPStatus

from netcomp.cni.codes import E_DECODE, E_TOO_LARGE

MAX_HEAD = 64 * 1024
_PEERCRED = struct.Struct("3i")
# A head's end: CRLF CRLF, or (refused at once) one with a bare LF, which RFC 9112 section 2.2 lets a server reject.
_HEAD_END = re.compile(rb"\r?\n\r?\n")
# RFC 9110's name for 413; Python 3.11's HTTPStatus still has the older "Request Entity Too Large".
REASONS = {**{s.value: s.phrase for s in HTTPStatus}, 413: "Content Too Large"}


class Refuse(Exception):
    def __init__(self, status: int, code: int, msg: str, details: str = "", *, linger: bool = False) -> None:
        super().__init__(msg)
        self.status, self.code, self.msg, self.details, self.linger = status, code, msg, details, linger


def parse_head(head: bytes) -> tuple[str, str, dict[str, str]]:
    """(method, target: the path and its query string, headers by lower-case name) of a request head; Refuse when
    it is not HTTP/1.x."""
    lines = head[:-4].split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/1.") or not parts[0].isalpha() or not parts[1][:1] == b"/":
        raise Refuse(400, E_DECODE, "not an HTTP/1.1 request", linger=True)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not name or name != name.strip() or not name.isascii():
            raise Refuse(400, E_DECODE, "malformed header line", linger=True)
        key, text = name.decode().lower(), value.strip().decode("latin-1")
        if key == "content-length" and headers.get(key, text) != text:  # which one frames the body? (smuggling)
            raise Refuse(400, E_DECODE, "conflicting Content-Length headers", linger=True)
        headers[key] = text
    return parts[0].decode(), parts[1].decode("latin-1"), headers


def content_length(headers: dict[str, str], max_body: int) -> int:
    """The body's length a request head declares; Refuse when it declares none, a chunked one, or one too long."""
    if "transfer-encoding" in headers:
        raise Refuse(411, E_DECODE, "send the request with a Content-Length, not chunked", linger=True)
    length = headers.get("content-length")
    if length is None:
        raise Refuse(411, E_DECODE, "a request needs a Content-Length", linger=True)
    if not (length.isascii() and length.isdigit()) or len(length) > 12:  # not '²'; int() fails (RFC 9112 6.3)
        raise Refuse(400, E_DECODE, "malformed Content-Length", linger=True)
    n = int(length)
    if n > max_body:
        raise Refuse(413, E_TOO_LARGE, f"request of {n} bytes is over the limit of {max_body}", linger=True)
    return n


class Incoming:
    """A request as its bytes arrive: the head, parsed once it is all there (within MAX_HEAD), then its body of the
    length it declares: a POST must declare one; another method's body, if it has one, is read and ignored (left
    unread, closing the connection could reset it before the client read its answer)."""

    __slots__ = ("body", "buf", "head", "need")

    def __init__(self) -> None:
        self.buf = bytearray()
        self.head: tuple[str, str, dict[str, str]] | None = None
        self.need = 0
        self.body = b""

    def feed(self, data: bytes, max_body: int) -> bool:
        """Whether the request is complete with data; Refuse when it is not one to serve."""
        start = max(0, len(self.buf) - 3)  # the end of the head may straddle what came before: no rescan
        self.buf += data
        if self.head is None:
            found = _HEAD_END.search(self.buf, start, MAX_HEAD + 4)
            if found is None:
                if len(self.buf) > MAX_HEAD:
                    raise Refuse(431, E_DECODE, "request head over 64 KiB", linger=True)
                return False
            if found.end() - found.start() != 4:
                raise Refuse(400, E_DECODE, "request head lines must end in CRLF", linger=True)
            self.head = parse_head(bytes(self.buf[: found.end()]))
            del self.buf[: found.end()]
            method, _, headers = self.head
            if method == "POST" or "content-length" in headers or "transfer-encoding" in headers:
                self.need = content_length(headers, max_body)
        if len(self.buf) < self.need:
            return False
        self.body = bytes(self.buf[: self.need])
        self.buf = bytearray()
        return True


def response(status: int, body: bytes, ctype: str = "application/json") -> bytes:
    head = (
        f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}\r\nContent-Type: {ctype}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


def peer(sock: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the peer; (-1, -1) when unknown."""
    try:
        pid, uid, _ = _PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
    except OSError:
        return -1, -1
    return pid, uid


def hung_up(sock: socket.socket) -> bool:
    """The client closed the connection (not just its writing half: some clients do that after the request)."""
    p = select.poll()
    p.register(sock.fileno(), select.POLLHUP)
    return any(ev & (select.POLLHUP | select.POLLERR | select.POLLNVAL) for _, ev in p.poll(0))
