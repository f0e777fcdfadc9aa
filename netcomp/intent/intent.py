"""An Intent: a validated network and where it came from, whatever format it was written in."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from netcomp.errors import Diagnostic
from netcomp.intent.model import Network
from netcomp.intent.source import Document, PathKey


@dataclass(frozen=True, eq=False, slots=True)
class Intent:
    """A validated network, its document and format. `fieldmap` translates native model paths to the source
    format's (DanmNet's `spec.Options.vlan` for the model's `spec.vlan`), so rules point at what the author wrote."""

    network: Network
    doc: Document
    format: str
    fieldmap: Mapping[PathKey, PathKey] = field(default_factory=dict)
    inline_config: Mapping[str, Any] | None = None  # NetworkAttachmentDefinition spec.config, parsed
    # A NetworkAttachmentDefinition's namespace: the network is then `namespace.name` on the node (pods ask for
    # it as namespace/name, and it is a network of its own beside a definition of that name in another one).
    namespace: str | None = None
    # What the source format adds to the compiled file's `netcomp` block (DANM's kind, AllowedTenants, rt_tables).
    meta: Mapping[str, Any] = field(default_factory=dict)
    # Facts derived from the network (rules.py), computed once per Intent: an unchanged file keeps its Intent
    # objects across compiles, so the cross-intent rules cost a dict lookup per intent on a recompile.
    memo: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    name: str = field(init=False, compare=False)

    def __post_init__(self) -> None:
        name = self.network.metadata.name
        object.__setattr__(self, "name", f"{self.namespace}.{name}" if self.namespace else name)

    def source_loc(self, loc: Sequence[Any]) -> PathKey:
        """The source format's path of the deepest part of `loc` the field map knows; `loc` when none."""
        loc = tuple(loc)
        return next((self.fieldmap[loc[:n]] for n in range(len(loc), -1, -1) if loc[:n] in self.fieldmap), loc)

    def diagnostic(
        self,
        message: str,
        loc: Sequence[Any] = (),
        *,
        key: bool = False,
        severity: str = "error",
        notes: Sequence[str] = (),
    ) -> Diagnostic:
        return self.doc.diagnostic(message, self.source_loc(loc), key=key, severity=severity, notes=notes)


Parser = Callable[[Document], tuple[Intent | None, list[Diagnostic]]]
