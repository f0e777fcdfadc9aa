"""The compiler as a long-lived object: it reads intent files and static CNI files, remembers what it rendered,
and on the next run redoes only what changed, so a daemon's recompile follows the size of the edit. Each intent
is *released* once rendered: only its name, its facts for the rules and a Document without data stay
(docs/architecture.md, "Incremental")."""

from __future__ import annotations

import functools
import gc
import hashlib
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, cast

from netcomp.cni.invoke import Runner
from netcomp.compiler.backends.backend import RenderInput
from netcomp.compiler.inputs import INTENT_SUFFIXES, NO_KEY, STATIC_SUFFIXES, StatKey, discover, stat_key
from netcomp.compiler.jinja import Templates
from netcomp.compiler.plan import Artifact, Plan
from netcomp.compiler.render import missing_devices, missing_plugins, render
from netcomp.compiler.statics import StaticFiles
from netcomp.errors import Diagnostic, IntentError, InternalError, SourceLocation
from netcomp.fsutil import is_racy, read_bounded
from netcomp.intent import danm, rules, tenancy
from netcomp.intent.intent import Intent
from netcomp.intent.model import Network, StaticSpec
from netcomp.intent.parse import parse_document
from netcomp.intent.source import MAX_BYTES, Document, forget_scalars, load_documents
from netcomp.intent.tenancy import Completion, TenantConfig
from netcomp.settings import Settings

__all__ = ["INTENT_SUFFIXES", "STATIC_SUFFIXES", "Compiler", "discover"]
VERSION_TIMEOUT = 10.0  # seconds a plugin's VERSION may take at compile time
_NO_FIELDS: Mapping[Any, Any] = {}  # the field map of every released native intent (never written to)


def _is_tenant_network(data: object) -> bool:
    return (
        isinstance(data, dict) and data.get("kind") == "TenantNetwork" and data.get("apiVersion") in danm.API_VERSIONS
    )


