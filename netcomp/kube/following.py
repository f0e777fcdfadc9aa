"""Following a kind of object on the API server, the one way every follower here does it: list, then watch from
the list's resourceVersion; after a 410 (a resourceVersion too old to watch from) list again at once; after any
other failure say why, back off (1 s, doubling up to MAX_BACKOFF) and list again; until stopped, a watch the
stop ended being no failure. What the follower knows stays meanwhile."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

MAX_BACKOFF = 30.0


def keep_following(
    stop: threading.Event,
    relist: Callable[[], str],
    watch: Callable[[str, threading.Event], str],
    failed: Callable[[str], None],
    explain: Callable[[Exception], str],
    api_why: Callable[[Any], str] = lambda e: f"{e.status} {e.reason}",
) -> None:
    """`relist` lists and returns the resourceVersion to watch from; `watch` watches from one until it ends and
    returns the last seen; `failed` is told why a list or watch failed (`api_why` words an ApiException,
    `explain` anything else: the API server away, TLS, a timeout)."""
    from netcomp.kube.apierrors import ApiException

    rv: str | None = None
    backoff = 1.0
    while not stop.is_set():
        try:
            if rv is None:
                rv = relist()
                backoff = 1.0
            rv = watch(rv, stop)
        except ApiException as e:
            rv = None
            if e.status == 410 or stop.is_set():
                continue
            failed(api_why(e))
        except Exception as e:
            rv = None
            if stop.is_set():
                return
            failed(explain(e))
        else:
            continue
        stop.wait(backoff)
        backoff = min(backoff * 2, MAX_BACKOFF)


WATCH_SECONDS = 300  # a watch is renewed this often (from the last resourceVersion seen)


class Events:
    """One watch of `list_call(*args, **kwargs)` from resourceVersion `rv`, renewed by the server after `seconds`:
    iterated, each event as (its type, its object as a dict) until the server ends the watch or `stop` is set;
    `rv` is then the resourceVersion to watch from next (the last one seen). The watch asks for bookmarks (the
    API server's "nothing for you up to here", so that a renewed watch need not start from an old version and
    meet a 410); a BOOKMARK moves `rv` and is not yielded: it says nothing of any object."""

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
        events = self.call(
            *self.args,
            watch=True,
            resource_version=self.rv,
            timeout_seconds=self.seconds,
            _request_timeout=self.seconds + 10,
            allow_watch_bookmarks=True,
            **self.kwargs,
        )
        try:
            for event in events:
                if self.stop.is_set():
                    return
                obj = event.get("object")
                if not isinstance(obj, dict):
                    obj = {}
                self.rv = str((obj.get("metadata") or {}).get("resourceVersion") or self.rv)
                kind = str(event.get("type") or "")
                if kind != "BOOKMARK":
                    yield kind, obj
        finally:
            events.close()


PAGE = 500  # objects per page of a list


def pages(
    list_call: Callable[..., Any], *args: Any, timeout: float, limit: int = PAGE, **kwargs: Any
) -> Iterator[tuple[list[dict[str, Any]], str]]:
    """A list a page at a time (`limit` and `continue`): each page's objects and the list's resourceVersion (the
    same on every page: one snapshot). A continue token that expired is an ApiException 410: list again."""
    token = None
    while True:
        doc = list_call(*args, limit=limit, _continue=token, _request_timeout=timeout, **kwargs)
        meta = doc.get("metadata") or {}
        yield [o for o in doc.get("items") or [] if isinstance(o, dict)], str(meta.get("resourceVersion") or "")
        token = meta.get("continue")
        if not token:
            return


class Selection:
    """Following objects picked by a selector that changes (the networks a node serves): each selection lists and
    watches in a thread of its own (`run(selector, stop, current)`); a newer one stops the older, which ends at
    its next event or when its watch expires, and whose `current()` is False from then on."""

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
