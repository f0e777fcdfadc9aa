"""systemd's side of the daemon, as the tests play it: a NOTIFY_SOCKET standing where systemd's would be
(Notify), a root for `netcomp daemon --root` with two macvlan networks, the daemon started and stopped as systemd
starts and stops it, and the scenarios run against both the checkout's daemon (tests/integration/
test_systemd_interface.py) and the installed package's (tests/system/test_installed_systemd_interface.py): the
notify sequence across a broken edit, a fix, a reload and a stop, and socket activation through
systemd-socket-activate."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.lab.checkout import NETCOMP
from tests.lab.intents import intent
from tests.lab.netlab import PLUGIN_DIR


def macvlan(name: str, subnet: str) -> str:
    """A good intent: a macvlan network on host-local over eth9 (a device the compiler does not look for)."""
    return intent(name, f"{{type: macvlan, hostDevice: eth9, ipam: {{type: host-local, subnet: {subnet}}}}}")


def make_root(tmp_path: Path) -> dict[str, Path]:
    """`root` with alpha and beta in its etc/netcomp/networks.d (`nets`), their conflists to be in `out`; `tmp`
    for what the test makes besides."""
    if os.geteuid() != 0 or not os.access(f"{PLUGIN_DIR}/macvlan", os.X_OK):
        pytest.skip("needs root and the Debian CNI plugins")
    root = tmp_path / "root"
    nets = root / "etc/netcomp/networks.d"
    nets.mkdir(parents=True)
    (nets / "a.yaml").write_text(macvlan("alpha", "10.61.0.0/24"))
    (nets / "b.yaml").write_text(macvlan("beta", "10.62.0.0/24"))
    return {"root": root, "nets": nets, "out": root / "run/netcomp/networks", "tmp": tmp_path}


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


def wait_ready(notify: socket.socket, proc: subprocess.Popen[bytes], timeout: float, logs: Callable[[], str]) -> None:
    """Until the daemon says READY=1 on `notify` (the datagram socket its NOTIFY_SOCKET names), looking at the
    process again each second; AssertionError with its `logs` when it exits first or `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"the daemon exited ({proc.returncode}) before READY=1:\n{logs()}")
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no READY=1 within {timeout}s:\n{logs()}")
        notify.settimeout(min(left, 1.0))
        try:
            if b"READY=1" in notify.recv(65536).split(b"\n"):
                return
        except TimeoutError:
            continue


def start(
    tree: dict[str, Path],
    notify: Notify,
    *extra: str,
    env: dict[str, str] | None = None,
    argv: list[str] | None = None,
    pass_fds: tuple[int, ...] = (),
    netcomp: str = NETCOMP,
) -> subprocess.Popen[bytes]:
    """`netcomp daemon --root` (or `argv`) as systemd starts it: NOTIFY_SOCKET and a watchdog of 400 ms."""
    e = {**os.environ, "NOTIFY_SOCKET": str(notify.path), "WATCHDOG_USEC": "400000", **(env or {})}
    e.pop("WATCHDOG_PID", None)
    cmd = argv or [netcomp, "daemon", "--root", str(tree["root"]), *extra]
    return subprocess.Popen(cmd, env=e, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, pass_fds=pass_fds)


def stop(p: subprocess.Popen[bytes]) -> int:
    """SIGTERM, as systemd stops it; its exit status (SIGABRT and its stderr when it does not stop in time)."""
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


def connect(path: Path) -> socket.socket:
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.settimeout(30)
    c.connect(str(path))
    return c


def answer(c: socket.socket) -> bytes:
    """Everything the daemon sends on `c` until it closes it."""
    data = b""
    while chunk := c.recv(65536):
        data += chunk
    c.close()
    return data


def notify_sequence(tree: dict[str, Path], netcomp: str = NETCOMP) -> None:
    """READY once the socket is served, WATCHDOG; a broken edit DEGRADED (its position said, the output kept), fixed
    through a rename; a layer dir made and removed; SIGHUP's RELOADING and READY; SIGTERM's STOPPING, in order."""
    notify = Notify(tree["tmp"] / "notify.sock")
    p = start(tree, notify, netcomp=netcomp)
    try:
        ready = notify.wait_for("READY", "1")
        assert ready["STATUS"].startswith("2 networks")
        assert (tree["root"] / "run/netcomp/netcomp.sock").exists()  # READY only once the socket is served
        notify.wait_for("WATCHDOG", "1")
        good = (tree["out"] / "alpha.conflist").read_bytes()

        # A broken edit: degraded, with the position, and the old output kept byte for byte.
        (tree["nets"] / "a.yaml").write_text(macvlan("alpha", "10.61.0.0/33"))
        msg = notify.wait_for("STATUS", "DEGRADED")
        assert f"{tree['nets'] / 'a.yaml'}:4:" in msg["STATUS"]
        assert (tree["out"] / "alpha.conflist").read_bytes() == good

        # Fixed by replacing the file through a rename, as editors and config management do.
        tmp = tree["nets"] / ".a.yaml.swp"
        tmp.write_text(macvlan("alpha", "10.63.0.0/24"))
        os.replace(tmp, tree["nets"] / "a.yaml")
        msg = notify.wait_for("STATUS", "2 networks, 0 containers")
        assert "DEGRADED" not in msg["STATUS"]
        assert b"10.63.0.0/24" in (tree["out"] / "alpha.conflist").read_bytes()

        # A layer that did not exist at start (/run/netcomp/networks.d) is seen when it appears.
        run_layer = tree["root"] / "run/netcomp/networks.d"
        run_layer.mkdir(parents=True)
        (run_layer / "c.yaml").write_text(macvlan("gamma", "10.64.0.0/24"))
        notify.wait_for("STATUS", "3 networks")
        assert (tree["out"] / "gamma.conflist").exists()
        shutil.rmtree(run_layer)  # and a whole dir removed
        notify.wait_for("STATUS", "2 networks")
        assert not (tree["out"] / "gamma.conflist").exists()

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


def socket_activate(tree: dict[str, Path], netcomp: str = NETCOMP) -> None:
    """Started by systemd-socket-activate on the first connection, which it answers ready."""
    if shutil.which("systemd-socket-activate") is None:
        pytest.skip("systemd-socket-activate is not installed")
    notify = Notify(tree["tmp"] / "notify.sock")
    path = tree["tmp"] / "act.sock"
    # It passes the child no environment but LISTEN_* and what -E names: NOTIFY_SOCKET must be named.
    argv = ["systemd-socket-activate", "-l", str(path), "-E", "NOTIFY_SOCKET", netcomp, "daemon", "--root"]
    p = start(tree, notify, argv=[*argv, str(tree["root"])])
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
