"""Requests to the daemon's socket as any client may send them, not as the shim does: raw bytes, an HTTP POST,
a /cni body around any environment and config; each answer read whole, its status and its JSON body."""

from __future__ import annotations

import base64
import contextlib
import json
import socket


def raw(sock: str, data: bytes) -> tuple[int, dict]:
    """Send `data` as it is; the answer's status and JSON body."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect(sock)
    chunks = []
    try:
        # The daemon may refuse before reading everything; its answer is still there to read.
        with contextlib.suppress(BrokenPipeError):
            s.sendall(data)
        while chunk := s.recv(65536):
            chunks.append(chunk)
    finally:
        s.close()
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body) if body else {}


def post(sock: str, body: bytes, path: str = "/cni") -> tuple[int, dict]:
    return raw(sock, f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)


def cni(env: dict[str, str], config: dict | bytes) -> bytes:
    """A /cni body: `env` and the config (a dict, or bytes sent as they are) in base64."""
    data = config if isinstance(config, bytes) else json.dumps(config).encode()
    return json.dumps({"env": env, "config": base64.b64encode(data).decode()}).encode()


def env(**kw: str) -> dict[str, str]:
    """An ADD's environment for a container that is nowhere, changed by `kw`."""
    base = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "evil", "CNI_NETNS": "/var/run/netns/none", "CNI_IFNAME": "eth0"}
    base.update(kw)
    return base


CONF = {"cniVersion": "1.0.0", "name": "netcomp", "type": "netcomp"}


def read_all(s: socket.socket) -> bytes:
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    return data
