"""Keeps a check's outcome, and reports all of them: a line each for people, a document for programs."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Literal

Status = Literal["ok", "warn", "fail", "skip"]
MARKS: dict[Status, str] = {"ok": "ok", "warn": "warn", "fail": "FAIL", "skip": "skip"}


@dataclass(frozen=True)
class Check:
    """`name`: what was checked (`kernel:ipvlan`, `plugin:macvlan`); `found`: what was found, in a sentence;
    `fix`: for a failure or a warning, what to do about it."""

    name: str
    status: Status
    found: str
    fix: str = ""


def ok(name: str, found: str) -> Check:
    return Check(name, "ok", found)


def fail(name: str, found: str, fix: str) -> Check:
    return Check(name, "fail", found, fix)


def warn(name: str, found: str, fix: str = "") -> Check:
    return Check(name, "warn", found, fix)


def skip(name: str, found: str) -> Check:
    return Check(name, "skip", found)


def failed(checks: Sequence[Check]) -> bool:
    return any(c.status == "fail" for c in checks)


def as_text(checks: Sequence[Check]) -> str:
    """A line per check (`FAIL kernel:ipvlan: ...; fix: ...`), then a summary line."""
    width = max((len(c.name) for c in checks), default=0)
    lines = []
    for c in checks:
        line = f"{MARKS[c.status]:4s}  {c.name:{width}s}  {c.found}"
        if c.fix and c.status in ("fail", "warn"):
            line += f"; fix: {c.fix}"
        lines.append(line)
    bad = [c.name for c in checks if c.status == "fail"]
    warned = sum(1 for c in checks if c.status == "warn")
    summary = f"{len(checks)} checks: " + (f"{len(bad)} failed ({', '.join(bad)})" if bad else "all passed")
    if warned:
        summary += f", {warned} warning{'s' if warned > 1 else ''}"
    return "\n".join([*lines, summary]) + "\n"


def as_json(checks: Sequence[Check]) -> str:
    return json.dumps({"ok": not failed(checks), "checks": [asdict(c) for c in checks]}, indent=2) + "\n"
