"""What a backend is: a template and the function that gives it its context, and what a render is given."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from netcomp.intent.intent import Intent


@dataclass(frozen=True, slots=True)
class StaticConfig:
    """A static network's CNI file, found and parsed (a .conf already lifted into a conflist)."""

    path: str
    conflist: dict[str, Any]


@dataclass(frozen=True, slots=True)
class RenderInput:
    cni_version: str
    static: StaticConfig | None = None


@dataclass(frozen=True, slots=True)
class Backend:
    type: str
    template: str
    context: Callable[[Intent, RenderInput], dict[str, Any]]
