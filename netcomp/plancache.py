"""A compiled plan remembered across runs, keyed by a fingerprint of everything compilation reads.

`netcomp compile` with nothing changed should cost what it takes to notice that: stat the inputs, compare the
output. The fingerprint covers netcomp's version, the settings, every intent file's stat (mtime, ctime, size,
inode), and the listing with stats of the static, plugin and template dirs; any difference means a real compile.
The cache sits in the output dir under a name no runtime loads, and is JSON (never pickle: a root process reads
it). A cache that is missing, stale or unreadable is simply ignored."""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from netcomp import __version__
from netcomp.compile import Artifact, Plan
from netcomp.config import Settings
from netcomp.errors import Diagnostic, SourceLocation
from netcomp.fsutil import atomic_write
from netcomp.render import BUILTIN_DIR

CACHE_NAME = ".netcomp-plan.cache"


def _stat(h: Any, path: str) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    h.update(f"{path}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\0{st.st_size}\0{st.st_ino}\0{st.st_mode}\n".encode())
    return True


def _dir(h: Any, directory: str) -> None:
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except OSError:
        h.update(f"{directory}\0absent\n".encode())
        return
    for e in entries:
        _stat(h, e.path)


def fingerprint(settings: Settings, files: Sequence[Path], *, offline: bool) -> str | None:
    """None when an input cannot be stat'ed (then there is nothing safe to reuse)."""
    h = hashlib.sha256()
    h.update(f"{__version__}\0{offline}\0{settings.model_dump_json()}\n".encode())
    for f in files:
        if not _stat(h, str(f)):
            return None
    for d in [*settings.staticDirs, *settings.pluginDirs, settings.templateDir, str(BUILTIN_DIR)]:
        _dir(h, d)
    return h.hexdigest()


def _diag(d: dict[str, Any]) -> Diagnostic:
    loc = SourceLocation(d["file"], d["line"] or 0, d["column"] or 0) if d["file"] is not None else None
    return Diagnostic(d["message"], loc, d["severity"], d["sourceLine"], tuple(d["notes"]))


class PlanCache:
    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self, fp: str | None) -> Plan | None:
        if fp is None:
            return None
        try:
            doc = orjson.loads(self.path.read_bytes())
            if doc.get("fingerprint") != fp:
                return None
            plan = Plan()
            for a in doc["artifacts"]:
                art = Artifact(a["network"], a["filename"], a["data"].encode(), a["source"], tuple(a["plugins"]))
                plan.artifacts[art.filename] = art
            plan.diagnostics = [_diag(d) for d in doc["diagnostics"]]
            plan.failed_networks = set(doc["failedNetworks"])
            plan.failed_sources = set(doc["failedSources"])
            return plan
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def save(self, fp: str | None, plan: Plan) -> None:
        if fp is None:
            return
        doc = {
            "fingerprint": fp,
            "artifacts": [
                {
                    "network": a.network,
                    "filename": a.filename,
                    "data": a.data.decode(),
                    "source": a.source,
                    "plugins": list(a.plugins),
                }
                for a in plan.artifacts.values()
            ],
            "diagnostics": [d.as_dict() for d in plan.diagnostics],
            "failedNetworks": sorted(plan.failed_networks),
            "failedSources": sorted(plan.failed_sources),
        }
        with contextlib.suppress(OSError):  # a cache that cannot be written only costs time next run
            atomic_write(self.path, orjson.dumps(doc), mode=0o600)
