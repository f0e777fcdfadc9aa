"""The daemon's current networks: the last good compile, kept per network when an edit breaks it."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import orjson

from netcomp.compile import Plan
from netcomp.errors import Diagnostic


@dataclass(frozen=True)
class Snapshot:
    generation: int
    networks: dict[str, dict[str, Any]]  # name -> conflist, as the delegates get it
    sources: dict[str, str]  # name -> intent file
    kept: frozenset[str]  # networks whose last good output is kept because their intent is broken
    diagnostics: tuple[Diagnostic, ...] = ()

    @property
    def degraded(self) -> bool:
        return any(d.is_error for d in self.diagnostics)


@dataclass
class State:
    _lock: threading.Lock = field(default_factory=threading.Lock)
    current: Snapshot = field(default_factory=lambda: Snapshot(0, {}, {}, frozenset()))

    def update(self, plan: Plan) -> Snapshot:
        """The new snapshot: every network of the plan, plus the previous version of each network whose intent
        (or whose whole file) failed this time."""
        with self._lock:
            prev = self.current
            networks = {a.network: orjson.loads(a.data) for a in plan.artifacts.values()}
            sources = {a.network: a.source for a in plan.artifacts.values()}
            kept = set()
            for name, conf in prev.networks.items():
                if name in networks:
                    continue
                if name in plan.failed_networks or prev.sources.get(name) in plan.failed_sources:
                    networks[name] = conf
                    sources[name] = prev.sources[name]
                    kept.add(name)
            self.current = Snapshot(prev.generation + 1, networks, sources, frozenset(kept), tuple(plan.diagnostics))
            return self.current

    def networks(self) -> dict[str, dict[str, Any]]:
        return self.current.networks
