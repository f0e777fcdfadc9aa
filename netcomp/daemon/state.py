"""The daemon's current networks: the last good compile, kept per network when an edit breaks it; and that last
good state on disk (the settings in force and every network served, `"kind": "netcompStateV1"`), so that a
restart is a reload (docs/reliability.md, "The last good state")."""

from __future__ import annotations

import hashlib
import logging
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from netcomp.compiler.plan import Plan
from netcomp.errors import Diagnostic
from netcomp.fsutil import atomic_write, read_bounded
from netcomp.settings import Settings

log = logging.getLogger("netcomp.daemon")
STATE_KIND = "netcompStateV1"
MAX_STATE_BYTES = 256 << 20  # far above the state of the largest node (docs/benchmarks.md)


@dataclass(frozen=True)
class Snapshot:
    generation: int
    networks: dict[str, dict[str, Any]]  # name -> conflist, as the delegates get it
    sources: dict[str, str]  # name -> intent file
    kept: frozenset[str]  # networks whose last good output is kept because their intent is broken
    diagnostics: tuple[Diagnostic, ...] = ()
    # The networks (the very objects) and their sources are the previous snapshot's: nothing served changed.
    same_networks: bool = False

    @property
    def degraded(self) -> bool:
        return any(d.is_error for d in self.diagnostics)


def _share_strings(node: Any) -> None:
    """Interns the strings of a parsed conflist in place: conflists repeat most of their strings (versions,
    plugin types, modes...), and a node holds many."""
    items = node.items() if isinstance(node, dict) else enumerate(node)
    for k, v in items:
        if type(v) is str:
            node[k] = sys.intern(v)
        elif isinstance(v, dict | list):
            _share_strings(v)


@dataclass
class State:
    _lock: threading.Lock = field(default_factory=threading.Lock)
    current: Snapshot = field(default_factory=lambda: Snapshot(0, {}, {}, frozenset()))
    # The compiled bytes each network of the current snapshot was parsed from: an artifact that did not change
    # is not parsed again (an edit of one intent of 10,000 parses one conflist, not 10,000).
    _compiled: dict[str, bytes] = field(default_factory=dict)

    def _parse(self, prev: Snapshot, name: str, data: bytes) -> dict[str, Any]:
        known = self._compiled.get(name)
        if known is not None and (known is data or known == data) and name in prev.networks:
            return prev.networks[name]
        conf: dict[str, Any] = orjson.loads(data)
        _share_strings(conf)
        return conf

    def update(self, plan: Plan) -> Snapshot:
        """The new snapshot: every network of the plan, plus the previous version of each network whose intent
        (or whose whole file) failed this time."""
        with self._lock:
            prev = self.current
            networks = {a.network: self._parse(prev, a.network, a.data) for a in plan.artifacts.values()}
            self._compiled = {a.network: a.data for a in plan.artifacts.values()}
            sources = {a.network: a.source for a in plan.artifacts.values()}
            kept = set()
            for name, conf in prev.networks.items():
                if name in networks:
                    continue
                if name in plan.failed_networks or prev.sources.get(name) in plan.failed_sources:
                    networks[name] = conf
                    sources[name] = prev.sources[name]
                    kept.add(name)
            same = (
                sources == prev.sources
                and networks.keys() == prev.networks.keys()
                and all(conf is prev.networks[name] for name, conf in networks.items())
            )
            self.current = Snapshot(
                prev.generation + 1, networks, sources, frozenset(kept), tuple(plan.diagnostics), same
            )
            return self.current

    def networks(self) -> dict[str, dict[str, Any]]:
        return self.current.networks


@dataclass(frozen=True)
class Saved:
    settings: Settings
    networks: dict[str, dict[str, Any]]
    sources: dict[str, str]

    def snapshot(self) -> Snapshot:
        return Snapshot(0, dict(self.networks), dict(self.sources), frozenset())


class StateFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        # The digest of what the file holds (not its bytes, megabytes on a large node), and the settings and
        # snapshot generation it was last written (or found equal) for.
        self._written: bytes | None = None
        self._saved: tuple[Settings, int] | None = None

    def load(self) -> Saved | None:
        """What the last daemon served; None when there is no state file or it cannot be used (logged)."""
        try:
            data = read_bounded(self.path, MAX_STATE_BYTES, follow=False)
        except FileNotFoundError:
            return None
        except OSError as e:
            log.error("cannot read the state file %s: %s", self.path, e.strerror)
            return None
        try:
            doc = orjson.loads(data)
            if doc.get("kind") != STATE_KIND:
                raise ValueError(f"its kind {doc.get('kind')!r} is not {STATE_KIND}")
            saved = Saved(Settings.model_validate(doc["settings"]), dict(doc["networks"]), dict(doc["sources"]))
        except (ValueError, KeyError, TypeError, AttributeError, ValidationError) as e:
            log.error("the state file %s cannot be used (%s); starting without a last good state", self.path, e)
            return None
        self._written = hashlib.sha256(data).digest()
        return saved

    def save(self, settings: Settings, snap: Snapshot) -> None:
        if snap.same_networks and self._saved == (settings, snap.generation - 1):
            self._saved = (settings, snap.generation)  # what the file holds is still what is served
            return
        in_force = settings.model_dump(mode="json")
        doc = {"kind": STATE_KIND, "settings": in_force, "networks": snap.networks, "sources": snap.sources}
        data = orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)
        digest = hashlib.sha256(data).digest()
        if digest != self._written:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                atomic_write(self.path, data, mode=0o600)
            except OSError as e:  # serving goes on; only a restart with broken inputs would miss it
                log.error("cannot write the state file %s: %s", self.path, e.strerror)
                return
            self._written = digest
        self._saved = (settings, snap.generation)
