"""The compiler's memory handed from the child coldstart.py forks to the daemon, pickled over a pipe (never
through a file). Our types are pickled as tuples of their fields (a dispatch table: cheaper than the default
pickling of slotted dataclasses); the plan's artifacts are named, not copied."""

from __future__ import annotations

import contextlib
import copyreg
import io
import pickle
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from netcomp.compiler.compiler import Compiler, _File, _Released, _Rendered
from netcomp.compiler.output import Output, Stager
from netcomp.compiler.plan import Artifact, Plan
from netcomp.errors import Diagnostic, HostError, SourceLocation
from netcomp.intent import rules
from netcomp.intent.intent import Intent
from netcomp.intent.source import Document, SourceText


def _intent(
    network: Any, doc: Document, fmt: str, fieldmap: Any, namespace: str | None, meta: Any, memo: dict[str, Any]
) -> Intent:
    return Intent(network, doc, fmt, fieldmap, None, namespace, meta, memo)


def _source(name: str, digest: bytes | None) -> SourceText:
    src = SourceText(name, None)
    src._digest = digest
    return src


_TABLE: dict[type, Any] = {
    **copyreg.dispatch_table,
    Intent: lambda i: (_intent, (i.network, i.doc, i.format, i.fieldmap, i.namespace, i.meta, i.memo)),
    Document: lambda d: (Document, (None, d.source, d.index)),  # released: its data is not kept
    SourceText: lambda s: (_source, (s.name, s._digest)),
    _Released: lambda r: (_Released, (r.name,)),
    _File: lambda f: (_File, (f.key, f.renders, f.diagnostics, f.failed, f.racy, f.statics)),
    _Rendered: lambda r: (_Rendered, (r.intent, r.static_id, r.static_key, r.artifact, r.diagnostics)),
    rules._Link: lambda f: (rules._Link, (f.device, f.vlan, f.vni, f.link, f.master, f.spans)),
    Artifact: lambda a: (Artifact, (a.network, a.filename, a.data, a.source, a.plugins)),
    Diagnostic: lambda d: (Diagnostic, (d.message, d.location, d.severity, d.source_line, d.notes)),
    SourceLocation: lambda loc: (SourceLocation, (loc.file, loc.line, loc.column)),
}


class _Pickler(pickle.Pickler):
    dispatch_table = _TABLE

    def __init__(self, out: io.BytesIO, shared: Mapping[str, Artifact]) -> None:
        super().__init__(out, protocol=pickle.HIGHEST_PROTOCOL)
        self.shared = shared

    def persistent_id(self, obj: Any) -> str | None:
        # The taker has the plan's artifacts (its plan), and so shares their bytes.
        if type(obj) is Artifact and self.shared.get(obj.filename) is obj:
            return obj.filename
        return None


class _Unpickler(pickle.Unpickler):
    def __init__(self, data: bytes, shared: Mapping[str, Artifact]) -> None:
        super().__init__(io.BytesIO(data))
        self.shared = shared

    def persistent_load(self, pid: Any) -> Artifact:
        return self.shared[pid]


def _dumps(obj: Any, shared: Mapping[str, Artifact]) -> bytes:
    out = io.BytesIO()
    _Pickler(out, shared).dump(obj)
    return out.getvalue()


def export(compiler: Compiler, plan: Plan) -> bytes:
    """What the compiler remembers, pickled; the plan's artifacts by name."""
    return _dumps((compiler._files, compiler._names), plan.artifacts)


def adopt(compiler: Compiler, state: bytes, artifacts: Mapping[str, Artifact]) -> None:
    """A fresh compiler takes over what export() gave (with the artifacts of the plan it was made with)."""
    compiler._files, compiler._names = _Unpickler(state, artifacts).load()


class InDaemon(Exception):
    """The compile must be done in the daemon (a TenantConfig id to claim)."""


def _claim_in_daemon(network: str, uid: str, profiles: Any) -> NoReturn:
    raise InDaemon(network)


def answer(make_compiler: Callable[[], Compiler], output: Output, files: Sequence[Path], stage: bool) -> bytes:
    """The child's work: compile `files` (staging the artifacts' temp files), and say so: b"K" and the pickled
    (plan, what was staged, the temp files written, export()); b"D" when it must be done in the daemon
    (TenantNetworks); or b"E" and what went wrong."""
    staged: Stager | None = None
    try:
        # The daemon's signal handlers stay: they only set flags, here in a copy nobody reads. A SIGTERM that
        # reaches both (systemd signals the whole unit) lets the compile finish, as it did in the daemon.
        if stage:
            try:
                staged = output.stager()
            except HostError:
                staged = None  # Output.apply reports it
        compiler = make_compiler()
        compiler.claim_ids = _claim_in_daemon
        try:
            plan = compiler.compile(files, on_artifact=staged.offer if staged is not None else None)
        except InDaemon:
            plan = None
        if plan is None or any(f.tenant_docs or f.configs for f in compiler._files.values()):
            # DANM's TenantNetworks: their ids are claimed through the daemon's store, and their documents kept
            # whole, which the hand-over does not carry. The daemon compiles them itself.
            if staged is not None:
                staged.discard()
            return b"D"
        written: dict[str, str] = {}
        if staged is not None:
            staged.wait()
            written = {name: str(p) for name, p in staged.written.items() if isinstance(p, Path)}
        offered = staged.staged if staged is not None else {}
        return b"K" + _dumps((plan, offered, written, export(compiler, plan)), {})
    except BaseException:
        if staged is not None:
            with contextlib.suppress(Exception):
                staged.discard()  # the daemon compiles again and stages its own
        return b"E" + traceback.format_exc(limit=8).encode()
