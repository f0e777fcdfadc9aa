"""410 Gone, as an API server answers a list or a watch whose resourceVersion etcd compacted away, for the tests
of the followers' back-off: a server that answers every request so, over plain HTTP on 127.0.0.1, counting what it
was asked (GoneApi); an API client that raises it for every call (Gone410); and a clock that moves only when a
follower waits (FakeTime)."""

from __future__ import annotations

import collections
import contextlib
import json
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from netcomp.kube.apierrors import ApiException
from netcomp.kube.following import Backoff
from tests.lab.kubeapi import write_kubeconfig

STATUS = {
    "kind": "Status",
    "apiVersion": "v1",
    "status": "Failure",
    "message": "too old resource version: 5 (9)",
    "reason": "Expired",
    "code": 410,
}


class GoneApi:
    def __init__(self, server: ThreadingHTTPServer) -> None:
        self.server = server
        self.url = f"http://127.0.0.1:{server.server_address[1]}"
        self.counts: collections.Counter[str] = collections.Counter()  # path (and "?watch") -> requests
        self.lock = threading.Lock()

    def count(self, path: str) -> int:
        with self.lock:
            return self.counts[path]

    def kubeconfig(self, path: Path) -> Path:
        return Path(write_kubeconfig(path, {"token": "t"}, {"server": self.url}))


@contextlib.contextmanager
def gone_api() -> Iterator[GoneApi]:
    api: GoneApi

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            watch = "watch=true" in url.query
            with api.lock:
                api.counts[url.path + ("?watch" if watch else "")] += 1
            body = json.dumps(STATUS).encode()
            self.send_response(410)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    api = GoneApi(server)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield api
    finally:
        server.shutdown()
        server.server_close()


class FakeTime:
    """A clock that moves only when the follower waits; `stop` is set once `window` seconds have passed, or
    after `most` calls of anything (a follower that never waits would otherwise run for ever)."""

    def __init__(self, stop: threading.Event, window: float, most: int = 1000) -> None:
        self.now, self.stop, self.window, self.most = 1000.0, stop, window, most
        self.waits: list[float] = []
        self.calls = 0
        self.seen: list[str] = []  # what `look` said at each wait

    def clock(self) -> float:
        return self.now

    def wait(self, stop: threading.Event, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds
        if self.now - 1000.0 >= self.window:
            stop.set()

    def call(self) -> None:
        self.calls += 1
        if self.calls >= self.most:
            self.stop.set()

    def backoff(self, rand: Callable[[], float] = lambda: 0.5) -> Backoff:
        return Backoff(clock=self.clock, wait=self.wait, rand=rand)


def gone_error() -> ApiException:
    """What the API client raises for a 410 Gone: the resourceVersion asked for was compacted away."""
    return ApiException(410, "Gone: too old resource version: 5 (9)")


class Gone410:
    """An API server's CoreV1Api and CustomObjectsApi that answers 410 to every list."""

    def __init__(self, t: FakeTime) -> None:
        self.t = t

    def __getattr__(self, name: str) -> Callable[..., Any]:
        def call(*args: Any, **kw: Any) -> Any:
            self.t.call()
            raise gone_error()

        return call
