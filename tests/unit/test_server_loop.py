"""The serving loop (daemon/server/loop.py, server.py) and its workers (workers.py), with real unix sockets and
threads: what the hostile tests cannot reach from outside (a failing accept(2), a bug in routing, a burst on a cold
pool). No CNI request is served here: /healthz and /readyz need no delegator."""

from __future__ import annotations

import errno
import json
import logging
import select
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from netcomp.daemon.server import http1
from netcomp.daemon.server.connections import Limits
from netcomp.daemon.server.loop import Loop
from netcomp.daemon.server.server import Server, listen
from netcomp.daemon.server.workers import Workers
from netcomp.metrics import Metrics
from tests.lab.poll import until


def ask(path: str, request: bytes = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", timeout: float = 30) -> bytes:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(path)
        s.sendall(request)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
        return data
    finally:
        s.close()


def serve(sock: socket.socket) -> Server:
    server = Server(sock, None, Metrics(), limits=Limits(allowed_uids={0}), views={})  # type: ignore[arg-type]
    server.ready.set()
    server.start()
    return server


@pytest.fixture
def sock_path(tmp_path: Path) -> Iterator[str]:
    yield str(tmp_path / "run" / "netcomp.sock")


class _FailingAccept(socket.socket):
    """A listening socket whose accept(2) fails with EMFILE (out of fds), as a daemon at its limit sees it, for
    half a second from its first try; counts every try."""

    tries = 0
    first = 0.0

    def accept(self) -> tuple[socket.socket, object]:
        cls = type(self)
        cls.tries += 1
        cls.first = cls.first or time.monotonic()
        if time.monotonic() - cls.first < 0.5:
            raise OSError(errno.EMFILE, "Too many open files")
        return super().accept()


def test_a_failing_accept_pauses_instead_of_spinning(sock_path: str, caplog: pytest.LogCaptureFixture) -> None:
    """The connection that could not be accepted waits in the backlog and is served once accepting resumes. The
    loop tried three times: once failing, once after the pause (1 s, past the half second of failures), once
    finding the backlog empty; a loop that tried again at once would have tried thousands of times."""
    caplog.set_level(logging.ERROR, "netcomp.server")
    _FailingAccept.tries, _FailingAccept.first = 0, 0.0
    base, _ = listen(sock_path)
    sock = _FailingAccept(fileno=base.detach())
    server = serve(sock)
    try:
        assert ask(sock_path).startswith(b"HTTP/1.1 200")
    finally:
        server.shutdown()
    assert _FailingAccept.tries == 3, _FailingAccept.tries
    assert [r.getMessage() for r in caplog.records if "accept" in r.getMessage()] == [
        "cannot accept a connection: [Errno 24] Too many open files; accepting again in 1 s"
    ]


def test_a_bug_in_routing_answers_500_and_the_loop_serves_on(
    sock_path: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    sock, _ = listen(sock_path)
    server = serve(sock)
    real = Server.route
    calls: list[int] = []

    def route(self: Server, c: object) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a bug")
        real(self, c)  # type: ignore[arg-type]

    monkeypatch.setattr(Server, "route", route)
    try:
        first = ask(sock_path)
        assert first.startswith(b"HTTP/1.1 500") and b'"code": 999' in first
        assert ask(sock_path).startswith(b"HTTP/1.1 200")
        assert ask(sock_path, b"GET /readyz HTTP/1.1\r\n\r\n").endswith(b'{"ready": true}')
    finally:
        server.shutdown()
    assert "bug while serving a connection" in caplog.text


def test_shutdown_closes_the_listening_socket(sock_path: str) -> None:
    """A client connecting after the daemon stopped serving is refused (a shim then tries again until the next
    daemon takes it), never left hanging in a backlog nobody reads."""
    sock, _ = listen(sock_path)
    server = serve(sock)
    assert ask(sock_path).startswith(b"HTTP/1.1 200")
    server.shutdown()
    assert sock.fileno() == -1
    with pytest.raises(ConnectionRefusedError):
        ask(sock_path)


def test_a_request_fed_a_byte_at_a_time() -> None:
    req = b"POST /cni HTTP/1.1\r\nContent-Length: 5\r\nX-Netcomp-Shim: 1\r\n\r\nhello"
    inc = http1.Incoming()
    done = [inc.feed(req[i : i + 1], 100) for i in range(len(req))]
    assert done == [False] * (len(req) - 1) + [True]
    assert inc.head == ("POST", "/cni", {"content-length": "5", "x-netcomp-shim": "1"}) and inc.body == b"hello"


def test_a_burst_on_a_cold_pool_runs_at_once() -> None:
    """Three works submitted before any worker has started all run at the same time (a barrier of three that
    times out otherwise); a fourth, over the limit, runs once one is free."""
    pool = Workers("t", 3)
    barrier = threading.Barrier(3, timeout=30)
    done = threading.Semaphore(0)
    broken: list[BaseException] = []

    def work() -> None:
        try:
            barrier.wait()
        except threading.BrokenBarrierError as e:
            broken.append(e)
        done.release()

    for _ in range(3):
        pool.submit(work)
    pool.submit(done.release)
    for _ in range(4):
        assert done.acquire(timeout=30)
    assert not broken
    pool.shutdown()


def test_a_drain_takes_nothing_in_flight_after_it_began(sock_path: str) -> None:
    """enter() and drain() meet under one lock: once a drain began, no request is taken in flight (a CNI request
    is then told 'try again later'), and the drain's wait for zero in flight is never fooled by one taken late."""
    sock, _ = listen(sock_path)
    server = serve(sock)
    try:
        assert server.enter()
        assert not server.drain(0.0)  # one in flight
        assert server.enter() is False and server.in_flight == 1
        server.leave()
        assert server.drain(0.0) and server.in_flight == 0
    finally:
        server.shutdown()


def test_content_length_is_ascii_digits_and_said_once() -> None:
    """'²' is a digit to str.isdigit() and not to int(): a 400, not a 500 with a traceback. Two Content-Lengths
    that differ leave the body's end in doubt (request smuggling): a 400; the same one twice is accepted."""
    for value in ("²", "¹2", "³"):  # as a client sends them in latin-1, which is how header values are read
        inc = http1.Incoming()
        head = f"POST /cni HTTP/1.1\r\nContent-Length: {value}\r\n\r\n".encode("latin-1")
        with pytest.raises(http1.Refuse) as e:
            inc.feed(head, 100)
        assert e.value.status == 400 and e.value.linger
    with pytest.raises(http1.Refuse) as e:
        http1.Incoming().feed(b"POST /cni HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc", 100)
    assert (e.value.status, e.value.msg) == (400, "conflicting Content-Length headers")
    inc = http1.Incoming()
    assert inc.feed(b"POST /cni HTTP/1.1\r\nContent-Length: 3\r\ncontent-length: 3\r\n\r\nabc", 100)
    assert inc.body == b"abc"


def test_a_head_with_bare_lfs_is_refused_at_its_end() -> None:
    """A head that ends in LF LF is never one that ends in CRLF CRLF: refused at its second LF, not left to wait
    headerTimeout. The blank line of a CRLF head cut between its bytes is still waited for."""
    inc = http1.Incoming()
    assert not inc.feed(b"GET /healthz HTTP/1.1\n", 100)
    with pytest.raises(http1.Refuse) as e:
        inc.feed(b"\n", 100)
    assert (e.value.status, e.value.msg) == (400, "request head lines must end in CRLF")
    inc = http1.Incoming()
    assert [inc.feed(b, 100) for b in (b"GET /healthz HTTP/1.1\r\n\r", b"\n")] == [False, True]


def test_another_methods_body_is_read_before_the_answer(sock_path: str) -> None:
    """A GET with a body is answered once its body is in (and ignored): left unread, closing the connection
    would make the client's send fail before it read its answer. A refused head (400) lingers for the same
    reason: the client sending 900 KB after it reads the 400, not a broken pipe."""
    sock, _ = listen(sock_path)
    server = serve(sock)
    body = b"x" * 900_000
    try:
        got = ask(sock_path, b"GET /healthz HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        assert got.startswith(b"HTTP/1.1 200")
        partial = http1.Incoming()
        assert not partial.feed(b"GET /healthz HTTP/1.1\r\nContent-Length: 5\r\n\r\nab", 100)  # waits for 3 more
        for bad in (b"BAD\r\n\r\n", b"GET /healthz HTTP/1.1\r\n: x\r\n\r\n"):
            got = ask(sock_path, bad + body)
            assert got.startswith(b"HTTP/1.1 400"), got[:80]
    finally:
        server.shutdown()


def test_accepting_takes_a_batch_per_round(sock_path: str) -> None:
    """A backlog that a flood keeps full must not hold the loop in accept(2): its tick feeds systemd's watchdog,
    its timers refuse the slow clients. One round accepts ACCEPT_BATCH at most; the next, the rest."""
    from netcomp.daemon.server import loop

    sock, _ = listen(sock_path)
    limits = Limits(allowed_uids={0}, max_per_peer=1000)  # every client is this process
    server = Server(sock, None, Metrics(), limits=limits, views={})  # type: ignore[arg-type]
    sock.setblocking(False)  # as the loop has it; the rounds are called here, the loop started only to end them
    clients = []
    try:
        for _ in range(loop.ACCEPT_BATCH + 36):
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.settimeout(10)  # a backlog shorter than this test's (somaxconn): a failure, not a hang
            c.connect(sock_path)
            clients.append(c)
        server.loop._accept()
        assert server.loop._conns == loop.ACCEPT_BATCH
        server.loop._accept()
        assert server.loop._conns == loop.ACCEPT_BATCH + 36
    finally:
        for c in clients:
            c.close()
        server.start()
        server.shutdown()


def test_clients_that_do_not_read_hold_no_worker(sock_path: str) -> None:
    """Eight clients ask for a 4 MB /status and never read it (twice the operator endpoints' four workers): the
    loop writes what the socket does not take at once, so /metrics is still answered, and each of those answers
    is whole for a client that reads it late. Then they hang up: their connections are counted gone."""
    sock, _ = listen(sock_path)
    big = {"x": "a" * 4_000_000}
    server = Server(sock, None, Metrics(), limits=Limits(allowed_uids={0}), views={"/status": lambda _: big})  # type: ignore[arg-type]
    server.ready.set()
    server.start()
    stuck: list[socket.socket] = []
    try:
        for _ in range(8):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(30)
            s.connect(sock_path)
            s.sendall(b"GET /status HTTP/1.1\r\n\r\n")
            stuck.append(s)
        # Under WRITE_TIMEOUT (30 s): a worker held by a client that does not read would make this time out.
        metrics = ask(sock_path, b"GET /metrics HTTP/1.1\r\n\r\n", timeout=10)
        assert metrics.startswith(b"HTTP/1.1 200") and b"netcomp_connections" in metrics
        late = b""
        while chunk := stuck[0].recv(1 << 20):
            late += chunk
        head, _, body = late.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and len(body) == len(json.dumps(big, indent=2))
    finally:
        for s in stuck:
            s.close()
        try:
            until(lambda: server.loop._conns == 0, "every connection closed", 30)
        finally:
            server.shutdown()


def test_a_listening_socket_that_cannot_be_watched_again_is_tried_again(
    sock_path: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The pause after a failing accept ends with the listening socket watched again; when that fails too (epoll
    out of memory, as the accept was), it is tried again after another pause, never left unwatched while the
    tick keeps telling systemd all is well."""
    caplog.set_level(logging.ERROR, "netcomp.server")
    _FailingAccept.tries, _FailingAccept.first = 0, 0.0
    base, _ = listen(sock_path)
    sock = _FailingAccept(fileno=base.detach())
    server = Server(sock, None, Metrics(), limits=Limits(allowed_uids={0}), views={})  # type: ignore[arg-type]
    server.ready.set()
    real = server.loop._sel.register
    refused: list[int] = []

    def register(fileobj: object, events: int, data: object = None) -> object:
        if fileobj is sock and _FailingAccept.tries and not refused:
            refused.append(1)
            raise OSError(errno.ENOMEM, "Cannot allocate memory")
        return real(fileobj, events, data)

    server.loop._sel.register = register  # type: ignore[method-assign]
    server.start()
    try:
        assert ask(sock_path).startswith(b"HTTP/1.1 200")
    finally:
        server.shutdown()
    assert refused == [1]
    assert "cannot watch the listening socket again: [Errno 12] Cannot allocate memory" in caplog.text


def test_a_bug_in_the_loops_own_steps_is_logged_and_serving_goes_on(
    sock_path: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The tick (the watchdog's keep-alive) and the start of queued requests run in every round: a bug in either
    is logged, and the loop serves on (were it to end, the socket would be closed and every client refused)."""
    sock, _ = listen(sock_path)
    server = Server(sock, None, Metrics(), limits=Limits(allowed_uids={0}), views={})  # type: ignore[arg-type]
    server.ready.set()

    def bug() -> None:
        raise RuntimeError("a bug")

    server.loop.on_tick = bug
    monkeypatch.setattr(Server, "after_round", lambda self: bug())
    server.start()
    try:
        assert ask(sock_path).startswith(b"HTTP/1.1 200")
        assert ask(sock_path).startswith(b"HTTP/1.1 200")
    finally:
        server.shutdown()
    assert "tick failed" in caplog.text and "bug while starting queued requests" in caplog.text


def test_the_header_timeout_lingers_for_a_client_still_sending(sock_path: str) -> None:
    """A client that sent half its body when the header timeout came: the 408 is sent and the daemon reads on
    (bounded), so the rest of the body goes out without a broken pipe and the client reads its 408."""
    sock, _ = listen(sock_path)
    server = Server(sock, None, Metrics(), limits=Limits(allowed_uids={0}, header_timeout=0.2), views={})  # type: ignore[arg-type]
    server.ready.set()
    server.start()
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.settimeout(30)
    try:
        c.connect(sock_path)
        c.sendall(b"POST /cni HTTP/1.1\r\nContent-Length: 1000000\r\n\r\n" + b"x" * 1000)
        select.select([c], [], [], 30)  # the 408 is there to read
        c.sendall(b"x" * 900_000)  # a BrokenPipeError here: the daemon had closed the connection
        answer = b""
        while chunk := c.recv(65536):
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 408")
    finally:
        c.close()
        server.shutdown()


def test_a_cni_request_while_draining_is_told_the_daemon_is_stopping(sock_path: str) -> None:
    sock, _ = listen(sock_path)
    server = serve(sock)
    try:
        assert server.drain(0.0)
        got = ask(sock_path, b"POST /cni HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}")
        assert got.startswith(b"HTTP/1.1 503") and b"netcomp is stopping; try again later" in got
        assert b'"code": 11' in got
    finally:
        server.shutdown()


def test_work_submitted_after_shutdown_is_refused_not_lost() -> None:
    pool = Workers("t", 2)
    ran = threading.Event()
    pool.submit(ran.set)
    assert ran.wait(30)
    pool.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        pool.submit(ran.set)


def test_an_answer_handed_back_as_the_loop_stops_is_closed(sock_path: str) -> None:
    """A worker hands the rest of a large answer back to the loop just as the loop cleans up to stop: the
    connection is still closed and counted gone (its client sees the end), not left open in a list nobody
    reads."""
    from netcomp.daemon.server.connections import Conn

    sock, _ = listen(sock_path)
    server = Server(sock, None, Metrics(), limits=Limits(allowed_uids={0}), views={})  # type: ignore[arg-type]
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    ours.setblocking(False)
    c = Conn(ours, -5, mine=False)  # as a worker has it
    with server.loop._count_lock:
        server.loop._conns += 1
        server.loop._per_peer[-5] += 1
    real = server.drop_held

    def queued_now() -> list[Conn]:
        server.loop.send_answer(c, b"x" * 4_000_000)  # more than the socket takes: handed back
        return real()

    server.drop_held = queued_now  # type: ignore[method-assign]
    server.start()
    server.shutdown()
    theirs.settimeout(30)
    try:
        while theirs.recv(1 << 20):  # a timeout here: the connection was left open
            pass
    finally:
        theirs.close()
    assert server.loop._conns == 0 and not server.loop._per_peer


class _Held(logging.Handler):
    """A log handler that holds the thread logging "CNI request refused" until released: a journal that is slow
    to take a line."""

    def __init__(self) -> None:
        super().__init__()
        self.reached = threading.Event()
        self.go = threading.Event()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("CNI request refused"):
            self.reached.set()
            self.go.wait(30)
            self.lines.append(record.getMessage())


def test_a_cni_requests_log_line_is_written_after_its_answer(sock_path: str) -> None:
    """The answer is out before the request's log line is written: a journal slow to take the line does not
    hold the runtime. The request leaves flight (what a drain waits for) only once its line is written."""
    server = serve(listen(sock_path)[0])
    held = _Held()
    logger = logging.getLogger("netcomp.server")
    logger.addHandler(held)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    try:
        body = b"{not json"
        request = b"POST /cni HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        answer = ask(sock_path, request, timeout=10)  # the line is held: this would time out if it came first
        assert answer.startswith(b"HTTP/1.1 400 ") and b'"code":6' in answer.replace(b" ", b""), answer
        assert held.reached.wait(10) and held.lines == []
        assert server.in_flight == 1  # still writing its line
        held.go.set()
        assert server.wait_for(lambda: server.in_flight == 0, 10)
        assert held.lines and "code 6" in held.lines[0]
    finally:
        held.go.set()
        logger.removeHandler(held)
        logger.setLevel(old_level)
        server.shutdown()


def test_a_connection_with_nothing_to_read_yet_gives_up_the_cpu_once_per_round(
    sock_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loop, woken by a connect before the client wrote, yields the CPU once (the client may be the one it
    took it from) and reads again; once per accept round however many such connections it takes, so that a
    flood of silent connects cannot make it give up a busy CPU's slices one after another."""
    import os

    yields: list[int] = []
    rounds: list[int] = []
    monkeypatch.setattr(os, "sched_yield", lambda: yields.append(1))
    accept = Loop._accept

    def counted(self: Loop) -> None:
        rounds.append(1)
        accept(self)

    monkeypatch.setattr(Loop, "_accept", counted)
    listening = listen(sock_path)[0]
    silent: list[socket.socket] = []
    server = None
    try:
        for _ in range(20):  # in the backlog before the loop starts: its first round takes all twenty
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            silent.append(s)
            s.connect(sock_path)
        server = serve(listening)
        # Accepted after the twenty (the backlog is first come, first served): all were taken by its answer.
        assert ask(sock_path).startswith(b"HTTP/1.1 200 ")
        assert 1 <= len(yields) <= len(rounds) and len(yields) <= 2, (len(yields), len(rounds))
    finally:
        for s in silent:
            s.close()
        if server is not None:
            server.shutdown()
        else:
            listening.close()
