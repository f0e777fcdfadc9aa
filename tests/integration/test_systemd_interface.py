"""The daemon as systemd sees it, observed from outside the process: the notify messages (READY, STATUS,
WATCHDOG, RELOADING, STOPPING) on a real NOTIFY_SOCKET, watching and degraded/recovered states, socket
activation through systemd-socket-activate."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.lab.checkout import NETCOMP
from tests.lab.netlab import PLUGIN_DIR
from tests.lab.sdnotify import Notify, answer, connect, notify_sequence, socket_activate, start, stop

pytestmark = pytest.mark.root


def test_notify_sequence_watching_degraded_and_recovery(daemon_root: dict[str, Path]) -> None:
    notify_sequence(daemon_root)


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


def test_socket_activation_early_client_waits_in_the_backlog(daemon_root: dict[str, Path]) -> None:
    """The early client is answered once the daemon is ready, never refused."""
    notify = Notify(daemon_root["tmp"] / "notify.sock")
    path = daemon_root["tmp"] / "activated.sock"
    early, p = activated(daemon_root, notify, path)
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


def test_plugins_get_no_fd_of_the_daemon_under_socket_activation(daemon_root: dict[str, Path]) -> None:
    """The listening socket systemd passes (fd 3) must not reach a delegate: plugins are spawned without closing
    fds (netcomp/cni/invoke.py), so the daemon makes it close-on-exec. A plugin of ours lists its own fds for an
    ADD and a DEL served by the activated daemon."""
    from netcomp.daemon.server import protocol

    plugins, static = daemon_root["tmp"] / "plugins", daemon_root["root"] / "etc/netcomp/static.d"
    plugins.mkdir()
    static.mkdir(parents=True)
    seen = daemon_root["tmp"] / "fds"
    spy = plugins / "fdspy"
    spy.write_text(FD_SPY.format(out=str(seen)))
    spy.chmod(0o755)
    conflist = '{"cniVersion": "1.0.0", "name": "spy", "plugins": [{"type": "fdspy"}]}'
    (static / "spy.conflist").write_text(conflist)
    (daemon_root["nets"] / "spy.yaml").write_text(
        "apiVersion: netcomp.io/v1\nkind: Network\nmetadata: {name: spy}\nspec: {type: static, networkID: spy}\n"
    )
    (daemon_root["root"] / "etc/netcomp/netcomp.yaml").write_text(
        f"defaultNetwork: spy\npluginDirs: [{plugins}, {PLUGIN_DIR}]\n"
    )
    ns = f"nc-fd-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True, timeout=30)
    try:
        notify = Notify(daemon_root["tmp"] / "notify.sock")
        path = daemon_root["tmp"] / "activated.sock"
        early, p = activated(daemon_root, notify, path)
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


def test_under_systemd_socket_activate(daemon_root: dict[str, Path]) -> None:
    socket_activate(daemon_root)


def test_a_hung_daemon_killed_by_the_watchdog_says_where_it_was(daemon_root: dict[str, Path]) -> None:
    """systemd's watchdog kills a daemon that stopped answering with SIGABRT: the journal then holds every
    thread's traceback (faulthandler), the one thing an operator needs to report the hang."""
    notify = Notify(daemon_root["tmp"] / "notify.sock")
    p = start(daemon_root, notify)
    try:
        notify.wait_for("READY", "1")
        p.send_signal(signal.SIGABRT)
        assert p.wait(timeout=20) == -signal.SIGABRT
    finally:
        stop(p)
    err = p.stderr.read().decode(errors="replace") if p.stderr else ""
    assert "Fatal Python error: Aborted" in err
    assert "Thread 0x" in err and "netcomp/daemon/run.py" in err  # the main thread, waiting in its loop


def test_sighup_rereads_netcomp_yaml(daemon_root: dict[str, Path]) -> None:
    notify = Notify(daemon_root["tmp"] / "notify.sock")
    cfg = daemon_root["root"] / "etc/netcomp/netcomp.yaml"
    cfg.write_text("cniVersion: 1.0.0\n")
    p = start(daemon_root, notify)
    try:
        notify.wait_for("READY", "1")
        assert b'"cniVersion": "1.0.0"' in (daemon_root["out"] / "alpha.conflist").read_bytes()
        cfg.write_text("cniVersion: 0.4.0\n")
        p.send_signal(signal.SIGHUP)
        notify.wait_for("RELOADING", "1")
        notify.wait_for("READY", "1")
        assert b'"cniVersion": "0.4.0"' in (daemon_root["out"] / "alpha.conflist").read_bytes()
        cfg.write_text("cniVersion: 0.4.0\nbogus: 1\n")  # a broken netcomp.yaml keeps the running settings
        p.send_signal(signal.SIGHUP)
        notify.wait_for("RELOADING", "1")
        notify.wait_for("READY", "1")
        assert b'"cniVersion": "0.4.0"' in (daemon_root["out"] / "alpha.conflist").read_bytes()
    finally:
        assert stop(p) == 0
    assert "netcomp.yaml is broken; keeping the running settings" in (p.stderr.read().decode() if p.stderr else "")


# What an idle daemon must not carry: each costs megabytes of resident memory it would never use.
NOT_IN_A_DAEMON = ("netcomp.intent.model", "netcomp.compiler.compiler", "jinja2", "pyroute2", "kubernetes")


def test_a_start_from_the_plan_cache_imports_no_compiler(daemon_root: dict[str, Path]) -> None:
    """Started again with its inputs as they were, the daemon reads its plan back and serves without the intent
    models, the compiler, jinja2, pyroute2 or the kubernetes client (observed with -X importtime in the real
    process: the CLI's parser must not pull them in either)."""
    notify = Notify(daemon_root["tmp"] / "notify.sock")
    p = start(daemon_root, notify)
    try:
        notify.wait_for("READY", "1")
    finally:
        assert stop(p) == 0
    log = daemon_root["tmp"] / "imports.log"
    with log.open("wb") as err:
        e = {**os.environ, "NOTIFY_SOCKET": str(notify.path), "PYTHONPROFILEIMPORTTIME": "1"}
        again = subprocess.Popen([NETCOMP, "daemon", "--root", str(daemon_root["root"])], env=e, stderr=err)
        try:
            notify.wait_for("READY", "1")
        finally:
            assert stop(again) == 0
    imported = {line.rsplit("|", 1)[1].strip() for line in log.read_text().splitlines() if "import time:" in line}
    assert "netcomp.daemon.daemon" in imported  # the log is the daemon's
    assert "netcomp.compiler.plancache" in imported
    assert sorted(m for m in imported if m.startswith(NOT_IN_A_DAEMON)) == []
