"""Talking to a running daemon over its socket (for `netcomp status`, `attach`, `detach`, `explain`, `doctor`),
and why it could not be asked, in one wording for all of them."""

from __future__ import annotations

import http.client
import json
import socket
from typing import Any


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("netcomp", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.path)
        self.sock = s


def call(sock: str, method: str, path: str, body: Any = None, timeout: float = 120.0) -> tuple[int, Any]:
    """(HTTP status, decoded JSON answer or text). Raises OSError when the daemon cannot be reached."""
    conn = _UnixConnection(sock, timeout)
    try:
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        raw = resp.read()
    finally:
        conn.close()
    try:
        return resp.status, json.loads(raw) if raw else None
    except ValueError:
        return resp.status, raw.decode(errors="replace")


def unreachable(sock: str, e: OSError) -> tuple[str, str]:
    """Why the daemon on `sock` could not be asked, and what to do: a socket this user may not use (the daemon
    may well be up) is not a daemon that is down."""
    if isinstance(e, PermissionError):
        return f"{sock} is root-only (the daemon may be up; this user may not use its socket)", "run it as root"
    return (
        f"the daemon is not answering on {sock}: {e.strerror or e}",
        "`systemctl status netcomp`; `journalctl -u netcomp` says why",
    )
