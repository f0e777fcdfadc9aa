"""This node's Node object, followed: whether the node is a Node of the cluster decides whether other nodes may
free its address claims once it is gone (ipam/allocator.py). A daemon usually starts before its kubelet
registers the Node, so the one Node is listed by field selector, then watched."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from netcomp.kube.following import Backoff, Follower

log = logging.getLogger("netcomp.kube")


class NodeWatch(Follower):
    """`core`: the client's CoreV1Api. A function given to on_change is told whether the Node exists whenever
    that changes (from the follower's thread), and once it is first known."""

    def __init__(
        self, core: Any, node: str, one_line: Callable[[Exception], str], backoff: Backoff | None = None
    ) -> None:
        super().__init__(f"the Node {node}", core, "list_node", explain=one_line, backoff=backoff, timeout=30,
                         loads=json.loads, field_selector=f"metadata.name={node}")  # fmt: skip
        self.node = node
        self.exists: bool | None = None  # None until the API server has said
        self.known = self.synced  # whether the Node exists is known once it was listed
        self._listeners: list[Callable[[bool], None]] = []
        self._lock = threading.Lock()
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
        threading.Thread(target=self.follow, args=(stop,), name="kube-node", daemon=True).start()

    def listed(self, items: list[Any]) -> None:
        self._set(bool(items))

    def seen(self, kind: str, obj: dict[str, Any]) -> None:
        self._set(kind != "DELETED")

    def _set(self, exists: bool) -> None:
        with self._lock:
            if exists == self.exists:
                return
            first, self.exists = self.exists is None, exists
            listeners = list(self._listeners)
        if exists:
            log.info("node %s is a Node of the cluster", self.node)
        elif first:
            log.warning("node %s is not a Node of the cluster (yet): its address claims are freed only by itself",
                        self.node)  # fmt: skip
        else:
            log.warning("the Node %s is gone from the cluster", self.node)
        for fn in listeners:
            fn(exists)
