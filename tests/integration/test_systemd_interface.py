"""The daemon as systemd sees it, observed from outside the process: the notify messages (READY, STATUS,
WATCHDOG, RELOADING, STOPPING) on a real NOTIFY_SOCKET, watching and degraded/recovered states, socket
activation through systemd-socket-activate."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

NETCOMP = str(Path(sys.executable).parent / "netcomp")
PLUGIN_DIR = "/usr/lib/cni"
pytestmark = pytest.mark.root

GOOD = """apiVersion: netcomp.io/v1
kind: Network
metadata: {{name: {name}}}
spec: {{type: macvlan, hostDevice: eth9, ipam: {{type: host-local, subnet: {subnet}}}}}
"""


class Notify:
    """A datagram socket standing where systemd's would be."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.path = path
        self.seen: list[dict[str, str]] = []

    def wait_for(self, key: str, value: str | None = None, timeout: float = 20.0) -> dict[str, str]:
        """The next message carrying key (=value); every message on the way is kept in `seen`."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {key}={value or '*'} within {timeout}s; saw {self.seen}")
            self.sock.settimeout(left)
            try:
                raw = self.sock.recv(65536).decode()
            except TimeoutError:
                raise AssertionError(f"no {key}={value or '*'} within {timeout}s; saw {self.seen}") from None
            msg = dict(line.split("=", 1) for line in raw.splitlines() if "=" in line)
            self.seen.append(msg)
            if key in msg and (value is None or value in msg[key]):
                return msg


@pytest.fixture
def node(tmp_path: Path) -> Iterator[dict[str, Path]]:
    if os.geteuid() != 0 or not os.access(f"{PLUGIN_DIR}/macvlan", os.X_OK):
        pytest.skip("needs root and the Debian CNI plugins")
    root = tmp_path / "root"
    nets = root / "etc/netcomp/networks.d"
    nets.mkdir(parents=True)
    (nets / "a.yaml").write_text(GOOD.format(name="alpha", subnet="10.61.0.0/24"))
    (nets / "b.yaml").write_text(GOOD.format(name="beta", subnet="10.62.0.0/24"))
    yield {"root": root, "nets": nets, "out": root / "run/netcomp/networks", "tmp": tmp_path}


def start(
    node: dict[str, Path],
    notify: Notify,
    *extra: str,
    env: dict[str, str] | None = None,
    argv: list[str] | None = None,
    pass_fds: tuple[int, ...] = (),
) -> subprocess.Popen[bytes]:
    e = {**os.environ, "NOTIFY_SOCKET": str(notify.path), "WATCHDOG_USEC": "400000", **(env or {})}
    e.pop("WATCHDOG_PID", None)
    cmd = argv or [NETCOMP, "daemon", "--root", str(node["root"]), *extra]
    return subprocess.Popen(cmd, env=e, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, pass_fds=pass_fds)


def stop(p: subprocess.Popen[bytes]) -> int:
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
    try:
        return p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGABRT)  # the daemon's faulthandler prints where every thread is
        p.wait(timeout=10)
        dump = p.stderr.read().decode(errors="replace") if p.stderr else ""
        raise AssertionError(f"the daemon did not stop within 30 s of SIGTERM; its stderr:\n{dump}") from None
    finally:
        if p.poll() is None:
            p.kill()


def test_notify_sequence_watching_degraded_and_recovery(node: dict[str, Path]) -> None:
    notify = Notify(node["tmp"] / "notify.sock")
    p = start(node, notify)
    try:
        ready = notify.wait_for("READY", "1")
        assert ready["STATUS"].startswith("2 networks")
        assert (node["root"] / "run/netcomp/netcomp.sock").exists()  # READY only once the socket is served
        notify.wait_for("WATCHDOG", "1")
        good = (node["out"] / "alpha.conflist").read_bytes()

        # A broken edit: degraded, with the position, and the old output kept byte for byte.
        (node["nets"] / "a.yaml").write_text(GOOD.format(name="alpha", subnet="10.61.0.0/33"))
        msg = notify.wait_for("STATUS", "DEGRADED")
        assert f"{node['nets'] / 'a.yaml'}:4:" in msg["STATUS"]
        assert (node["out"] / "alpha.conflist").read_bytes() == good

        # Fixed by replacing the file through a rename, as editors and config management do.
        tmp = node["nets"] / ".a.yaml.swp"
        tmp.write_text(GOOD.format(name="alpha", subnet="10.63.0.0/24"))
        os.replace(tmp, node["nets"] / "a.yaml")
        msg = notify.wait_for("STATUS", "2 networks, 0 containers")
        assert "DEGRADED" not in msg["STATUS"]
        assert b"10.63.0.0/24" in (node["out"] / "alpha.conflist").read_bytes()

        # A layer that did not exist at start (/run/netcomp/networks.d) is seen when it appears.
        run_layer = node["root"] / "run/netcomp/networks.d"
        run_layer.mkdir(parents=True)
        (run_layer / "c.yaml").write_text(GOOD.format(name="gamma", subnet="10.64.0.0/24"))
        notify.wait_for("STATUS", "3 networks")
        assert (node["out"] / "gamma.conflist").exists()
        shutil.rmtree(run_layer)  # and a whole dir removed
        notify.wait_for("STATUS", "2 networks")
        assert not (node["out"] / "gamma.conflist").exists()

        p.send_signal(signal.SIGHUP)
        reloading = notify.wait_for("RELOADING", "1")
        assert int(reloading["MONOTONIC_USEC"]) > 0
        notify.wait_for("READY", "1")
    finally:
        code = stop(p)
    assert code == 0, p.stderr.read().decode() if p.stderr else ""
    assert notify.wait_for("STOPPING", "1")
    kinds = [k for m in notify.seen for k in ("READY", "WATCHDOG", "RELOADING", "STOPPING") if k in m]
    first = {k: kinds.index(k) for k in ("READY", "WATCHDOG", "RELOADING", "STOPPING")}
    assert first["READY"] < first["WATCHDOG"] < first["RELOADING"] < first["STOPPING"]
    assert kinds[first["RELOADING"] + 1 :].index("READY") < kinds[first["RELOADING"] + 1 :].index("STOPPING")


def activated(node: dict[str, Path], notify: Notify, path: Path) -> tuple[socket.socket, subprocess.Popen[bytes]]:
    """We play systemd: bind and listen at path, connect a client at once (the returned socket), then start the
    daemon with the listening socket as fd 3 (LISTEN_FDS/LISTEN_PID)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(16)
    early = connect(path)  # before any daemon exists
    fd = listener.fileno()
    # What systemd does for a socket unit: the socket as fd 3, LISTEN_PID the pid that execs the daemon.
    systemd = (
        "import os, sys; os.dup2(int(sys.argv[1]), 3); os.environ['LISTEN_PID'] = str(os.getpid()); "
        "os.environ['LISTEN_FDS'] = '1'; os.execv(sys.argv[2], sys.argv[2:])"
    )
    argv = [sys.executable, "-c", systemd, str(fd), NETCOMP, "daemon", "--root", str(node["root"])]
    p = start(node, notify, argv=argv, pass_fds=(fd,))
    listener.close()  # the daemon has its own copy
    return early, p


