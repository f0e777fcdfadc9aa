"""`netcomp schema`: JSON Schemas generated from the models, the contract for config authors and their editors
(checked in under schemas/; a test fails when they are stale)."""

from __future__ import annotations

import json
from typing import Any

# The models are imported when a schema is asked for: the parser names the choices, and `netcomp daemon` goes
# through the parser without the intent models, which an idle daemon would otherwise hold (docs/benchmarks.md).
SCHEMAS = ("network", "config")


def _model(name: str) -> Any:
    if name == "network":
        from netcomp.intent.model import Network

        return Network
    if name == "config":
        from netcomp.settings import Settings

        return Settings
    raise KeyError(name)


def schema(name: str = "network") -> dict[str, Any]:
    model = _model(name)
    out: dict[str, Any] = model.model_json_schema(mode="validation")
    out["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    if name == "config":
        out["title"] = "netcomp.yaml"
    return out


def dumps(name: str = "network") -> str:
    return json.dumps(schema(name), indent=2) + "\n"


def run(args: Any, out: Any, err: Any) -> int:
    """`netcomp schema [network|config]`."""
    out.write(dumps(args.which))
    return 0
