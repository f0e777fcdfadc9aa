"""Following a kind of object on the API server: list, then watch from the list's resourceVersion, until stopped.
Every failure is said and backed off as client-go's reflector does (Backoff), so that a fleet of nodes never
lists together in a loop; what a follower knows stays meanwhile. It also reads lists a page at a time and
follows what a selector that changes picks."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from netcomp.metrics import Metrics

log = logging.getLogger("netcomp.kube")

MAX_BACKOFF = 30.0
FIRST_BACKOFF = 1.0
CALM = 120.0  # this long without a failure and the next one starts from FIRST_BACKOFF (client-go: 2 min)
WAKE_EVERY = 30.0  # seconds between two wake-ups of one API server's followers
SHORT_WATCH = 1.0  # a watch that ends sooner than this with no event is a failure (client-go's "very short watch")
STOP_LATENCY = 0.5  # seconds a waiting follower may take to see that it is stopped
WATCH_SECONDS = 300  # a watch is renewed this often (from the last resourceVersion seen)
PAGE = 500  # objects per page of a list


class Wakeup:
    """The followers of one API server: when one of them lists again after the server was away, the others stop
    backing off and try at once. At most once every WAKE_EVERY seconds: where lists work and watches fail (RBAC
    without watch, a proxy that cuts long streams), waking at every list would undo the back-off."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._waiting: set[threading.Event] = set()
        self.clock = clock
        self._last: float | None = None

    def reached(self) -> None:
        with self._lock:
            now = self.clock()
            if self._last is not None and now - self._last < WAKE_EVERY:
                return
            self._last = now
            for ev in self._waiting:
                ev.set()

    def wait(self, stop: threading.Event, seconds: float) -> None:
        """Until `seconds` have passed, `stop` is set (seen within STOP_LATENCY) or another follower reached the
        server."""
        ev = threading.Event()
        with self._lock:
            self._waiting.add(ev)
        try:
            deadline = time.monotonic() + seconds
            while not stop.is_set() and not ev.is_set() and (left := deadline - time.monotonic()) > 0:
                ev.wait(min(left, STOP_LATENCY))
        finally:
            with self._lock:
                self._waiting.discard(ev)


