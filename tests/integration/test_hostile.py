"""Hostile and malformed requests: each gets a CNI error (code and message), and the daemon keeps serving."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.integration.daemonlab import DaemonLab, daemon_lab

pytestmark = pytest.mark.root


@pytest.fixture
def dl(tmp_path: Path) -> DaemonLab:  # type: ignore[misc]
    with daemon_lab(tmp_path) as d:
        yield d


@pytest.fixture
def open_dl(tmp_path: Path) -> DaemonLab:  # type: ignore[misc]
    """A daemon whose socket dir sits directly in /tmp (pytest's temp dirs are 0700 to everyone but root)."""
    sockdir = Path(tempfile.mkdtemp(prefix="nc-sock-", dir="/tmp"))
    try:
        with daemon_lab(tmp_path, socket_path=str(sockdir / "run" / "netcomp.sock")) as d:
            yield d
    finally:
        shutil.rmtree(sockdir, ignore_errors=True)


def raw(sock: str, data: bytes) -> tuple[int, dict]:
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
    data = config if isinstance(config, bytes) else json.dumps(config).encode()
    return json.dumps({"env": env, "config": base64.b64encode(data).decode()}).encode()


def env(**kw: str) -> dict[str, str]:
    base = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "evil", "CNI_NETNS": "/var/run/netns/none", "CNI_IFNAME": "eth0"}
    base.update(kw)
    return base


CONF = {"cniVersion": "1.0.0", "name": "netcomp", "type": "netcomp"}


@pytest.mark.parametrize(
    ("body", "code", "words"),
    [
        (b"{not json", 6, "not JSON"),
        (b'{"env": {}, "config": "%%%"}', 6, "not valid base64"),
        (json.dumps({"env": {}, "config": base64.b64encode(b"{nope").decode()}).encode(), 6, "not JSON"),
        (b'{"env": {"CNI_COMMAND": 1}, "config": ""}', 4, "strings"),
        (b"[]", 6, '"env" and "config"'),
        (cni(env(CNI_COMMAND="EXPLODE"), CONF), 4, "unknown CNI_COMMAND"),
        (cni(env(CNI_CONTAINERID="../../etc"), CONF), 4, "invalid CNI_CONTAINERID"),
        (cni(env(CNI_IFNAME="../eth0"), CONF), 4, "invalid interface name"),
        (cni(env(CNI_IFNAME="a-very-long-interface"), CONF), 4, "invalid interface name"),
        (cni(env(CNI_NETNS="/var/run/netns/../../etc/passwd"), CONF), 4, "without '..'"),
        (cni(env(CNI_NETNS="/etc/passwd"), CONF), 4, "is not a network namespace"),
        (cni(env(CNI_NETNS="relative/ns"), CONF), 4, "absolute path"),
        (cni(env(CNI_ARGS="NETCOMP_NETWORKS=../../bin/sh"), CONF), 7, "invalid network name"),
        (cni(env(CNI_ARGS="NETCOMP_NETWORKS=nosuchnet"), CONF), 7, "not compiled on this node"),
        (cni(env(CNI_ARGS="NETCOMP_NETWORKS=storage@x/y"), CONF), 4, "invalid interface name"),
        (cni(env(), {**CONF, "cniVersion": "9.9.9"}), 1, "incompatible CNI versions"),
        (cni(env(), b'"a string"'), 6, "not a JSON object"),
    ],
)
def test_malformed_requests_get_cni_errors(dl: DaemonLab, body: bytes, code: int, words: str) -> None:
    status, err = post(dl.sock, body)
    assert status == 400
    assert err["code"] == code and words in err["msg"], err
    assert raw(dl.sock, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")[0] == 200


def test_oversized_body_and_missing_length(dl: DaemonLab) -> None:
    big = b"x" * (10 * 1024 * 1024)
    status, err = post(dl.sock, big)
    assert status == 413 and err["code"] == 101
    status, err = raw(dl.sock, b"POST /cni HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 411 and err["code"] == 6
    status, err = raw(dl.sock, b"PUT /cni HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
    assert status == 405
    status, err = raw(dl.sock, b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 404
    assert raw(dl.sock, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")[0] == 200


def test_socket_is_root_only_and_peer_uid_checked(open_dl: DaemonLab) -> None:
    dl = open_dl
    st = os.stat(dl.sock)
    assert st.st_mode & 0o777 == 0o600 and os.stat(os.path.dirname(dl.sock)).st_mode & 0o777 == 0o700
    # A non-root peer that gets hold of the socket anyway (here: we open the dir and socket to it) is refused.
    for d in (Path(dl.sock).parent, Path(dl.sock).parent.parent):
        os.chmod(d, 0o711)
    os.chmod(dl.sock, 0o666)
    code = f"""
import os, socket
os.setgid(65534); os.setuid(65534)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.connect({dl.sock!r})
s.sendall(b"GET /status HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
data = b""
while chunk := s.recv(65536):  # to the end: headers and body may arrive apart
    data += chunk
print(data.decode())
"""
    python = "/usr/bin/python3"  # the venv's python lives under /root, out of nobody's reach
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=30, check=True).stdout
    assert out.startswith("HTTP/1.1 403") and '"code": 100' in out and "peer uid 65534" in out
    assert raw(dl.sock, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")[0] == 200


def test_busy_daemon_answers_try_again_later(dl: DaemonLab) -> None:
    server = dl.daemon.server
    assert server is not None
    taken = 0
    while server.enter():  # occupy every slot, as 64 slow requests would
        taken += 1
    try:
        status, err = post(dl.sock, cni(env(), CONF))
        assert status == 429 and err["code"] == 11
    finally:
        for _ in range(taken):
            server.leave()
    assert taken == dl.settings.maxInFlight


def test_metrics_and_status_endpoints(dl: DaemonLab) -> None:
    post(dl.sock, b"{not json")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(dl.sock)
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    s.close()
    assert b'netcomp_cni_requests_total{outcome="error",verb="?"}' in data
    assert b"netcomp_networks 7.0" in data
    status, doc = raw(dl.sock, b"GET /status HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 200 and {n["name"] for n in doc["networks"]} >= {
        "mgmt",
        "storage",
        "backup",
        "nowhere",
        "signal",
        "tunnel",
        "tagged",
    }


def test_cli_reports_a_refusal_without_a_traceback(tmp_path: Path) -> None:
    """`netcomp status` / `attachments` against a daemon that refuses this peer (root is not in allowedUids):
    exit 1 and the daemon's words, not an internal error."""
    import io

    from netcomp.cli import main

    with daemon_lab(tmp_path, extra={"allowedUids": [4242]}) as dl:
        cfg = tmp_path / "cli.yaml"
        cfg.write_text(f"socket: {dl.sock}\n")
        for command in ("status", "attachments"):
            out, err = io.StringIO(), io.StringIO()
            assert main([command, "--config", str(cfg)], out, err) == 1
            assert err.getvalue() == "netcomp: the daemon refused: peer uid 0 may not use the netcomp socket\n"
            assert out.getvalue() == ""
