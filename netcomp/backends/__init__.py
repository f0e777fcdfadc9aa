"""Backends: pure functions from an Intent to the context of its template, dispatched through a registry keyed
by `spec.type` (a table, not an if-chain)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from netcomp.intent import Intent


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
    # Binaries this backend's conflist needs besides the IPAM plugin (for the plugin-dir check).
    plugins: Callable[[Intent, RenderInput], list[str]]


REGISTRY: dict[str, Backend] = {}


def register(backend: Backend) -> Backend:
    REGISTRY[backend.type] = backend
    return backend


def get(type_: str) -> Backend:
    if not REGISTRY:
        _load()
    return REGISTRY[type_]


def _load() -> None:
    from netcomp.backends import links, sriov, static  # noqa: F401  (they register themselves)
