"""The daemon's socket as its clients meet it: root only, the peer's uid checked; requests over maxInFlight wait
their turn, one whose client left the queue is not started, idle connections cost no thread and do not starve
the runtime; /metrics and /status answer."""

from __future__ import annotations

import concurrent.futures
import json
import os
import resource
import shutil
import socket
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.lab.daemonlab import DaemonLab, daemon_lab
from tests.lab.netlab import PLUGIN_DIR
from tests.lab.wire import CONF, cni, env, post, raw, read_all

pytestmark = pytest.mark.root


@pytest.fixture
def open_dl(tmp_path: Path) -> DaemonLab:  # type: ignore[misc]
    """A daemon whose socket dir sits directly in /tmp (pytest's temp dirs are 0700 to everyone but root)."""
    sockdir = Path(tempfile.mkdtemp(prefix="nc-sock-", dir="/tmp"))
    try:
        with daemon_lab(tmp_path, socket_path=str(sockdir / "run" / "netcomp.sock")) as d:
            yield d
    finally:
        shutil.rmtree(sockdir, ignore_errors=True)


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
        assert dl.daemon.records.load("gone", "eth0") is None
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
            answers = [read_all(s) for s in conns]
            refused = [a for a in answers if a.startswith(b"HTTP/1.1 503")]
            timed_out = [a for a in answers if a.startswith(b"HTTP/1.1 408")]
            assert len(refused) == 1000 - 64 and len(timed_out) == 64, {a[:12] for a in answers}
            assert b'"code": 11' in refused[0] and b"too many connections" in refused[0]
            assert b"not complete within 3s" in timed_out[0]
    finally:
        for s in conns:
            s.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_metrics_and_status_endpoints(dl: DaemonLab) -> None:
    post(dl.sock, b"{not json")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(dl.sock)
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    data = read_all(s)
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
