"""The compiler as a long-lived object: reads intent files and static CNI files, remembers what it parsed and
rendered, and on the next run redoes only what changed (the daemon recompiles a 10,000-intent node on every
edit; work must follow the size of the edit, not of the node)."""

from __future__ import annotations

import gc
import hashlib
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from netcomp.cni import spec as cnispec
from netcomp.compiler.backends.backend import RenderInput, StaticConfig
from netcomp.compiler.jinja import Templates
from netcomp.compiler.plan import Artifact, Plan
from netcomp.compiler.render import missing_plugins, render
from netcomp.errors import Diagnostic, IntentError, SourceLocation
from netcomp.fsutil import is_racy
from netcomp.intent import danm, rules, tenancy
from netcomp.intent.intent import Intent
from netcomp.intent.model import StaticSpec
from netcomp.intent.parse import parse_document
from netcomp.intent.source import Document, load_documents
from netcomp.intent.tenancy import Completion, TenantConfig
from netcomp.settings import Settings

INTENT_SUFFIXES = (".yaml", ".yml")
STATIC_SUFFIXES = (".conflist", ".conf", ".json")
StatKey = tuple[int, int, int, int]


def _is_tenant_network(data: object) -> bool:
    return (
        isinstance(data, dict) and data.get("kind") == "TenantNetwork" and data.get("apiVersion") in danm.API_VERSIONS
    )


def _stat_key(st: os.stat_result) -> StatKey:
    return (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino)


def discover(layers: Sequence[Path]) -> list[Path]:
    """Intent files of layered dirs (or plain files): same file name in a later dir shadows an earlier one
    (netplan's rule); the result is sorted by file name, so load order never depends on the dir. Missing layers
    are empty."""
    chosen: dict[str, Path] = {}
    for layer in layers:
        if layer.is_dir():
            try:
                names = sorted(os.listdir(layer))
            except OSError as e:
                raise IntentError(
                    [Diagnostic(f"cannot list directory: {e.strerror}", SourceLocation(str(layer)))]
                ) from None
            for name in names:
                if name.startswith(".") or not name.endswith(INTENT_SUFFIXES):
                    continue
                chosen[name] = layer / name
        elif layer.exists():
            chosen[layer.name] = layer
        # A configured layer that does not exist is simply empty (most nodes have no /run/netcomp/networks.d).
    return [chosen[n] for n in sorted(chosen)]


@dataclass(slots=True)
class _File:
    key: StatKey
    intents: list[Intent]
    diagnostics: list[Diagnostic]
    failed: bool  # the file could not be read or parsed, or one of its documents has an error
    # The content's digest when the file was racily clean (fsutil.RACY_NS): its stat alone cannot be trusted.
    racy: bytes | None = None
    # DANM's TenantNetworks, parsed once the TenantConfig is known (_tenants), and the TenantConfigs.
    tenant_docs: list[Document] = field(default_factory=list)
    configs: list[tuple[TenantConfig, Document]] = field(default_factory=list)


@dataclass(slots=True)
class _Rendered:
    intent: Intent
    static_key: object
    artifact: Artifact | None
    diagnostics: list[Diagnostic] = field(default_factory=list)


