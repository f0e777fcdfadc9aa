"""A compiled plan remembered across runs, keyed by a fingerprint of everything compilation reads (netcomp's
version, the settings, every intent file's stat, the static, plugin and template dirs' listings with stats), so
that a run with nothing changed costs a stat per input. It is JSON (never pickle: a root process reads it) in
the output dir under a name no runtime loads; one missing, stale or unreadable is ignored."""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat as stat_mod
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from netcomp import __version__
from netcomp.compiler.jinja import BUILTIN_DIR
from netcomp.compiler.plan import Artifact, Plan
from netcomp.errors import Diagnostic, SourceLocation
from netcomp.fsutil import TMP_SUFFIX, WRITE_FLAGS, fsync_dir, is_racy, publish, read_bounded
from netcomp.settings import Settings

CACHE_NAME = ".netcomp-plan.cache"
# The most read of the cache, or of an input hashed for its content (a plugin binary is one); what is larger is
# compiled rather than trusted.
MAX_BYTES = 256 << 20


@dataclass
class Fingerprint:
    """The digest of every input's stat, and the content digests of inputs too recent for their stat to be
    trusted (see fsutil.RACY_NS): those are compared by content before a cached plan is used."""

    digest: str
    racy: dict[str, str] = field(default_factory=dict)


class _Hasher:
    def __init__(self) -> None:
        self.h = hashlib.sha256()
        self.now = time.time_ns()
        self.racy: dict[str, str] = {}

    def stat(self, path: str) -> bool:
        try:
            st = os.stat(path)
        except OSError:
            return False
        self.h.update(f"{path}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\0{st.st_size}\0{st.st_ino}\0{st.st_mode}\n".encode())
        if is_racy(st, self.now) and stat_mod.S_ISREG(st.st_mode):
            digest = _content(path)
            if digest is None:
                return False
            self.racy[path] = digest
        return True

    def dir(self, directory: str) -> None:
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            self.h.update(f"{directory}\0absent\n".encode())
            return
        for e in entries:
            self.stat(e.path)


def _content(path: str) -> str | None:
    try:
        return hashlib.sha256(read_bounded(path, MAX_BYTES)).hexdigest()
    except OSError:
        return None


def fingerprint(settings: Settings, files: Sequence[Path], *, offline: bool, extra: str = "") -> Fingerprint | None:
    """None when an input cannot be read (then there is nothing safe to reuse). Take it before compiling: an
    input changed meanwhile then makes the next run compile again. `extra`: state compiling reads that is not a
    file (the ids claimed for TenantNetworks)."""
    hs = _Hasher()
    hs.h.update(f"{__version__}\0{offline}\0{settings.model_dump_json()}\0{extra}\n".encode())
    for f in files:
        if not hs.stat(str(f)):
            return None
    for d in [*settings.staticDirs, *settings.pluginDirs, settings.templateDir, str(BUILTIN_DIR)]:
        hs.dir(d)
    return Fingerprint(hs.h.hexdigest(), hs.racy)


def _diag(d: dict[str, Any]) -> Diagnostic:
    loc = SourceLocation(d["file"], d["line"] or 0, d["column"] or 0) if d["file"] is not None else None
    return Diagnostic(d["message"], loc, d["severity"], d["sourceLine"], tuple(d["notes"]))


class PlanCache:
    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self, fp: Fingerprint | None) -> Plan | None:
        if fp is None:
            return None
        try:
            doc = orjson.loads(read_bounded(self.path, MAX_BYTES, follow=False))
            if doc.get("fingerprint") != fp.digest:
                return None
            # Inputs that were racily clean when the plan was saved must still have the content it was made of.
            for path, digest in (doc.get("racy") or {}).items():
                if _content(path) != digest:
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

    def save(self, fp: Fingerprint | None, plan: Plan) -> None:
        if fp is None:
            return
        with contextlib.suppress(OSError):  # a cache that cannot be written only costs time next run
            self._write(self._pieces(fp, plan))

    @staticmethod
    def _pieces(fp: Fingerprint, plan: Plan) -> Iterator[bytes]:
        """The cache's JSON, an artifact at a time: the whole document at once (a dict and decoded strings per
        artifact, then its bytes) would be a peak that a daemon never gives back."""
        head = {"fingerprint": fp.digest, "racy": fp.racy}
        yield orjson.dumps(head)[:-1] + b',"artifacts":['
        for i, a in enumerate(plan.artifacts.values()):
            art = {
                "network": a.network,
                "filename": a.filename,
                "data": a.data.decode(),
                "source": a.source,
                "plugins": list(a.plugins),
            }
            yield (b"," if i else b"") + orjson.dumps(art)
        tail = {
            "diagnostics": [d.as_dict() for d in plan.diagnostics],
            "failedNetworks": sorted(plan.failed_networks),
            "failedSources": sorted(plan.failed_sources),
        }
        yield b"]," + orjson.dumps(tail)[1:]

    def _write(self, pieces: Iterator[bytes]) -> None:
        """As fsutil.atomic_write (temp file, fsync, rename, fsync the dir), written piece by piece."""
        tmp = self.path.with_name(f".{self.path.name}{TMP_SUFFIX}")
        fd = os.open(tmp, WRITE_FLAGS | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "wb", buffering=1 << 16, closefd=False) as f:
                for piece in pieces:
                    f.write(piece)
            os.fchmod(fd, 0o600)
            os.fsync(fd)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        finally:
            os.close(fd)
        publish(tmp, self.path)
        fsync_dir(self.path.parent)
