"""The one way from intents to the output dir, for `netcomp compile` and the daemon alike: the incremental
Compiler, the plan cache, and the Output. What a plan with errors means is the caller's: the CLI writes nothing
(discard), the daemon writes the rest and keeps the last good output of what failed (write's `keep`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from netcomp.compiler.inputs import discover
from netcomp.compiler.output import Change, Output, Stager
from netcomp.compiler.plan import Artifact, Plan
from netcomp.compiler.plancache import CACHE_NAME, Fingerprint, PlanCache, fingerprint
from netcomp.errors import HostError, IntentError
from netcomp.settings import Settings

if TYPE_CHECKING:
    from netcomp.compiler.compiler import Compiler
    from netcomp.intent.tenancy import ClaimIds

log = logging.getLogger("netcomp.compiler")


class Pipeline:
    def __init__(self, settings: Settings, *, offline: bool, out_dir: Path | None = None, fork: bool = False) -> None:
        """`settings` paths are used as they are (resolve them under a root first); `offline`: a compile
        away from the node (a missing plugin is a warning, not an error); `out_dir`: instead of outputDir;
        `fork`: a cold compile runs in a child process (compiler/coldstart.py: the daemon's)."""
        self.settings = settings
        self.offline = offline
        self.fork = fork
        self._compiler: Compiler | None = None
        self._handed: tuple[bytes, dict[str, Artifact]] | None = None  # a child's compiler state, and its plan's
        self.output = Output(out_dir or Path(settings.outputDir))
        self.cache = PlanCache(self.output.directory / CACHE_NAME)
        self._fp: Fingerprint | None = None
        self._staged: Stager | None = None
        # The state of the TenantConfig ids claimed (ipam.idclaims), part of what a cached plan was made of, and
        # the claim the compiler makes them with (Compiler.claim_ids; None away from the node).
        self.claims_state: Callable[[], str] = lambda: ""
        self.claim_ids: ClaimIds | None = None
        # Whether a host device is on this machine (Compiler.device_present: the CLI's check), and the machine's
        # devices, part of what a cached plan was made of then.
        self.device_present: Callable[[str], bool] | None = None
        self.devices_state: Callable[[], str] = lambda: ""

    @property
    def compiler(self) -> Compiler:
        """Made (and the compiler's modules imported: the intent models, jinja2) when something is to be
        compiled: a start whose plan comes from the plan cache does without them."""
        if self._compiler is None:
            from netcomp.compiler.compiler import Compiler

            compiler = Compiler(self.settings, offline=self.offline)
            handed, self._handed = self._handed, None
            if handed is not None:
                try:
                    from netcomp.compiler import handover

                    handover.adopt(compiler, *handed)
                except Exception as e:
                    # Say, the package was upgraded on disk since the child pickled it. A fresh compiler reads
                    # every file on its first compile: slower, nothing lost.
                    log.warning("cannot take over the first compile's memory (%s): compiling everything", e)
                    compiler = Compiler(self.settings, offline=self.offline)
            self._compiler = compiler
        self._compiler.claim_ids = self.claim_ids
        self._compiler.device_present = self.device_present
        return self._compiler

    def reset_templates(self) -> None:
        """Templates changed (or may have): the next compile renders everything with them afresh."""
        self._handed = None  # what the first compile rendered with the old ones
        if self._compiler is not None:
            self._compiler.reset_templates()

    def layers(self) -> list[Path]:
        return [Path(d) for d in self.settings.intent_layers()]

    def compile(
        self,
        files: Sequence[Path] | None = None,
        *,
        changed: Iterable[str | Path] | None = None,
        stage: bool = False,
    ) -> Plan:
        """A full run (no `changed`) takes the cached plan when every input is as it was; otherwise, and for an
        incremental run, the compiler renders. `stage`: start writing the artifacts that differ from the output
        dir while it does (write() then only renames them into place)."""
        self.discard()
        self._fp = None
        if changed is None:
            try:
                listed = list(files) if files is not None else discover(self.layers())
            except IntentError as e:
                return Plan(diagnostics=list(e.diagnostics))
            # Taken before compiling: an input edited meanwhile makes the next run compile again.
            extra = self.claims_state() + self.devices_state()
            self._fp = fingerprint(self.settings, listed, offline=self.offline, extra=extra)
            cached = self.cache.load(self._fp)
            if cached is not None:
                return cached
            files = listed
        if self.fork and changed is None and self._compiler is None and self._handed is None:
            from netcomp.compiler import coldstart

            assert files is not None
            done = coldstart.compile_forked(lambda: self.compiler, self.output, files, stage=stage)
            if done is not None:
                self._staged = done.staged
                self._handed = (done.state, dict(done.plan.artifacts))
                return done.plan
        if stage:
            try:
                self._staged = self.output.stager()
            except HostError:
                self._staged = None  # write() reports the problem
        offer = self._staged.offer if self._staged is not None else None
        return self.compiler.compile(files, changed=changed, on_artifact=offer)

    def write(self, plan: Plan, *, keep: Collection[str] = ()) -> list[Change]:
        """Bring the output dir to the plan (files named in `keep` stay as they are even when the plan lacks
        them); remember a full run's plan for the next. HostError when the dir cannot be written."""
        staged, self._staged = self._staged, None
        changes = self.output.apply(plan, keep=keep, staged=staged)
        if self._fp is not None and plan.ok:
            self.cache.save(self._fp, plan)
        return changes

    def preview(self, plan: Plan) -> list[Change]:
        """What write() would change."""
        self.discard()
        return self.output.changes(plan)

    def discard(self) -> None:
        """Drop what compile() staged and write() did not take."""
        if self._staged is not None:
            self._staged.discard()
            self._staged = None