class Compiler:
    """Compile intent files into a Plan, incrementally. Not thread-safe: one owner calls compile()."""

    def __init__(self, settings: Settings, *, offline: bool = True, templates: Templates | None = None) -> None:
        """`settings` paths are used as they are: resolve them under a root first (Settings.rooted)."""
        self.settings = settings
        self.offline = offline
        tdir = Path(settings.templateDir)
        self.templates = templates or Templates(tdir if tdir.is_dir() else None)
        self._files: dict[str, _File] = {}
        self._names: list[str] = []
        self._rendered: dict[int, _Rendered] = {}
        self._statics: dict[str, tuple[StatKey, StaticConfig | Diagnostic]] = {}
        self._tenant_memo: dict[
            tuple[str, int], tuple[Document, Completion | None, Intent | None, list[Diagnostic]]
        ] = {}
        # Claims a TenantConfig's ids for the whole cluster (the daemon's, ipam.tenants.IdAllocator.claim); None:
        # compiling away from the node (`netcomp validate`), the first id of a range is shown, nothing claimed.
        self.claim_ids: tenancy.Claim | None = None

    def reset_templates(self) -> None:
        """An admin template changed: load templates afresh and render everything again."""
        tdir = Path(self.settings.templateDir)
        self.templates = Templates(tdir if tdir.is_dir() else None)
        self._rendered = {}

    def layers(self) -> list[Path]:
        return [Path(d) for d in self.settings.intent_layers()]

    # ------------------------------------------------------------------------------------------ files

    def _read(self, path: Path, known: _File | None) -> _File:
        name = str(path)
        try:
            st = os.stat(path)
            if known is not None and known.key == _stat_key(st) and known.racy is None:
                return known
            raw = path.read_bytes()
        except OSError as e:
            return _File((0, 0, 0, 0), [], [Diagnostic(f"cannot read: {e.strerror}", SourceLocation(name))], True)
        digest = hashlib.sha256(raw).digest() if is_racy(st, time.time_ns()) else None
        same_stat = known is not None and known.key == _stat_key(st)
        if same_stat and known is not None and known.racy == hashlib.sha256(raw).digest():
            known.racy = digest  # the same content; trusted by stat alone once it is old enough
            return known
        try:
            docs = load_documents(name, raw)
        except IntentError as e:
            return _File(_stat_key(st), [], e.diagnostics, True, digest)
        intents: list[Intent] = []
        diags: list[Diagnostic] = []
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
            if intent is not None:
                intents.append(intent)
        return _File(_stat_key(st), intents, diags, any(d.is_error for d in diags), digest, tenant_docs, configs)

    def _static(
        self, intent: Intent, listing: dict[str, set[str]]
    ) -> tuple[object, StaticConfig | None, Diagnostic | None]:
        spec = intent.network.spec
        assert isinstance(spec, StaticSpec)
        for d in self.settings.staticDirs:
            present = listing.get(d)
            if present is None:  # each static dir is listed once per compile
                try:
                    present = listing[d] = set(os.listdir(d))
                except OSError:
                    present = listing[d] = set()
            for suffix in STATIC_SUFFIXES:
                fname = spec.networkID + suffix
                if fname in present:
                    return self._load_static(intent, Path(d) / fname)
        dirs = ", ".join(self.settings.staticDirs)
        return (
            None,
            None,
            intent.diagnostic(
                f"static networkID {spec.networkID!r}: no {spec.networkID}.conflist, .conf or .json in {dirs}",
                ("spec", "networkID"),
            ),
        )

    def _load_static(self, intent: Intent, path: Path) -> tuple[object, StaticConfig | None, Diagnostic | None]:
        name = str(path)
        try:
            key = _stat_key(os.stat(path))
        except OSError as e:
            return (
                None,
                None,
                intent.diagnostic(f"cannot read static file {name}: {e.strerror}", ("spec", "networkID")),
            )
        cached = self._statics.get(name)
        if cached is None or cached[0] != key:
            cached = (key, self._parse_static(path))
            self._statics[name] = cached
        value = cached[1]
        if isinstance(value, Diagnostic):
            return (
                key,
                None,
                intent.diagnostic(
                    f"static networkID {intent.network.spec.networkID!r}: "  # type: ignore[union-attr]
                    f"{value.location}: {value.message}",
                    ("spec", "networkID"),
                ),
            )
        return key, value, None

    @staticmethod
    def _parse_static(path: Path) -> StaticConfig | Diagnostic:
        name = str(path)
        try:
            conf = cnispec.to_conflist(cnispec.parse_json(path.read_bytes()))
        except OSError as e:
            return Diagnostic(f"cannot read: {e.strerror}", SourceLocation(name))
        except cnispec.ConfigProblem as p:
            return Diagnostic(p.message, SourceLocation(name, p.line, p.column))
        problems = cnispec.verify_conflist(conf, check_name=False)
        if problems:
            return Diagnostic("; ".join(problems), SourceLocation(name))
        return StaticConfig(name, conf)

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
        # Compiling builds many objects and no garbage cycles; the cyclic GC would rescan the growing heap
        # again and again (about 10% of a cold compile). Pause it for the duration.
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return self._compile(files, changed, on_artifact)
        finally:
            if was_enabled:
                # What a compile keeps (intents, artifacts) lives until the next one: move it out of the GC's
                # sight, so that later collections do not rescan 10,000 intents' worth of objects.
                gc.freeze()
                gc.enable()

    def _compile(
        self,
        files: Sequence[Path] | None,
        changed: Iterable[str | Path] | None,
        on_artifact: Callable[[Artifact], None] | None,
    ) -> Plan:
        plan = Plan()
        try:
            files = list(files) if files is not None else discover(self.layers())
        except IntentError as e:
            plan.diagnostics.extend(e.diagnostics)
            return plan
        recheck = None if changed is None else {str(p) for p in changed}
        # 1. Files: read what changed (all of them without a hint; stat decides).
        old_files, patch = self._files, self._read_files(files, recheck)
        intents = [it for e in self._files.values() for it in e.intents]
        plan.diagnostics = [d for e in self._files.values() if e.diagnostics for d in e.diagnostics]
        plan.failed_sources = {n for n, e in self._files.items() if e.failed}
        # 1b. TenantNetworks, completed from the TenantConfig (its ids claimed once for the cluster).
        tenant_intents, tenant_diags, tenants_changed = self._tenants()
        intents += tenant_intents
        plan.diagnostics += tenant_diags
        plan.failed_sources |= {str(d.location.file) for d in tenant_diags if d.is_error and d.location}
        if tenants_changed:
            patch = False  # a TenantNetwork's intent changed with no edit of its file (its id, the config)
        # 2. Rules across intents.
        failing: set[int] = set()  # id() of intents with an error of their own
        for intent, diag in rules.check(intents):
            plan.diagnostics.append(diag)
            if diag.is_error:
                failing.add(id(intent))
        # 3. Render what is new; reuse the rest.
        self._render_all(intents, recheck, patch, old_files, failing, on_artifact)
        plan.diagnostics.extend(d for r in self._rendered.values() if r.diagnostics for d in r.diagnostics)
        failing.update(k for k, r in self._rendered.items() if r.artifact is None)
        good = [(r.intent, r.artifact) for r in self._rendered.values() if r.artifact is not None]
        # 4. Plugins present?
        listed: set[int] = set()
        for intent, diag in missing_plugins(
            good, self._plugin_lookup(), self.settings.pluginDirs, offline=self.offline
        ):
            if id(diag) not in listed:  # one message per plugin type
                listed.add(id(diag))
                plan.diagnostics.append(diag)
            if diag.is_error:
                failing.add(id(intent))
        # 5. The plan. A name that failed anywhere (say, defined twice) is left out entirely: a daemon keeps its
        # last good output rather than guess which definition was meant.
        plan.failed_networks = {it.name for it in intents if id(it) in failing} if failing else set()
        bad = plan.failed_networks
        plan.artifacts = {
            a.filename: a for it, a in good if not failing or (it.name not in bad and id(it) not in failing)
        }
        return plan

    def _tenants(self) -> tuple[list[Intent], list[Diagnostic], bool]:
        """The TenantNetworks of every file, each completed from the TenantConfig in use (intent/tenancy.py) and
        parsed; an unchanged document with an unchanged completion keeps its Intent (and so its rendering)."""
        configs = [c for e in self._files.values() for c in e.configs]
        config, diags = tenancy.pick_config(configs)
        claim = self.claim_ids or tenancy.dry_claims()
        offline = "compiled away from the node: the id shown is not claimed (the daemon claims one)"
        intents: list[Intent] = []
        memo: dict[tuple[str, int], tuple[Document, Completion | None, Intent | None, list[Diagnostic]]] = {}
        changed = False
        for name, f in self._files.items():
            for i, doc in enumerate(f.tenant_docs):
                completion: Completion | None = None
                ds: list[Diagnostic] = []
                if config is not None:
                    completion, ds = tenancy.complete(doc, config, claim)
                    if self.claim_ids is None and completion is not None and completion.vni is not None:
                        ds.append(doc.diagnostic(offline, ("spec", "Options"), key=True, severity="warning"))
                prev = self._tenant_memo.get((name, i))
                if prev is not None and prev[0] is doc and prev[1] == completion and not ds:
                    entry = prev
                else:
                    changed = True
                    if ds and any(d.is_error for d in ds):
                        entry = (doc, completion, None, ds)
                    else:
                        intent, pds = danm.parse(doc, completion)
                        if intent is not None and config is None and intent.network.spec.type in tenancy.DYNAMIC:
                            # A tenant does not choose a host's device: without the admin's TenantConfig there is
                            # nothing to give it one (DANM refused such a TenantNetwork too).
                            why = f"a TenantNetwork of type {intent.network.spec.type} takes its device from the "
                            why += "TenantConfig, and none is in use"
                            intent, pds = None, [*pds, doc.diagnostic(why, ("spec",), key=True)]
                        entry = (doc, completion, intent, [*ds, *pds])
                memo[(name, i)] = entry
                diags.extend(entry[3])
                if entry[2] is not None:
                    intents.append(entry[2])
        changed = changed or len(memo) != len(self._tenant_memo)
        self._tenant_memo = memo
        return intents, diags, changed

    def tenant_networks(self) -> dict[str, str] | None:
        """Every TenantNetwork the last compile read (namespace/name -> the uid of its object, "" for a file
        written by hand); None when a file could not be read or parsed (one might have held more)."""
        out: dict[str, str] = {}
        for f in self._files.values():
            if f.failed and not f.intents and not f.tenant_docs:
                return None
            for doc in f.tenant_docs:
                meta = doc.data.get("metadata")
                if isinstance(meta, dict):
                    out[f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"] = str(meta.get("uid") or "")
        return out

    def _read_files(self, files: Sequence[Path], recheck: set[str] | None) -> bool:
        """Read the files (only those in `recheck` when the list of files is the one of the last run, which is
        then a patch: the return value). Keeps the result in self._files."""
        names = [str(p) for p in files]
        old_files = self._files
        patch = recheck is not None and names == self._names  # the same files, some of them edited
        if patch:
            assert recheck is not None
            new_files = dict(old_files)
            for path in files:
                name = str(path)
                if name in recheck:
                    new_files[name] = self._read(path, old_files.get(name))
        else:
            new_files = {name: self._read(path, old_files.get(name)) for name, path in zip(names, files, strict=True)}
        self._files, self._names = new_files, names
        return patch

    def _render_all(
        self,
        intents: list[Intent],
        recheck: set[str] | None,
        patch: bool,
        old_files: dict[str, _File],
        failing: set[int],
        on_artifact: Callable[[Artifact], None] | None,
    ) -> None:
        """Render what is new and reuse the rest, into self._rendered. With a hint that touches no static dir, a
        static intent's file is taken to be as it was."""
        static_dirs = [d.rstrip("/") + "/" for d in self.settings.staticDirs]
        statics_unchanged = recheck is not None and not any(
            c.startswith(d) or c + "/" == d for c in recheck for d in static_dirs
        )
        old = self._rendered
        listing: dict[str, set[str]] = {}
        todo: list[Intent] = intents
        rendered: dict[int, _Rendered] = {}
        if patch and statics_unchanged:
            # Only the edited files' intents can need rendering; everything else is carried over as it was.
            assert recheck is not None
            rendered = dict(old)
            todo = []
            for name in recheck:
                before, after = old_files.get(name), self._files.get(name)
                for it in before.intents if before is not None else ():
                    rendered.pop(id(it), None)
                todo.extend(after.intents if after is not None else ())
        for intent in todo:
            key = id(intent)
            prev = old.get(key)
            if prev is not None and prev.intent is not intent:
                prev = None
            is_static = intent.network.spec.type == "static" and intent.inline_config is None
            if prev is not None and (not is_static or (statics_unchanged and prev.artifact is not None)):
                rendered[key] = prev  # unchanged intent, unchanged inputs
                continue
            rendered[key] = self._render_one(intent, prev, is_static, listing)
            r = rendered[key]
            if r is not prev and on_artifact is not None and r.artifact is not None and key not in failing:
                on_artifact(r.artifact)  # the disk can start on it now
        self._rendered = rendered

    def _render_one(
        self, intent: Intent, prev: _Rendered | None, is_static: bool, listing: dict[str, set[str]]
    ) -> _Rendered:
        static = None
        skey: object = None
        if is_static:
            skey, static, problem = self._static(intent, listing)
            if problem is not None:
                return _Rendered(intent, None, None, [problem])
        if prev is not None and prev.static_key == skey:
            return prev
        out = _Rendered(intent, skey, None)
        try:
            out.artifact, out.diagnostics = render(
                intent, self.templates, RenderInput(self.settings.cniVersion, static)
            )
        except IntentError as e:
            out.diagnostics = e.diagnostics
        return out

    def _plugin_lookup(self) -> Callable[[str], bool]:
        dirs = [Path(d) for d in self.settings.pluginDirs]
        found: dict[str, bool] = {}

        def installed(name: str) -> bool:
            if name not in found:
                found[name] = any(os.access(d / name, os.X_OK) and (d / name).is_file() for d in dirs)
            return found[name]

        return installed
