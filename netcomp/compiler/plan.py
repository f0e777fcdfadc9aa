"""The Plan the compiler makes and the output dir takes: an Artifact (file name and bytes) per network."""

from __future__ import annotations

from dataclasses import dataclass, field

from netcomp.errors import Diagnostic

SUFFIX = ".conflist"


@dataclass(frozen=True, slots=True)
class Artifact:
    network: str
    filename: str
    data: bytes
    source: str  # the intent's file
    plugins: tuple[str, ...] = ()


@dataclass(slots=True)
class Plan:
    """What the output dir should hold, and everything found on the way there."""

    artifacts: dict[str, Artifact] = field(default_factory=dict)  # by file name
    diagnostics: list[Diagnostic] = field(default_factory=list)
    # Networks (by name) and source files whose intents failed: a daemon keeps their last good output.
    failed_networks: set[str] = field(default_factory=set)
    failed_sources: set[str] = field(default_factory=set)
    # Every TenantNetwork read (namespace/name -> its object's uid; Compiler.tenant_networks); None: not known (a
    # plan from the plan cache, or a file that could not be read).
    tenant_networks: dict[str, str] | None = None

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.is_error]

    @property
    def ok(self) -> bool:
        return not self.errors


def filename_for(network: str) -> str:
    return network + SUFFIX
