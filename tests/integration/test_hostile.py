"""Hostile and malformed requests: each gets a CNI error (code and message), and the daemon keeps serving."""

from __future__ import annotations

import base64
import concurrent.futures
import contextlib
import json
import os
import resource
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.lab.daemonlab import DaemonLab, daemon_lab
from tests.lab.netlab import PLUGIN_DIR

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


def _gated_lab(tmp_path: Path, **limits: Any) -> tuple[Path, Any]:
    """A daemon_lab whose only network, `gated`, runs a plugin that answers ADD only when the test writes a line
    to a FIFO: requests in flight for exactly as long as the test wants, without timing anything."""
    gate = tmp_path / "gate.fifo"
    os.mkfifo(gate)
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    script = plugins / "gate"
    script.write_text(
        "#!/bin/sh\ncase $CNI_COMMAND in ADD) read -r line < "
        + str(gate)
        + ' ; echo \'{"cniVersion": "1.0.0"}\';; esac\n'
    )
    script.chmod(0o755)
    extra = {"pluginDirs": [str(plugins), PLUGIN_DIR], "defaultNetwork": None, **limits}
    return gate, daemon_lab(tmp_path, extra=extra)


def _add_gated(dl: DaemonLab) -> None:
    (dl.base / "static.d" / "gated.conflist").write_text(
        json.dumps({"cniVersion": "1.0.0", "name": "gated", "plugins": [{"type": "gate"}]})
    )
    (dl.base / "networks.d" / "90-gated.yaml").write_text(
        "apiVersion: netcomp.io/v1\nkind: Network\nmetadata: {name: gated}\nspec: {type: static, networkID: gated}\n"
    )
    assert "gated" in dl.daemon.reload().networks


def _open_gate(gate: Path) -> None:
    with open(gate, "w") as f:  # blocks until a gated plugin opens it to read: exactly one ADD goes on
        f.write("go\n")


def test_requests_over_max_in_flight_wait_their_turn(tmp_path: Path) -> None:
    """maxInFlight 1, maxQueued 1: the second request waits and is served; only the third, with the queue
    full, is told to try again later (429, CNI 11)."""
    gate, lab_cm = _gated_lab(tmp_path, maxInFlight=1, maxQueued=1)
    with lab_cm as dl, concurrent.futures.ThreadPoolExecutor(2) as pool:
        _add_gated(dl)
        server = dl.daemon.server
        assert server is not None
        a, b = dl.lab.container(), dl.lab.container()
        first = pool.submit(dl.shim, "ADD", a, args="NETCOMP_NETWORKS=gated", ready_timeout=60)
        assert server.wait_for(lambda: server.in_flight == 1, 30)
        second = pool.submit(dl.shim, "ADD", b, args="NETCOMP_NETWORKS=gated", ready_timeout=60)
        assert server.wait_for(lambda: server.queued == 1, 30)
        status, err = post(dl.sock, cni(env(CNI_ARGS="NETCOMP_NETWORKS=gated"), CONF))
        assert status == 429 and err["code"] == 11 and "busy" in err["msg"]
        _open_gate(gate)
        assert first.result(timeout=60)[0] == 0
        _open_gate(gate)
        assert second.result(timeout=60)[0] == 0
        # In flight until its log line is written, after the answer.
        assert server.wait_for(lambda: server.queued == 0 and server.in_flight == 0, 30)
        for ctr in (a, b):
            assert dl.shim("DEL", ctr)[0] == 0
        assert dl.cache_files() == []