class _Released:
    """The Network of a released Intent: only its name stays. Reaching for anything else of it is a bug: the
    rules use the facts memoized on the Intent, and rendering again reads the file again."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    @property
    def metadata(self) -> _Released:
        return self

    @property
    def spec(self) -> NoReturn:
        raise InternalError(f"the model of intent {self.name!r} was released once compiled (compiler.py)")


def _release(intent: Intent, digest: bytes) -> Intent:
    """What stays of a compiled intent (see the module's docstring); `digest`: its file's bytes'."""
    intent.doc.release()
    intent.doc.source.release(digest)
    network = cast(Network, _Released(intent.network.metadata.name))
    fieldmap = intent.fieldmap or _NO_FIELDS
    meta = intent.meta or _NO_FIELDS
    return Intent(network, intent.doc, intent.format, fieldmap, None, intent.namespace, meta, intent.memo)


@dataclass(slots=True)
class _Rendered:
    intent: Intent  # released
    static_id: str | None  # the networkID of an intent that names a static file
    static_key: object  # that file's stat when rendered (None: not found or not readable)
    artifact: Artifact | None
    diagnostics: tuple[Diagnostic, ...] = ()


@dataclass(slots=True)
class _File:
    key: StatKey
    renders: tuple[_Rendered, ...]  # its intents (released), rendered
    diagnostics: tuple[Diagnostic, ...]
    failed: bool  # the file could not be read or parsed, or one of its documents has an error
    # The content's digest when the file was racily clean (fsutil.RACY_NS): its stat alone cannot be trusted.
    racy: bytes | None = None
    statics: bool = False  # one of its intents is a static file's (looked at again when static dirs change)
    # DANM's TenantNetworks (whole: parsed by _tenants once the TenantConfig is known), and the TenantConfigs.
    tenant_docs: tuple[Document, ...] = ()
    configs: tuple[tuple[TenantConfig, Document], ...] = ()


# A TenantNetwork's last compile: its document, the completion it was parsed with, its rendering (None: it did
# not parse), its diagnostics.
_TenantEntry = tuple[Document, Completion | None, _Rendered | None, list[Diagnostic]]


@dataclass(slots=True)
class _Run:
    """What one compile() shares between its steps."""

    on_artifact: Callable[[Artifact], None] | None
    statics_unchanged: bool  # a hint that touches no static dir: static files are as they were
    listing: dict[str, set[str]] = field(default_factory=dict)  # each static dir is listed once per compile


class Compiler:
    """Compile intent files into a Plan, incrementally. Not thread-safe: one owner calls compile()."""

    def __init__(self, settings: Settings, *, offline: bool = True) -> None:
        """`settings` paths are used as they are: resolve them under a root first (Settings.rooted)."""
        self.settings = settings
        self.offline = offline
        self._statics = StaticFiles(settings.staticDirs)
        # What the installed plugins say they speak (VERSION), for static files' cniVersion.
        self._plugins = Runner(settings.pluginDirs, timeout=VERSION_TIMEOUT)
        # Claims a TenantConfig's ids for the whole cluster (the daemon's, ipam.idclaims.IdAllocator.claim); None:
        # compiling away from the node (`netcomp validate`), the first id of a range is shown, nothing claimed.
        self.claim_ids: tenancy.ClaimIds | None = None
        # Whether a host device is on this machine; None: not checked.
        self.device_present: Callable[[str], bool] | None = None
        self.reset_templates()

    def reset_templates(self) -> None:
        """Load templates afresh and forget every rendering (every file is read again: intents are released)."""
        tdir = Path(self.settings.templateDir)
        self.templates = Templates(tdir if tdir.is_dir() else None)
        self._files: dict[str, _File] = {}
        self._names: list[str] = []
        self._tenant_memo: dict[tuple[str, int], _TenantEntry] = {}

    # ------------------------------------------------------------------------------------------ files

    def _read(self, path: Path, known: _File | None, run: _Run) -> _File:
        try:
            st = os.stat(path)
            key = stat_key(st)
            same = known if known is not None and known.key == key else None
            raw = None if same is not None and same.racy is None else read_bounded(path, MAX_BYTES)
            digest = hashlib.sha256(raw).digest() if raw is not None else None
            racy = digest if is_racy(st, time.time_ns()) else None
            if same is not None and digest is not None:
                if same.racy == digest:
                    same.racy = racy  # the same content; trusted by stat alone once it is old enough
                else:
                    same = None
            if same is not None and (run.statics_unchanged or not same.statics or not self._moved(same, run)):
                return same
            if raw is None:  # as it was, but a static file one of its intents names changed: read and render again
                raw = read_bounded(path, MAX_BYTES)
        except OSError as e:
            return _File(NO_KEY, (), (Diagnostic(f"cannot read: {e.strerror}", SourceLocation(str(path))),), True)
        return self._compile_file(str(path), key, raw, digest or hashlib.sha256(raw).digest(), racy, run)

    def _compile_file(self, name: str, key: StatKey, raw: bytes, digest: bytes, racy: bytes | None, run: _Run) -> _File:
        """Parse, take facts, render and release each intent of one file (`digest`: its bytes')."""
        try:
            docs = load_documents(name, raw)
        except IntentError as e:
            return _File(key, (), tuple(e.diagnostics), True, racy)
        renders: list[_Rendered] = []
        diags: list[Diagnostic] = []
        statics = False
        tenant_docs: list[Document] = []
        configs: list[tuple[TenantConfig, Document]] = []
        for doc in docs:
            if tenancy.is_tenant_config(doc.data):
                config, ds = tenancy.parse_config(doc)
                diags.extend(ds)
                if config is not None:
                    configs.append((config, doc))
                continue
            if _is_tenant_network(doc.data):
                tenant_docs.append(doc)  # parsed by _tenants(), once the TenantConfig is known
                continue
            intent, ds = parse_document(doc)
            diags.extend(ds)
            if intent is None:
                continue
            rules.check([intent])  # memoizes on the intent the facts the rules across intents use
            done = self._render(intent, run)
            done.intent = _release(intent, digest)
            statics = statics or done.static_id is not None
            renders.append(done)
        failed = any(d.is_error for d in diags)
        return _File(key, tuple(renders), tuple(diags), failed, racy, statics, tuple(tenant_docs), tuple(configs))

    def _moved(self, known: _File, run: _Run) -> bool:
        """Whether a static file one of the file's intents names is not the one it was rendered with."""
        return any(self._stale(done, run) for done in known.renders)

    def _stale(self, done: _Rendered, run: _Run) -> bool:
        """Whether the static file a rendering's intent names is not the one it was rendered with."""
        if done.static_id is None:
            return False
        path = self._statics.find(done.static_id, run.listing)
        try:
            skey = stat_key(os.stat(path)) if path is not None else None
        except OSError:
            skey = None
        return skey != done.static_key

    def _render(self, intent: Intent, run: _Run) -> _Rendered:
        """One intent (not yet released) to its artifact, offered to the run's on_artifact (_Run: an Output's Stager
        starts writing it) as soon as it is made: what turns out to fail is not published."""
        spec = intent.network.spec
        static_id = spec.networkID if isinstance(spec, StaticSpec) and intent.inline_config is None else None
        static = None
        skey: object = None
        if static_id is not None:
            skey, static, problem = self._statics.load(intent, static_id, run.listing, offline=self.offline)
            if problem is not None:
                return _Rendered(intent, static_id, skey, None, (problem,))
        out = _Rendered(intent, static_id, skey, None)
        try:
            art, warnings = render(intent, self.templates, RenderInput(self.settings.cniVersion, static))
        except IntentError as e:
            out.diagnostics = tuple(e.diagnostics)
            return out
        if static_id is not None and static is not None:
            versions = self._statics.version_warning(intent, static_id, static, self._plugins.supported_versions)
            warnings += [versions] if versions is not None else []
        out.artifact, out.diagnostics = art, tuple(warnings)
        if run.on_artifact is not None:
            run.on_artifact(art)  # the disk can start on it now
        return out

    # ------------------------------------------------------------------------------------------ compile

    def compile(
        self,
        files: Sequence[Path] | None = None,
        *,
        changed: Iterable[str | Path] | None = None,
        on_artifact: Callable[[Artifact], None] | None = None,
    ) -> Plan:
        """Compile `files` (default: discovered from the configured intent dirs). With `changed`, only those
        files are looked at again; the others are taken from the last run as they were. `on_artifact` sees each
        artifact as soon as it is rendered (an Output's Stager starts writing it), before the plan is complete."""
        # Compiling builds many objects and no garbage cycles: the cyclic GC would only rescan the growing heap.
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return self._compile(files, changed, on_artifact)
        finally:
            forget_scalars()
            if was_enabled:
                # What a compile keeps lives until the next one: out of the GC's sight, later collections skip it.
                gc.freeze()
                gc.enable()

    def _compile(
        self,
        files: Sequence[Path] | None,
        changed: Iterable[str | Path] | None,
        on_artifact: Callable[[Artifact], None] | None,
    ) -> Plan:
        try:
            files = list(files) if files is not None else discover([Path(d) for d in self.settings.intent_layers()])
        except IntentError as e:
            return Plan(diagnostics=list(e.diagnostics))
        plan = Plan()
        recheck = None if changed is None else {str(p) for p in changed}
        static_dirs = [d.rstrip("/") + "/" for d in self.settings.staticDirs]
        statics_unchanged = recheck is not None and not any(
            c.startswith(d) or c + "/" == d for c in recheck for d in static_dirs
        )
        # 1. Files: read what changed (all of them without a hint; stat decides), render and release them.
        run = _Run(on_artifact, statics_unchanged)
        self._read_files(files, recheck, run)
        renders = [r for e in self._files.values() for r in e.renders]
        plan.diagnostics = [d for e in self._files.values() if e.diagnostics for d in e.diagnostics]
        plan.failed_sources = {n for n, e in self._files.items() if e.failed}
        # 1b. TenantNetworks, completed from the TenantConfig (its ids claimed once for the cluster), rendered.
        tenant_renders, tenant_diags = self._tenants(run)
        renders += tenant_renders
        plan.diagnostics += tenant_diags
        plan.failed_sources |= {str(d.location.file) for d in tenant_diags if d.is_error and d.location}
        plan.tenant_networks = self.tenant_networks()
        intents = [r.intent for r in renders]
        # 2. Rules across intents, on the facts each intent memoized.
        failing: set[int] = set()  # id() of intents with an error of their own
        for intent, diag in rules.check(intents):
            plan.diagnostics.append(diag)
            if diag.is_error:
                failing.add(id(intent))
        # 3. The renderings, in the order of the intents.
        good: list[tuple[Intent, Artifact]] = []
        for r in renders:
            if r.diagnostics:
                plan.diagnostics.extend(r.diagnostics)
            if r.artifact is None:
                failing.add(id(r.intent))
            else:
                good.append((r.intent, r.artifact))
        # 4. Plugins present? Host devices there (only when asked: `netcomp validate` and `compile`; the daemon
        # leaves it to `netcomp doctor` and the ADD)?
        missing = missing_plugins(good, self._plugin_lookup(), self.settings.pluginDirs, offline=self.offline)
        if self.device_present is not None:
            missing += missing_devices(good, self.device_present, offline=self.offline)
        listed: set[int] = set()
        for intent, diag in missing:
            if id(diag) not in listed:  # one message per plugin type or device
                listed.add(id(diag))
                plan.diagnostics.append(diag)
            if diag.is_error:
                failing.add(id(intent))
        # 5. The plan. A name that failed anywhere (say, defined twice) is left out entirely: a daemon keeps its
        # last good output rather than guess which definition was meant.
        plan.failed_networks = {it.name for it in intents if id(it) in failing}
        plan.artifacts = {a.filename: a for it, a in good if it.name not in plan.failed_networks}
        return plan

    def _tenants(self, run: _Run) -> tuple[list[_Rendered], list[Diagnostic]]:
        """The TenantNetworks of every file, each completed from the TenantConfig in use (intent/tenancy.py),
        parsed and rendered; an unchanged document with an unchanged completion keeps its rendering (unless the
        static file it names changed)."""
        configs = [c for e in self._files.values() for c in e.configs]
        config, diags = tenancy.pick_config(configs)
        claim = self.claim_ids or tenancy.dry_claims()
        offline = "compiled away from the node: the id shown is not claimed (the daemon claims one)"
        renders: list[_Rendered] = []
        memo: dict[tuple[str, int], _TenantEntry] = {}
        for name, f in self._files.items():
            for i, doc in enumerate(f.tenant_docs):
                completion: Completion | None = None
                ds: list[Diagnostic] = []
                if config is not None:
                    completion, ds = tenancy.complete(doc, config, claim)
                    if self.claim_ids is None and completion is not None and completion.vni is not None:
                        ds.append(doc.diagnostic(offline, ("spec", "Options"), key=True, severity="warning"))
                prev = self._tenant_memo.get((name, i))
                entry: _TenantEntry
                if (
                    prev is not None
                    and prev[0] is doc
                    and prev[1] == completion
                    and not ds
                    and (prev[2] is None or not self._stale(prev[2], run))
                ):
                    entry = prev
                elif ds and any(d.is_error for d in ds):
                    entry = (doc, completion, None, ds)
                else:
                    intent, pds = danm.parse(doc, completion)
                    if intent is not None and config is None and intent.network.spec.type in tenancy.DYNAMIC:
                        # A tenant does not choose a host's device: without the admin's TenantConfig there is
                        # nothing to give it one (DANM refused such a TenantNetwork too).
                        why = f"a TenantNetwork of type {intent.network.spec.type} takes its device from the "
                        why += "TenantConfig, and none is in use"
                        intent, pds = None, [*pds, doc.diagnostic(why, ("spec",), key=True)]
                    done = None
                    if intent is not None:
                        rules.check([intent])  # the facts the rules across intents use, memoized
                        done = self._render(intent, run)
                    entry = (doc, completion, done, [*ds, *pds])
                memo[(name, i)] = entry
                diags.extend(entry[3])
                if entry[2] is not None:
                    renders.append(entry[2])
        self._tenant_memo = memo
        return renders, diags

    def tenant_networks(self) -> dict[str, str] | None:
        """Every TenantNetwork the last compile read (namespace/name -> the uid of its object, "" for a file
        written by hand); None when a file could not be read or parsed (one might have held more)."""
        out: dict[str, str] = {}
        for f in self._files.values():
            if f.failed and not f.renders and not f.tenant_docs:
                return None
            for doc in f.tenant_docs:
                meta = doc.data.get("metadata")
                if isinstance(meta, dict):
                    out[f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"] = str(meta.get("uid") or "")
        return out

    def _read_files(self, files: Sequence[Path], recheck: set[str] | None, run: _Run) -> None:
        """Read the files (only those in `recheck` when the list of files is the one of the last run, and those
        naming a static file when a static dir may have changed). Keeps the result in self._files."""
        names = [str(p) for p in files]
        old_files = self._files
        patch = recheck is not None and names == self._names  # the same files, some of them edited
        if patch:
            assert recheck is not None
            new_files = dict(old_files)
            todo = [n for n in recheck if n in old_files]
            if not run.statics_unchanged:
                todo += [n for n, e in old_files.items() if e.statics and n not in recheck]
            if len(todo) > 1:  # in the files' order, as a full run reads them
                order = {n: i for i, n in enumerate(names)}
                todo.sort(key=order.__getitem__)
            for name in todo:
                new_files[name] = self._read(Path(name), old_files[name], run)
        else:
            new_files = {
                name: self._read(path, old_files.get(name), run) for name, path in zip(names, files, strict=True)
            }
        self._files, self._names = new_files, names

    def _plugin_lookup(self) -> Callable[[str], bool]:
        dirs = [Path(d) for d in self.settings.pluginDirs]

        @functools.cache
        def installed(name: str) -> bool:
            return any(os.access(d / name, os.X_OK) and (d / name).is_file() for d in dirs)

        return installed
