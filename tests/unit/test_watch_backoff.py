"""Lists and watches back off (following.keep_following), driven by a fake clock: a 410 answered to the list, 410s
on watch after watch, a watch the server ends at once, any other error: each waits, doubling, capped, jittered,
and the follower's status says so. A 410 on one watch (its resourceVersion compacted away) lists again at once.
Against an HTTP server answering 410 to every list: tests/integration/test_watch_backoff.py."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from netcomp.kube import following
from netcomp.kube.following import MAX_BACKOFF, Backoff, keep_following
from tests.lab.goneapi import FakeTime, Gone410, gone_error
from tests.lab.services import slices_of


def follow(t: FakeTime, relist: Callable[[], str], watch: Callable[[str, threading.Event], str]) -> list[str]:
    said: list[str] = []
    keep_following(t.stop, relist, watch, said.append, str, backoff=t.backoff())
    return said


def test_a_410_answered_to_the_list_backs_off() -> None:
    """Every follower listed again at once: 2,420 requests in 10 s from one node."""
    t = FakeTime(threading.Event(), window=10)

    def relist() -> str:
        t.call()
        raise gone_error()

    said = follow(t, relist, lambda rv, stop: rv)
    assert t.calls <= 5, t.calls  # 10 s: waits of at least 0.5, 1, 2, 4 s
    assert said and said[0] == "410 Gone: too old resource version: 5 (9) (answered to a list)"
    assert t.waits == sorted(t.waits) and t.waits[0] > 0


def test_the_wait_doubles_to_its_cap_with_jitter() -> None:
    t = FakeTime(threading.Event(), window=600)

    def relist() -> str:
        t.call()
        raise OSError("connection refused")

    follow(t, relist, lambda rv, stop: rv)
    assert max(t.waits) <= MAX_BACKOFF and t.waits[-1] == MAX_BACKOFF * 0.75  # rand 0.5: 3/4 of the ceiling
    assert t.waits[:3] == [0.75, 1.5, 3.0]
    low, high = Backoff(rand=lambda: 0.0), Backoff(rand=lambda: 0.999)
    assert [low.failed() for _ in range(3)] == [0.5, 1.0, 2.0] and 1.99 < [high.failed() for _ in range(2)][1] <= 2


def test_a_410_on_a_watch_lists_again_at_once_but_not_again_and_again() -> None:
    t = FakeTime(threading.Event(), window=10)
    lists: list[float] = []

    def relist() -> str:
        lists.append(t.now)
        return "5"

    def watch(rv: str, stop: threading.Event) -> str:
        t.call()
        raise gone_error()

    said = follow(t, relist, watch)
    assert lists[:2] == [1000.0, 1000.0]  # the first 410: at once
    assert len(lists) <= 6, lists  # then the repeats wait
    assert said[0].endswith("(again soon after the last: backing off)")


def test_a_watch_ended_at_once_with_nothing_backs_off() -> None:
    t = FakeTime(threading.Event(), window=10)

    def watch(rv: str, stop: threading.Event) -> str:
        t.call()
        return rv

    said = follow(t, lambda: "5", watch)
    assert t.calls <= 5 and said[0] == "the API server ended a watch at once with nothing in it"


def test_a_watch_that_ran_makes_the_next_failure_the_first() -> None:
    t = FakeTime(threading.Event(), window=1e9, most=8)
    runs = iter([OSError("a"), OSError("b"), OSError("c"), "ran", OSError("d")])

    def watch(rv: str, stop: threading.Event) -> str:
        t.call()
        what = next(runs, None)
        if isinstance(what, Exception):
            raise what
        if what == "ran":
            t.now += 300  # a watch the server ended after its timeout
            return "6"
        stop.set()
        return rv

    follow(t, lambda: "5", watch)
    assert t.waits == [0.75, 1.5, 3.0, 0.75]


def test_a_stop_while_waiting_ends_it() -> None:
    stop = threading.Event()
    b = Backoff()
    stop.set()
    keep_following(stop, lambda: (_ for _ in ()).throw(OSError("x")), lambda rv, s: rv, lambda why: None, str,
                   backoff=b)  # fmt: skip
    assert b.failures == 0


# ------------------------------------------------------------------------------------------------ status


def test_the_services_follower_says_it_backs_off(tmp_path: Path) -> None:
    stop = threading.Event()
    t = FakeTime(stop, window=10)
    ss, _ = slices_of(Gone410(t), tmp_path, backoff=t.backoff)
    seen: list[Any] = []
    real_wait = t.wait

    def wait(stop: threading.Event, seconds: float) -> None:
        seen.append(ss.status()["lastError"])
        real_wait(stop, seconds)

    t.wait = wait  # type: ignore[method-assign]
    ss.backoffs["Services"].wait = wait
    ss.follows["Services"].follow(stop)
    assert t.calls <= 5
    assert seen[0] == (
        "cannot follow the Services: 410 Gone: too old resource version: 5 (9) (answered to a list) "
        "(failed once; backing off, trying again in 1 s)"
    )
    assert seen[2].endswith("(failed 3 times in a row; backing off, trying again in 3 s)")


def test_netcomp_status_shows_the_slices_last_error() -> None:
    import io

    from netcomp.cli.ask import _print_status

    doc = {
        "degraded": False, "ready": True, "version": "x", "generation": 1, "networks": [], "attachments": 0,
        "requests": {"inFlight": 0, "served": 0}, "diagnostics": [],
        "kubernetes": {"synced": True, "networks": 0, "lastError": None, "endpointSlices": {
            "synced": False, "services": 0, "slices": 0, "refused": {},
            "lastError": "cannot follow the Services: 410 Gone (answered to a list) (failed once; ...)"}},
    }  # fmt: skip
    out = io.StringIO()
    _print_status(doc, out)
    assert "EndpointSlices: 0 Services on secondary networks, 0 slices of this node, NOT SYNCED, last error: " \
        "cannot follow the Services: 410 Gone (answered to a list)" in out.getvalue()  # fmt: skip


@pytest.mark.parametrize("maker", ["node", "pods", "cluster"])
def test_every_follower_backs_off_and_says_so(maker: str, tmp_path: Path) -> None:
    """The Node's, the pods' and the Network objects' followers list through keep_following with their Backoff,
    and their status says the failure and the back-off."""
    from netcomp.cluster.nodewatch import NodeWatch
    from netcomp.cluster.podwatch import PodWatch
    from netcomp.metrics import Metrics
    from netcomp.settings import KubeSettings

    stop = threading.Event()
    t = FakeTime(stop, window=10)
    seen: list[str | None] = []
    api = Gone410(t)
    if maker == "node":
        f: Any = NodeWatch(api, "n1", str, t.backoff())
        run: Callable[[], None] = lambda: f.follow(stop)  # noqa: E731
    elif maker == "pods":
        f = PodWatch(api, KubeSettings(), "n1", Metrics(), str, t.backoff())
        run = lambda: f.follow(stop)  # noqa: E731
    else:
        from netcomp.cluster.intents import NETWORKS, _Follower

        cluster: Any = type("C", (), {"custom": api, "kube": KubeSettings(), "metrics": Metrics(),
                                      "files": lambda self: []})()  # fmt: skip
        f = _Follower(cluster, NETWORKS, t.backoff())
        run = lambda: f.follow(stop)  # noqa: E731
    real_wait = f.backoff.wait

    def wait(s: threading.Event, seconds: float) -> None:
        seen.append(f.status_error())
        real_wait(s, seconds)

    f.backoff.wait = wait
    run()
    assert t.calls <= 5
    assert seen[0] is not None and "410 Gone" in seen[0]
    assert "(failed once; backing off, trying again in 1 s)" in seen[0]


def test_events_of_a_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Events still moves its resourceVersion on bookmarks and yields the rest (unchanged by the back-off)."""

    def call(**kw: Any) -> Iterator[dict[str, Any]]:
        yield {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}}
        yield {"type": "ADDED", "object": {"metadata": {"resourceVersion": "10", "name": "a"}}}

    ev = following.Events(call, rv="5", stop=threading.Event())
    assert [k for k, _ in ev] == ["ADDED"] and ev.rv == "10"