def test_a_request_whose_client_left_the_queue_is_not_started(tmp_path: Path) -> None:
    """A shim that gave up while its ADD waited in the queue must not find it run later."""
    gate, lab_cm = _gated_lab(tmp_path, maxInFlight=1)
    with lab_cm as dl, concurrent.futures.ThreadPoolExecutor(1) as pool:
        _add_gated(dl)
        server = dl.daemon.server
        assert server is not None
        a = dl.lab.container()
        first = pool.submit(dl.shim, "ADD", a, args="NETCOMP_NETWORKS=gated", ready_timeout=60)
        assert server.wait_for(lambda: server.in_flight == 1, 30)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(dl.sock)
        body = cni(
            env(CNI_CONTAINERID="gone", CNI_NETNS=f"/var/run/netns/{a}", CNI_ARGS="NETCOMP_NETWORKS=gated"), CONF
        )
        s.sendall(f"POST /cni HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        assert server.wait_for(lambda: server.queued == 1, 30)
        s.close()
        served = server.served
        _open_gate(gate)
        assert first.result(timeout=60)[0] == 0
        assert server.wait_for(lambda: server.queued == 0 and server.in_flight == 0, 30)
        assert server.served == served + 1  # the first ADD only
        assert dl.daemon.cache.load("gone", "eth0") is None
        assert dl.shim("DEL", a)[0] == 0


def test_idle_connections_cost_no_thread_and_do_not_starve_the_runtime(tmp_path: Path) -> None:
    """1,000 connections that send nothing (a slowloris from one process): at most maxConnectionsPerPeer are
    held, the rest are refused at once with a CNI error, no thread is spent on any, the held ones are closed
    after headerTimeout, and the runtime's shims (other processes) are served meanwhile."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    conns: list[socket.socket] = []
    try:
        with daemon_lab(tmp_path, extra={"headerTimeout": 3, "maxConnectionsPerPeer": 64}) as dl:
            threads = threading.active_count()
            for _ in range(1000):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                conns.append(s)
                s.connect(dl.sock)  # blocking: waits for room in the backlog, as a client of a busy server does
                s.settimeout(30)
            ctr = dl.lab.container()
            assert dl.shim("ADD", ctr)[0] == 0
            assert dl.shim("DEL", ctr)[0] == 0
            assert threading.active_count() - threads < 8
            answers = [_read_all(s) for s in conns]
            refused = [a for a in answers if a.startswith(b"HTTP/1.1 503")]
            timed_out = [a for a in answers if a.startswith(b"HTTP/1.1 408")]
            assert len(refused) == 1000 - 64 and len(timed_out) == 64, {a[:12] for a in answers}
            assert b'"code": 11' in refused[0] and b"too many connections" in refused[0]
            assert b"not complete within 3s" in timed_out[0]
    finally:
        for s in conns:
            s.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _read_all(s: socket.socket) -> bytes:
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    return data


@pytest.mark.parametrize(
    ("request_bytes", "status", "code", "words"),
    [
        (b"SSH-2.0-OpenSSH_9.2\r\n\r\n", 400, 6, "not an HTTP/1.1 request"),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400, 6, "not an HTTP/1.1 request"),
        (b"BREW /cni HTTP/1.1\r\nHost: x\r\n\r\n", 405, 7, "not allowed"),
        (b"DELETE /status HTTP/1.1\r\nHost: x\r\n\r\n", 405, 7, "not allowed"),
        (b"GET /cni HTTP/1.1\r\nHost: x\r\n\r\n", 405, 7, "not allowed"),
        (b"POST /cni HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 411, 6, "not chunked"),
        (b"GET / HTTP/1.1\r\nBroken header\r\n\r\n", 400, 6, "malformed header"),
        (b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n", 431, 6, "over 64 KiB"),
    ],
)
def test_anything_gets_a_cni_json_answer(
    dl: DaemonLab, request_bytes: bytes, status: int, code: int, words: str
) -> None:
    got, err = raw(dl.sock, request_bytes)
    assert got == status and err["code"] == code and words in err["msg"], err
    assert raw(dl.sock, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")[0] == 200


@pytest.mark.parametrize(
    ("body", "code", "words"),
    [
        (b"[" * 100_000 + b"]" * 100_000, 6, "not JSON"),
        (cni(env(), b'{"cniVersion": "1.0.0", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"), 6, "not JSON"),
        (cni(env(CNI_CONTAINERID="abc\n"), CONF), 4, "invalid CNI_CONTAINERID"),
        (cni(env(CNI_IFNAME="e\x01th"), CONF), 4, "invalid interface name"),
        (cni(env(CNI_IFNAME="eth 0"), CONF), 4, "invalid interface name"),
        (cni(env(CNI_IFNAME="\u00e9th0"), CONF), 4, "invalid interface name"),
        # PID 1's: refused as the host's, or (in a sandbox whose PID 1 root may not open) as unreadable.
        (cni(env(CNI_NETNS="/proc/1/ns/net"), CONF), 4, ""),
        (cni(env(CNI_NETNS="/proc/self/ns/net"), CONF), 4, "the host's network namespace"),
    ],
)
def test_hostile_requests_get_cni_errors_and_no_traceback(
    dl: DaemonLab, body: bytes, code: int, words: str, caplog: pytest.LogCaptureFixture
) -> None:
    status, err = post(dl.sock, body)
    assert status == 400 and err["code"] == code and words in err["msg"], err
    dl.settled()  # the request's log line: written once its answer is out
    assert not [r for r in caplog.records if r.exc_info or r.levelname == "ERROR"]
    assert dl.cache_files() == []


def test_the_labs_host_namespace_is_refused_too(dl: DaemonLab) -> None:
    """The namespace the delegates run in (here the lab's "host") is the host for them: never a container's."""
    status, err = post(dl.sock, cni(env(CNI_NETNS=f"/var/run/netns/{dl.lab.host}"), CONF))
    assert status == 400 and err["code"] == 4 and "the host's network namespace" in err["msg"]
    assert sorted(dl.lab.links(dl.lab.host)) == ["lo", "ncm0", "ncm0p"]


@pytest.mark.parametrize(
    ("doc", "code", "words"),
    [
        ({"command": "ADD", "containerID": "c", "network": "storage", "netns": ["/x"]}, 7, "netns must be a string"),
        ({"command": "ADD", "containerID": 5, "network": "storage", "netns": "/x"}, 7, "containerID must be a string"),
        ({"command": ["ADD"], "containerID": "c", "network": "storage"}, 4, "command must be ADD or DEL"),
        ({"command": "ADD", "containerID": "c", "network": "storage", "runtimeIfname": 1}, 7, "runtimeIfname"),
        ({"command": "ADD", "containerID": "c\n", "network": "storage", "netns": "/x"}, 4, "invalid container id"),
        ([1, 2], 6, "JSON object"),
    ],
)
def test_hotplug_requests_of_the_wrong_shape(dl: DaemonLab, doc: Any, code: int, words: str) -> None:
    status, err = post(dl.sock, json.dumps(doc).encode(), path="/delegate")
    assert status == 400 and err["code"] == code and words in err["msg"], err


def test_a_client_that_hangs_up_leaves_no_traceback(dl: DaemonLab, caplog: pytest.LogCaptureFixture) -> None:
    for request_bytes in (
        b"GET /status HTTP/1.1\r\nHost: x\r\n\r\n",
        b"POST /cni HTTP/1.1\r\nContent-Length: 100\r\n\r\n{",
        b"GET /attachments HTTP/1.1\r\nHost: x\r\n\r\n",
    ):
        for _ in range(20):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(dl.sock)
            s.sendall(request_bytes)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
    assert raw(dl.sock, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")[0] == 200
    dl.settled()
    assert not [r for r in caplog.records if r.exc_info or r.levelname in ("ERROR", "WARNING")]


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

    from netcomp.cli.main import main

    with daemon_lab(tmp_path, extra={"allowedUids": [4242]}) as dl:
        cfg = tmp_path / "cli.yaml"
        cfg.write_text(f"socket: {dl.sock}\n")
        for command in ("status", "attachments"):
            out, err = io.StringIO(), io.StringIO()
            assert main([command, "--config", str(cfg)], out, err) == 1
            assert err.getvalue() == "netcomp: the daemon refused: peer uid 0 may not use the netcomp socket\n"
            assert out.getvalue() == ""
