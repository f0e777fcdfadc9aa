"""The little HTTP/1.1 the daemon speaks, as functions: a request head parsed (or refused with a CNI error),
an answer framed, and what the socket says of its peer. The server (server.py) is the loop around them.

The parser is these few lines rather than a library: the daemon serves a handful of fixed requests from local
clients, and a general HTTP server (aiohttp) would cost ~10 MB of memory and 0.15 s of start-up."""

from __future__ import annotations

import select
import socket
import struct

from netcomp.cni.codes import E_DECODE

_PEERCRED = struct.Struct("3i")
REASONS = {
    102: "Processing",
    200: "OK",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    411: "Length Required",
    413: "Content Too Large",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
}


class Refuse(Exception):
    def __init__(self, status: int, code: int, msg: str, details: str = "", *, linger: bool = False) -> None:
        super().__init__(msg)
        self.status, self.code, self.msg, self.details, self.linger = status, code, msg, details, linger


def parse_head(head: bytes) -> tuple[str, str, dict[str, str]]:
    """(method, path, headers by lower-case name) of a request head; _Refuse when it is not HTTP/1.x."""
    lines = head[:-4].split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/1.") or not parts[0].isalpha() or not parts[1][:1] == b"/":
        raise Refuse(400, E_DECODE, "not an HTTP/1.1 request")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not name or name != name.strip() or not name.isascii():
            raise Refuse(400, E_DECODE, "malformed header line")
        headers[name.decode().lower()] = value.strip().decode("latin-1")
    path = parts[1].split(b"?", 1)[0].decode("latin-1")
    return parts[0].decode(), path, headers


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