class Backoff:
    """How long to wait after each failure in a row: FIRST_BACKOFF doubling up to MAX_BACKOFF, each drawn from
    its upper half (jitter: nodes that failed together do not retry together)."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        wait: Callable[[threading.Event, float], object] = lambda stop, s: stop.wait(s),
        rand: Callable[[], float] = random.random,
        wakeup: Wakeup | None = None,
    ) -> None:
        """`wakeup`: shared with the other followers of the same API server (it then waits, not `wait`)."""
        self.clock, self.wait, self.rand, self.wakeup = clock, wakeup.wait if wakeup else wait, rand, wakeup
        self.failures = 0  # in a row
        self.last: float | None = None  # when the last one was
        self.retry_at: float | None = None  # when the follower tries again, while it waits

    def calm(self) -> bool:
        """Whether no failure happened for a while (the next one is the first in a row)."""
        return self.last is None or self.clock() - self.last > CALM

    def failed(self) -> float:
        """Note a failure; the seconds to wait before trying again."""
        if self.calm():
            self.failures = 0
        self.failures += 1
        self.last = self.clock()
        ceiling = min(FIRST_BACKOFF * 2.0 ** min(self.failures - 1, 16), MAX_BACKOFF)
        return ceiling * (0.5 + self.rand() / 2)

    def ok(self) -> None:
        """A watch ran as it should: the next failure is the first in a row."""
        self.failures, self.last, self.retry_at = 0, None, None

    def listed(self) -> None:
        """A list was answered: the followers that share the server stop waiting when this one had failed."""
        if self.wakeup is not None and self.failures:
            self.wakeup.reached()

    def sleep(self, stop: threading.Event, seconds: float) -> None:
        self.retry_at = self.clock() + seconds
        try:
            self.wait(stop, seconds)
        finally:
            self.retry_at = None

    def saying(self) -> str:
        """For a status: how many failures in a row and when the next try is, while waiting ("" otherwise)."""
        if self.retry_at is None:
            return ""
        again = max(0.0, self.retry_at - self.clock())
        times = "once" if self.failures == 1 else f"{self.failures} times in a row"
        return f" (failed {times}; backing off, trying again in {again:.0f} s)"


class _ShortWatch(Exception):
    """The API server ended a watch at once with nothing in it."""


def keep_following(
    stop: threading.Event,
    relist: Callable[[], str],
    watch: Callable[[str, threading.Event], str],
    failed: Callable[[str], None],
    explain: Callable[[Exception], str],
    api_why: Callable[[Any], str] = lambda e: f"{e.status} {e.reason}",
    backoff: Backoff | None = None,
) -> None:
    """`relist` lists and returns the resourceVersion to watch from; `watch` watches from one until it ends and
    returns the last seen; `failed` is told why either failed (`api_why` words an ApiException, `explain` anything
    else). A 410 on a watch (its resourceVersion compacted away) lists again at once, the first time in a while;
    every other failure waits its turn."""
    from netcomp.kube.apierrors import ApiException

    b = backoff or Backoff()
    rv: str | None = None
    while not stop.is_set():
        watching = False
        try:
            if rv is None:
                rv = relist()
                b.listed()
            watching, began, since = True, b.clock(), rv
            rv = watch(rv, stop)
            if not stop.is_set() and rv == since and b.clock() - began < SHORT_WATCH:
                raise _ShortWatch()
            if b.clock() - began >= SHORT_WATCH:
                b.ok()
            continue
        except ApiException as e:
            rv = None
            if stop.is_set():
                return
            if e.status == 410 and watching and b.calm():
                b.failed()  # counted: a 410 again soon waits
                continue
            why = api_why(e)
            if e.status == 410:
                why += " (again soon after the last: backing off)" if watching else " (answered to a list)"
        except _ShortWatch:
            why = "the API server ended a watch at once with nothing in it"
        except Exception as e:
            rv = None
            if stop.is_set():
                return
            why = explain(e)
        delay = b.failed()
        failed(why)
        b.sleep(stop, delay)


class Events:
    """One watch of `list_call(*args, **kwargs)` from resourceVersion `rv`, ended by the server after `seconds`:
    iterated, each event as (its type, its object), until the watch ends or `stop` is set; `rv` is then the last
    resourceVersion seen. Bookmarks, asked for so that a renewed watch need not meet a 410, only move `rv`."""

    def __init__(
        self,
        list_call: Callable[..., Any],
        *args: Any,
        rv: str,
        stop: threading.Event,
        seconds: int = WATCH_SECONDS,
        **kwargs: Any,
    ) -> None:
        self.call, self.args, self.kwargs = list_call, args, kwargs
        self.rv, self.stop, self.seconds = rv, stop, seconds

    def __iter__(self) -> Iterator[tuple[str, dict[str, Any]]]:
        events = self.call(*self.args, watch=True, resource_version=self.rv, timeout_seconds=self.seconds,
                           _request_timeout=self.seconds + 10, allow_watch_bookmarks=True, **self.kwargs)  # fmt: skip
        try:
            for event in events:
                if self.stop.is_set():
                    return
                obj = event.get("object")
                if not isinstance(obj, dict):
                    obj = {}
                meta = obj.get("metadata")
                self.rv = str((meta.get("resourceVersion") if isinstance(meta, dict) else None) or self.rv)
                kind = str(event.get("type") or "")
                if kind != "BOOKMARK":
                    yield kind, obj
        finally:
            events.close()


class Follower:
    """One kind of object followed (keep_following) by the call `method` of `api` with `args` and `kwargs` (looked
    up at each call): a subclass takes each list's items (`listed`) and each change a watch tells (`seen`).
    `last_error` is the failure that holds now, logged once per distinct failure (`said`), not once per retry."""

    said = "cluster: %s%s"  # the failure, then what the follower does meanwhile

    def __init__(
        self,
        what: str,
        api: Any,
        method: str,
        *args: Any,
        explain: Callable[[Exception], str],
        backoff: Backoff | None,
        timeout: float,
        loads: Callable[[bytes], Any],
        metrics: Metrics | None = None,
        seconds: int = WATCH_SECONDS,
        **kwargs: Any,
    ) -> None:
        self.what, self.explain, self.backoff, self.metrics = what, explain, backoff or Backoff(), metrics
        self.api, self.method, self.args, self.kwargs = api, method, args, kwargs
        self.timeout, self.loads, self.seconds = timeout, loads, seconds
        self.synced = threading.Event()  # listed once
        self.last_error: str | None = None

    def listed(self, items: list[Any]) -> None:
        raise NotImplementedError

    def seen(self, kind: str, obj: dict[str, Any]) -> None:
        raise NotImplementedError

    def meanwhile(self) -> str:
        """What the follower does while it cannot follow, said after the failure."""
        return ""

    def api_why(self, e: Any) -> str:
        return f"{e.status} {e.reason}"

    def follow(self, stop: threading.Event) -> None:
        keep_following(stop, self._relist, self._watch, self.failed, self.explain, self.api_why, self.backoff)

    def _relist(self) -> str:
        call = getattr(self.api, self.method)
        doc = self.loads(call(*self.args, _request_timeout=self.timeout, _preload_content=False, **self.kwargs).data)
        self.listed(doc.get("items") or [])
        self.last_error = None
        self.synced.set()
        return str((doc.get("metadata") or {}).get("resourceVersion") or "")

    def _watch(self, rv: str, stop: threading.Event) -> str:
        call = getattr(self.api, self.method)
        events = Events(call, *self.args, rv=rv, stop=stop, seconds=self.seconds, **self.kwargs)
        for kind, obj in events:
            if kind in ("ADDED", "MODIFIED", "DELETED"):
                self.seen(kind, obj)
        return events.rv

    def failed(self, why: str) -> None:
        if self.metrics is not None:
            self.metrics.kube_errors.labels("watch").inc()
        why = f"cannot follow {self.what}: {why}"
        if why != self.last_error:
            log.error(self.said, why, self.meanwhile())
        self.last_error = why

    def status_error(self) -> str | None:
        """The failure that holds now, and how the follower backs off."""
        return f"{self.last_error}{self.backoff.saying()}" if self.last_error else None


def pages(
    list_call: Callable[..., Any], *args: Any, timeout: float, limit: int = PAGE, **kwargs: Any
) -> Iterator[tuple[list[dict[str, Any]], str]]:
    """A list a page at a time (`limit` and `continue`): each page's objects and the list's resourceVersion (the
    same on every page: one snapshot). A continue token that expired is an ApiException 410: list again."""
    token = None
    while True:
        doc = list_call(*args, limit=limit, _continue=token, _request_timeout=timeout, **kwargs)
        meta = doc.get("metadata") or {}
        rv, token = str(meta.get("resourceVersion") or ""), meta.get("continue")
        held = [[o for o in doc.get("items") or [] if isinstance(o, dict)]]
        del doc, meta  # the page is its reader's alone: garbage once it is done with it, not once the next is read
        yield held.pop(), rv
        if not token:
            return


class Selection:
    """Following objects picked by a selector that changes (the networks a node serves): each selection runs in a
    thread of its own (`run(selector, stop, current)`); a newer one stops the older, whose `current()` is False."""

    def __init__(self, name: str, run: Callable[[str, threading.Event, Callable[[], bool]], None]) -> None:
        self.name, self.run = name, run
        self._lock = threading.Lock()
        self._gen = 0
        self._stop = threading.Event()
        self.selector: str | None = None

    def select(self, selector: str | None) -> None:
        """Follow what `selector` picks from now on (None: nothing); the same selector again changes nothing."""
        with self._lock:
            if selector == self.selector and not self._stop.is_set():
                return
            self._stop.set()
            self._gen += 1
            gen, self._stop, self.selector = self._gen, threading.Event(), selector
            stop = self._stop
        if selector is None:
            stop.set()
            return
        threading.Thread(
            target=self.run, args=(selector, stop, lambda: gen == self._gen), name=self.name, daemon=True
        ).start()
