"""An API server that answers every request with 410 Gone (what a real one answers a list or a watch whose
resourceVersion etcd compacted away), over plain HTTP on 127.0.0.1, counting what it was asked: the requests a
node's followers make while it answers so, for tests of their back-off."""

from __future__ import annotations

import collections
import contextlib
import json
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

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
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "t", "cluster": {"server": self.url}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "c", "context": {"cluster": "t", "user": "u"}}],
            "current-context": "c",
        }
        path.write_text(json.dumps(doc))
        return path


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
