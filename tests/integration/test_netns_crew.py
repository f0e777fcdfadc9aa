"""host.netns.inside: work in a container's namespace is done by kept threads (the crew), in real network
namespaces made here: the work runs in the namespace asked for, the thread goes home after, it is reused, a
thread that cannot go home is never used again, and errors reach the caller as they did."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from netcomp.errors import DelegateError, HostError
from netcomp.host import nsenter as nsutil
from tests.lab.netlab import Lab, ip, lab


@pytest.fixture(scope="module")
def two() -> Iterator[tuple[Lab, str, str]]:
    with lab() as lb:
        a, b = lb.container("a"), lb.container("b")
        ip("link", "add", "only-in-a", "type", "veth", "peer", "name", "peer-in-a", netns=a)
        yield lb, f"/var/run/netns/{a}", f"/var/run/netns/{b}"


def _ns_of(tid: int) -> int:
    return os.stat(f"/proc/self/task/{tid}/ns/net").st_ino


def test_the_work_runs_in_the_namespace_asked_for_and_the_thread_goes_home(two: tuple[Lab, str, str]) -> None:
    _, a, b = two
    home = os.stat("/proc/thread-self/ns/net").st_ino

    def where() -> tuple[int, int, set[str]]:
        return (
            threading.get_native_id(),
            os.stat("/proc/thread-self/ns/net").st_ino,
            {n for _, n in socket.if_nameindex()},
        )

    tid, ino, names = nsutil.inside(a, where, "look")
    assert ino == os.stat(a).st_ino != home
    assert {"only-in-a", "peer-in-a"} <= names
    assert _ns_of(tid) == home  # the kept thread is back in the daemon's namespace
    assert os.stat("/proc/thread-self/ns/net").st_ino == home  # and the caller never left it
    tid_b, ino_b, names_b = nsutil.inside(b, where, "look")
    assert ino_b == os.stat(b).st_ino
    assert "only-in-a" not in names_b
    assert tid_b == tid  # the same thread did both: kept, not started per call


def test_an_fd_on_the_namespace_works_as_a_path_does(two: tuple[Lab, str, str]) -> None:
    _, a, _ = two
    fd, _ = nsutil.open_netns(a)
    try:
        assert "only-in-a" in nsutil.inside(fd, lambda: {n for _, n in socket.if_nameindex()}, "list links")
    finally:
        os.close(fd)


def test_errors_reach_the_caller_and_the_thread_is_kept(two: tuple[Lab, str, str]) -> None:
    _, a, _ = two

    def netlink_trouble() -> None:
        raise OSError(105, "No buffer space available")

    with pytest.raises(HostError, match=r"cannot list links in .*No buffer space"):
        nsutil.inside(a, netlink_trouble, "list links")

    def bug() -> None:
        raise KeyError("x")

    with pytest.raises(KeyError):
        nsutil.inside(a, bug, "look")
    tid = nsutil.inside(a, threading.get_native_id, "look")
    assert _ns_of(tid) == os.stat("/proc/thread-self/ns/net").st_ino


def test_what_is_not_a_network_namespace_is_the_requests_error() -> None:
    with pytest.raises(DelegateError) as e:
        nsutil.inside("/proc/self/ns/mnt", lambda: None, "look")
    assert e.value.code == 4
    r, w = os.pipe()
    try:
        with pytest.raises(DelegateError, match="is not a network namespace"):
            nsutil.inside(r, lambda: None, "look")  # setns refuses it: nothing ran, the thread stays home
    finally:
        os.close(r)
        os.close(w)
    tid = nsutil.inside("/proc/self/ns/net", threading.get_native_id, "look")
    assert _ns_of(tid) == os.stat("/proc/thread-self/ns/net").st_ino


def test_side_by_side_each_gets_its_own_namespace(two: tuple[Lab, str, str]) -> None:
    _, a, b = two
    want = {a: os.stat(a).st_ino, b: os.stat(b).st_ino}
    barrier = threading.Barrier(8)

    def one(path: str) -> tuple[str, int]:
        def work() -> int:
            barrier.wait(timeout=30)  # all eight at once: eight threads of the crew, none shared
            return os.stat("/proc/thread-self/ns/net").st_ino

        return path, nsutil.inside(path, work, "look")

    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(one, [a, b] * 4))
    assert all(ino == want[p] for p, ino in got)
    assert len(nsutil._CREW._idle) <= nsutil._Crew.KEEP  # the extra ones ended


def test_a_thread_that_cannot_go_home_is_never_used_again(
    two: tuple[Lab, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The return's failure is simulated (setns back to the daemon's own namespace does not fail here): a stand-in
    _setns that refuses the way home once."""
    _, a, _ = two
    real = nsutil._setns
    entered: list[int] = []
    failed_once: list[bool] = []

    def flaky(fd: int) -> None:
        if entered and not failed_once:
            failed_once.append(True)
            raise OSError(12, "Cannot allocate memory")
        entered.append(fd)
        real(fd)

    first = nsutil.inside(a, threading.get_native_id, "look")
    monkeypatch.setattr(nsutil, "_setns", flaky)
    stuck = nsutil.inside(a, threading.get_native_id, "look")  # the work is done and answered...
    monkeypatch.setattr(nsutil, "_setns", real)
    assert stuck == first
    after = nsutil.inside(a, threading.get_native_id, "look")
    assert after != stuck  # ...but that thread works no more: another does
    assert all(h.thread.native_id != stuck for h in nsutil._CREW._idle)


def test_a_bug_around_the_work_is_raised_and_never_hangs_the_caller(
    two: tuple[Lab, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure outside the work itself (stood in for by a _do that raises) reaches the caller, and the thread,
    whose whereabouts are then unknown, is not used again."""
    _, a, _ = two
    before = nsutil.inside(a, threading.get_native_id, "look")

    def broken(job: object, home: int) -> object:
        raise RuntimeError("a bug")

    monkeypatch.setattr(nsutil, "_do", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        nsutil.inside(a, threading.get_native_id, "look")
    monkeypatch.undo()
    assert nsutil.inside(a, threading.get_native_id, "look") != before
    assert all(h.thread.native_id != before for h in nsutil._CREW._idle)
