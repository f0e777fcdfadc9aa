"""Ignores input another writer made (another node's AddressBlock, a tenant's Service, the kubelet's files) for
what it claims: named once in the log with its writers (managedFields), counted in `netcomp_foreign_ignored_total`
by kind, never raised, so that a bad object costs its writer, never the watch. The bounds on foreign JSON are
cni/spec.py's (loads_foreign)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any, Protocol

from netcomp.errors import printable

log = logging.getLogger("netcomp.foreign")
_SEEN_LIMIT = 4096  # (kind, name, version, why) logged already; forgotten all at once past this
_seen: set[tuple[str, str, str, str]] = set()
_lock = threading.Lock()


class _Count(Protocol):
    def inc(self, amount: float = 1) -> None: ...


class _Counter(Protocol):
    def labels(self, *values: str) -> _Count: ...


_counter: _Counter | None = None


def count_into(counter: _Counter | None) -> None:
    """Where ignored objects are counted from now on (the daemon's Metrics.foreign_ignored), by kind."""
    global _counter
    _counter = counter


def writers(obj: Mapping[str, Any] | None) -> str:
    """Who wrote an API object, as its managedFields say (the field managers, at most three), or 'unknown'."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    fields = meta.get("managedFields") if isinstance(meta, Mapping) else None
    names: list[str] = []
    if isinstance(fields, list):
        for f in fields[:16]:
            m = f.get("manager") if isinstance(f, dict) else None
            if isinstance(m, str) and m and m not in names:
                names.append(m[:64])
    return ", ".join(names[:3]) or "unknown"


def ignore(kind: str, name: str, why: str, obj: Mapping[str, Any] | None = None, version: str = "") -> None:
    """Ignore one foreign object (or file) for what it claims: logged and counted once per (kind, name, version,
    why); `obj` names its writers when it is an API object. Never raises."""
    if isinstance(obj, Mapping) and not version:
        meta = obj.get("metadata")
        version = str(meta.get("resourceVersion", ""))[:32] if isinstance(meta, dict) else ""
    key = (kind, printable(name)[:256], version, why[:512])
    with _lock:
        if key in _seen:
            return
        if len(_seen) >= _SEEN_LIMIT:
            _seen.clear()
        _seen.add(key)
    if _counter is not None:
        _counter.labels(kind).inc()
    log.warning("ignoring %s %s (written by %s): %s", kind, key[1], writers(obj), printable(key[3]))
