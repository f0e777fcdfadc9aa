"""This node's Node object, followed: whether the node is a Node of the cluster decides whether other nodes may
free its address claims once it is gone (ipam/allocator.py), and a daemon usually starts before its kubelet
registers the Node. One object by field selector (`metadata.name=<nodeName>`): listed, then watched."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from netcomp.kube import following
from netcomp.kube.following import Backoff, keep_following

log = logging.getLogger("netcomp.kube")


class NodeWatch:
    """`core`: the client's CoreV1Api; `changed(exists)` is called whenever what is known of the Node changes
    (from the follower's thread), and once it is first known."""

    def __init__(
        self, core: Any, node: str, one_line: Callable[[Exception], str], backoff: Backoff | None = None
    ) -> None:
        self.core = core
        self.backoff = backoff or Backoff()
        self.node = node
        self.one_line = one_line
        self.exists: bool | None = None  # None until the API server has said
        self.known = threading.Event()
        self._listeners: list[Callable[[bool], None]] = []
        self._lock = threading.Lock()
        self.last_error: str | None = None
        self._started = False

    def on_change(self, fn: Callable[[bool], None]) -> None:
        with self._lock:
            self._listeners.append(fn)
            now = self.exists
        if now is not None:
            fn(now)

    def start(self, stop: threading.Event) -> None:
        """Follow the Node (a thread); a second call does nothing."""
        with self._lock:
            if self._started:
                return
            self._started = True
        threading.Thread(target=self._follow, args=(stop,), name="kube-node", daemon=True).start()

    def _follow(self, stop: threading.Event) -> None:
        keep_following(stop, self._relist, self._watch, self._failed, self.one_line, backoff=self.backoff)

    def _selector(self) -> str:
        return f"metadata.name={self.node}"

    def _relist(self) -> str:
        resp: Any = self.core.list_node(field_selector=self._selector(), _request_timeout=30, _preload_content=False)
        doc = json.loads(resp.data)
        self._set(bool(doc.get("items")))
        self.last_error = None
        return str((doc.get("metadata") or {}).get("resourceVersion") or "")

    def _watch(self, rv: str, stop: threading.Event) -> str:
        events = following.Events(self.core.list_node, rv=rv, stop=stop, field_selector=self._selector())
        for kind, _obj in events:
            if kind in ("ADDED", "MODIFIED"):
                self._set(True)
            elif kind == "DELETED":
                self._set(False)
        return events.rv

    def _set(self, exists: bool) -> None:
        with self._lock:
            if exists == self.exists:
                return
            first, self.exists = self.exists is None, exists
            listeners = list(self._listeners)
        self.known.set()
        if exists:
            log.info("node %s is a Node of the cluster", self.node)
        elif first:
            log.warning("node %s is not a Node of the cluster (yet): its address claims are freed only by itself",
                        self.node)  # fmt: skip
        else:
            log.warning("the Node %s is gone from the cluster", self.node)
        for fn in listeners:
            fn(exists)

    def _failed(self, why: str) -> None:
        why = f"cannot follow the Node {self.node}: {why}"
        if why != self.last_error:
            log.error("cluster: %s", why)
        self.last_error = why

    def status_error(self) -> str | None:
        """The failure that holds now, and how the follower backs off."""
        return f"{self.last_error}{self.backoff.saying()}" if self.last_error else None