def test_a_follower_that_reaches_the_server_again_wakes_the_others() -> None:
    """Followers of one API server back off at their own jittered times; the first to list again wakes the others
    (it answers now), so that a node catches up at once and not one kind at a time."""
    wakeup = following.Wakeup()
    waiting, other = Backoff(wakeup=wakeup), Backoff(wakeup=wakeup)
    stop, done = threading.Event(), threading.Event()
    waiting.failed()

    def sleep() -> None:
        waiting.sleep(stop, 3600)
        done.set()

    threading.Thread(target=sleep, daemon=True).start()
    from tests.lab.poll import until

    until(lambda: waiting.retry_at is not None and wakeup._waiting, "the follower backs off")
    other.listed()  # a routine list wakes nobody
    assert not done.wait(0.3)  # a bounded wait for what must not happen
    other.failed()
    other.listed()
    assert done.wait(10)
    stop.set()


def test_a_shared_wakeup_wakes_the_followers_at_most_once_every_wake_every() -> None:
    """Where lists are answered and watches fail at once (RBAC without watch, a proxy that cuts long streams), each
    follower lists after every failure: were every such list to wake the others, they would list in a loop."""
    now = [0.0]
    wakeup = following.Wakeup(lambda: now[0])
    waiting = threading.Event()
    wakeup._waiting.add(waiting)
    wakeup.reached()
    assert waiting.is_set()
    waiting.clear()
    now[0] += following.WAKE_EVERY / 2
    wakeup.reached()
    assert not waiting.is_set()
    now[0] += following.WAKE_EVERY / 2
    wakeup.reached()
    assert waiting.is_set()
