"""The backend of each `spec.type`: a table, not an if-chain (pydantic's discriminated union already chose the
model by the same key)."""

from __future__ import annotations

from netcomp.compiler.backends import macvlan, sriov, static
from netcomp.compiler.backends.backend import Backend

REGISTRY: dict[str, Backend] = {b.type: b for b in (macvlan.MACVLAN, macvlan.IPVLAN, sriov.BACKEND, static.BACKEND)}
