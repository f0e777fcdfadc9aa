"""Defines the exception tree, each class saying whose fault it is (as nmstate's error.py does), and where in the
author's text a problem is."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Severity = Literal["error", "warning"]


@dataclass(frozen=True, slots=True)
class SourceLocation:
    """A 1-based line and column in a named file (or another source, such as `k8s:ns/name`)."""

    file: str
    line: int = 0
    column: int = 0

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}" if self.line > 0 else self.file


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One finding about the author's text: an error stops that intent, a warning does not."""

    message: str
    location: SourceLocation | None = None
    severity: Severity = "error"
    source_line: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def is_error(self) -> bool:
        return self.severity == "error"

    def as_dict(self) -> dict[str, Any]:
        loc = self.location
        return {
            "severity": self.severity,
            "file": loc.file if loc else None,
            "line": loc.line if loc else None,
            "column": loc.column if loc else None,
            "message": self.message,
            "sourceLine": self.source_line,
            "notes": list(self.notes),
        }


class NetcompError(Exception):
    """Base of every error netcomp raises on purpose."""

    # The networks a failed request was about, for its log line: those an ADD planned, those a DEL's or
    # CHECK's record named; None when it failed before it knew them.
    networks: tuple[str, ...] | None = None


class IntentError(NetcompError):
    """The author's input is wrong. Fix the file named in each diagnostic."""

    def __init__(self, diagnostics: list[Diagnostic]) -> None:
        self.diagnostics = diagnostics
        first = diagnostics[0] if diagnostics else Diagnostic("invalid intent")
        text = f"{first.location}: {first.message}" if first.location else first.message
        if len(diagnostics) > 1:
            text += f" (and {len(diagnostics) - 1} more)"
        super().__init__(text)


class HostError(NetcompError):
    """The node is not as the intent needs it: a device, kernel feature, file or permission is missing."""


class LinkMismatch(HostError):
    """A host link of the wanted name exists with other settings. `owned`: netcomp made it (for an earlier
    version of the network), so it may be replaced once no container uses it."""

    def __init__(self, msg: str, owned: bool) -> None:
        super().__init__(msg)
        self.owned = owned


class DelegateError(NetcompError):
    """A CNI plugin failed. code/msg/details are what the plugin said (CNI spec, "Error" section). `permanent`:
    it fails the same way however often it is tried (the exec cannot take its arguments, say): no retry helps."""

    def __init__(
        self, code: int, msg: str, details: str = "", *, network: str = "", plugin: str = "", permanent: bool = False
    ) -> None:
        self.code = code
        self.permanent = permanent
        self.msg = msg
        self.details = details
        self.network = network
        self.plugin = plugin
        super().__init__(self.full_msg + (f" ({details})" if details else ""))

    @property
    def full_msg(self) -> str:
        """The message with whose it is in front: `network 'x', plugin 'y': msg` (details stay apart)."""
        named = (("network", self.network), ("plugin", self.plugin))
        where = ", ".join(f"{kind} {name!r}" for kind, name in named if name)
        return f"{where}: {self.msg}" if where else self.msg


class InternalError(NetcompError):
    """A bug in netcomp. Please report it with the command and input that triggered it."""


def printable(text: str, limit: int = 4000) -> str:
    """text for a log line: control characters (newlines included) and non-ASCII written as escapes, so that
    what a plugin or a peer says can neither split a log line nor forge one; at most `limit` characters."""
    if text.isascii() and text.isprintable():
        return text[:limit]
    return text.encode("unicode_escape").decode("ascii")[:limit]
