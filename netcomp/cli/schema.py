"""Runs `netcomp schema`: prints the JSON Schemas generated from the models, the contract for config authors
(checked in under schemas/; a test fails when they are stale)."""

from __future__ import annotations

import json
from typing import Any

# The models are imported when a schema is asked for: the parser names the choices, and `netcomp daemon` goes
# through the parser without the intent models, which an idle daemon would otherwise hold (docs/benchmarks.md).
SCHEMAS = ("network", "config")


def dumps(name: str = "network") -> str:
    """The JSON Schema of intents (`network`) or of netcomp.yaml (`config`), as schemas/ holds it."""
    if name == "network":
        from netcomp.intent.model import Network

        doc: dict[str, Any] = Network.model_json_schema(mode="validation")
    elif name == "config":
        from netcomp.settings import Settings

        doc = Settings.model_json_schema(mode="validation") | {"title": "netcomp.yaml"}
    else:
        raise KeyError(name)
    doc["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return json.dumps(doc, indent=2) + "\n"


def run(args: Any, out: Any, err: Any) -> int:
    """`netcomp schema [network|config]`."""
    out.write(dumps(args.which))
    return 0