def connect(path: Path) -> socket.socket:
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.settimeout(30)
    c.connect(str(path))
    return c


def answer(c: socket.socket) -> bytes:
    data = b""
    while chunk := c.recv(65536):
        data += chunk
    c.close()
    return data


def test_socket_activation_early_client_waits_in_the_backlog(node: dict[str, Path]) -> None:
    """The early client is answered once the daemon is ready, never refused."""
    notify = Notify(node["tmp"] / "notify.sock")
    path = node["tmp"] / "activated.sock"
    early, p = activated(node, notify, path)
    try:
        early.sendall(b"POST /cni HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
        data = answer(early)
        # Answered by a ready daemon: the request's own error (6: no env/config), not 503/11 "starting".
        assert data.startswith(b"HTTP/1.1 400") and b'"code": 6' in data, data
        notify.wait_for("READY", "1")
    finally:
        early.close()
        assert stop(p) == 0, p.stderr.read().decode() if p.stderr else ""
    assert path.exists()  # the socket's file belongs to whoever passed it; the daemon leaves it


FD_SPY = """#!/usr/bin/python3 -IS
import os, sys
with open({out!r}, "a") as f:  # fd 3 when nothing was inherited, and the listing's own fd 4
    f.write(os.environ["CNI_COMMAND"] + " " + " ".join(sorted(os.listdir("/proc/self/fd"), key=int)) + "\\n")
if os.environ["CNI_COMMAND"] == "ADD":
    sys.stdout.write('{{"cniVersion": "1.0.0", "interfaces": [], "ips": []}}')
"""


def test_plugins_get_no_fd_of_the_daemon_under_socket_activation(node: dict[str, Path]) -> None:
    """The listening socket systemd passes (fd 3) must not reach a delegate: plugins are spawned without closing
    fds (netcomp/cni/invoke.py), so the daemon makes it close-on-exec. A plugin of ours lists its own fds for an
    ADD and a DEL served by the activated daemon."""
    from netcomp.daemon.server import protocol

    plugins, static = node["tmp"] / "plugins", node["root"] / "etc/netcomp/static.d"
    plugins.mkdir()
    static.mkdir(parents=True)
    seen = node["tmp"] / "fds"
    spy = plugins / "fdspy"
    spy.write_text(FD_SPY.format(out=str(seen)))
    spy.chmod(0o755)
    conflist = '{"cniVersion": "1.0.0", "name": "spy", "plugins": [{"type": "fdspy"}]}'
    (static / "spy.conflist").write_text(conflist)
    (node["nets"] / "spy.yaml").write_text(
        "apiVersion: netcomp.io/v1\nkind: Network\nmetadata: {name: spy}\nspec: {type: static, networkID: spy}\n"
    )
    (node["root"] / "etc/netcomp/netcomp.yaml").write_text(
        f"defaultNetwork: spy\npluginDirs: [{plugins}, {PLUGIN_DIR}]\n"
    )
    ns = f"nc-fd-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True, timeout=30)
    try:
        notify = Notify(node["tmp"] / "notify.sock")
        path = node["tmp"] / "activated.sock"
        early, p = activated(node, notify, path)
        try:
            for verb in ("ADD", "DEL"):
                env = {
                    "CNI_COMMAND": verb,
                    "CNI_CONTAINERID": "fd-test",
                    "CNI_NETNS": f"/var/run/netns/{ns}",
                    "CNI_IFNAME": "eth0",
                    "CNI_PATH": str(plugins),
                }
                body = protocol.encode_request(env, b'{"cniVersion": "1.0.0", "name": "netcomp", "type": "netcomp"}')
                c = early if verb == "ADD" else connect(path)
                c.sendall(b"POST /cni HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
                data = answer(c)
                assert data.startswith(b"HTTP/1.1 200"), data
        finally:
            early.close()
            code = stop(p)
        assert code == 0, p.stderr.read().decode() if p.stderr else ""
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
    # VERSION: what the plugin speaks, asked at compile time (a static file) and before the first ADD.
    said = seen.read_text().splitlines()
    assert [s for s in said if not s.startswith("VERSION")] == ["ADD 0 1 2 3 4", "DEL 0 1 2 3 4"]
    assert {s for s in said if s.startswith("VERSION")} == {"VERSION 0 1 2 3 4"}


def test_under_systemd_socket_activate(node: dict[str, Path]) -> None:
    if shutil.which("systemd-socket-activate") is None:
        pytest.skip("systemd-socket-activate is not installed")
    notify = Notify(node["tmp"] / "notify.sock")
    path = node["tmp"] / "act.sock"
    # It passes the child no environment but LISTEN_* and what -E names: NOTIFY_SOCKET must be named.
    argv = ["systemd-socket-activate", "-l", str(path), "-E", "NOTIFY_SOCKET", NETCOMP, "daemon", "--root"]
    p = start(node, notify, argv=[*argv, str(node["root"])])
    try:
        # systemd-socket-activate listens first and starts the daemon on the first connection; it says
        # "Listening on PATH" once it listens, so read up to that line (no sleep, no polling).
        assert p.stderr is not None
        line = p.stderr.readline().decode()
        assert line.startswith("Listening on"), line
        c = connect(path)
        c.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
        data = answer(c)
        assert data.startswith(b"HTTP/1.1 200") and b'"ready": true' in data, data
        notify.wait_for("READY", "1")
    finally:
        code = stop(p)
        assert code == 0, p.stderr.read().decode() if p.stderr else ""


def test_a_hung_daemon_killed_by_the_watchdog_says_where_it_was(node: dict[str, Path]) -> None:
    """systemd's watchdog kills a daemon that stopped answering with SIGABRT: the journal then holds every
    thread's traceback (faulthandler), the one thing an operator needs to report the hang."""
    notify = Notify(node["tmp"] / "notify.sock")
    p = start(node, notify)
    try:
        notify.wait_for("READY", "1")
        p.send_signal(signal.SIGABRT)
        assert p.wait(timeout=20) == -signal.SIGABRT
    finally:
        stop(p)
    err = p.stderr.read().decode(errors="replace") if p.stderr else ""
    assert "Fatal Python error: Aborted" in err
    assert "Thread 0x" in err and "netcomp/daemon/run.py" in err  # the main thread, waiting in its loop


def test_sighup_rereads_netcomp_yaml(node: dict[str, Path]) -> None:
    notify = Notify(node["tmp"] / "notify.sock")
    cfg = node["root"] / "etc/netcomp/netcomp.yaml"
    cfg.write_text("cniVersion: 1.0.0\n")
    p = start(node, notify)
    try:
        notify.wait_for("READY", "1")
        assert b'"cniVersion": "1.0.0"' in (node["out"] / "alpha.conflist").read_bytes()
        cfg.write_text("cniVersion: 0.4.0\n")
        p.send_signal(signal.SIGHUP)
        notify.wait_for("RELOADING", "1")
        notify.wait_for("READY", "1")
        assert b'"cniVersion": "0.4.0"' in (node["out"] / "alpha.conflist").read_bytes()
        cfg.write_text("cniVersion: 0.4.0\nbogus: 1\n")  # a broken netcomp.yaml keeps the running settings
        p.send_signal(signal.SIGHUP)
        notify.wait_for("RELOADING", "1")
        notify.wait_for("READY", "1")
        assert b'"cniVersion": "0.4.0"' in (node["out"] / "alpha.conflist").read_bytes()
    finally:
        assert stop(p) == 0
    assert "netcomp.yaml is broken; keeping the running settings" in (p.stderr.read().decode() if p.stderr else "")


# What an idle daemon must not carry: each costs megabytes of resident memory it would never use.
NOT_IN_A_DAEMON = ("netcomp.intent.model", "netcomp.compiler.compiler", "jinja2", "pyroute2", "kubernetes")


def test_a_start_from_the_plan_cache_imports_no_compiler(node: dict[str, Path]) -> None:
    """Started again with its inputs as they were, the daemon reads its plan back and serves without the intent
    models, the compiler, jinja2, pyroute2 or the kubernetes client (observed with -X importtime in the real
    process: the CLI's parser must not pull them in either)."""
    notify = Notify(node["tmp"] / "notify.sock")
    p = start(node, notify)
    try:
        notify.wait_for("READY", "1")
    finally:
        assert stop(p) == 0
    log = node["tmp"] / "imports.log"
    with log.open("wb") as err:
        e = {**os.environ, "NOTIFY_SOCKET": str(notify.path), "PYTHONPROFILEIMPORTTIME": "1"}
        again = subprocess.Popen([NETCOMP, "daemon", "--root", str(node["root"])], env=e, stderr=err)
        try:
            notify.wait_for("READY", "1")
        finally:
            assert stop(again) == 0
    imported = {line.rsplit("|", 1)[1].strip() for line in log.read_text().splitlines() if "import time:" in line}
    assert "netcomp.daemon.daemon" in imported  # the log is the daemon's
    assert "netcomp.compiler.plancache" in imported
    assert sorted(m for m in imported if m.startswith(NOT_IN_A_DAEMON)) == []
