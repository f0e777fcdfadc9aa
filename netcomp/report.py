"""Formats diagnostics for people (compiler style, as netplan prints them) and for programs (JSON)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from netcomp.errors import Diagnostic


def format_text(d: Diagnostic) -> str:
    """`file:line:col: error: message`, then the source line and a caret under the column."""
    where = f"{d.location}: " if d.location else ""
    lines = [f"{where}{d.severity}: {d.message}"]
    if d.source_line is not None and d.location and d.location.column > 0:
        src = d.source_line.replace("\t", " ")
        lines += [f"  {src}", "  " + " " * (d.location.column - 1) + "^"]
    lines.extend(f"  note: {n}" for n in d.notes)
    return "\n".join(lines)


def sort_key(d: Diagnostic) -> tuple[str, int, int, str]:
    loc = d.location
    return (loc.file if loc else "", loc.line if loc else 0, loc.column if loc else 0, d.message)


def format_all(diags: Sequence[Diagnostic]) -> str:
    body = [format_text(d) for d in sorted(diags, key=sort_key)]
    errors = sum(1 for d in diags if d.is_error)
    counts = ((errors, "error"), (len(diags) - errors, "warning"))
    if diags:
        body.append(", ".join(f"{n} {word}{'s' if n != 1 else ''}" for n, word in counts if n))
    return "\n".join(body)


def as_json(diags: Sequence[Diagnostic], **extra: Any) -> str:
    doc: dict[str, Any] = {
        "diagnostics": [d.as_dict() for d in sorted(diags, key=sort_key)],
        "errors": sum(1 for d in diags if d.is_error),
        "warnings": sum(1 for d in diags if not d.is_error),
        **extra,
    }
    return json.dumps(doc, indent=2)
