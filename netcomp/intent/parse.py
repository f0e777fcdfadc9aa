"""A document to an Intent: dispatched on (apiVersion, kind) to the native model or a compat format."""

from __future__ import annotations

from pydantic import ValidationError

from netcomp.errors import Diagnostic
from netcomp.intent import danm, nad
from netcomp.intent.intent import Intent, Parser
from netcomp.intent.model import Network
from netcomp.intent.source import Document
from netcomp.intent.validation import pydantic_diagnostics


def _native(doc: Document) -> tuple[Intent | None, list[Diagnostic]]:
    try:
        net = Network.model_validate(doc.data)
    except ValidationError as e:
        return None, pydantic_diagnostics(doc, e)
    return Intent(net, doc, "netcomp.io/v1 Network"), []


# The parser of each (apiVersion, kind): a table, not an if-chain.
_PARSERS: dict[tuple[str, str], Parser] = {
    ("netcomp.io/v1", "Network"): _native,
    **{(group, kind): danm.parse for group in danm.API_VERSIONS for kind in danm.KINDS},
    ("k8s.cni.cncf.io/v1", "NetworkAttachmentDefinition"): nad.parse,
}


def parse_document(doc: Document) -> tuple[Intent | None, list[Diagnostic]]:
    """Dispatch a document to the parser of its (apiVersion, kind)."""
    api, kind = doc.data.get("apiVersion"), doc.data.get("kind")
    parser = _PARSERS.get((api, kind)) if isinstance(api, str) and isinstance(kind, str) else None
    if parser is not None:
        return parser(doc)
    if api is None or kind is None:
        missing = "apiVersion" if api is None else "kind"
        return None, [doc.diagnostic(f"missing required key {missing!r}", ())]
    known = ", ".join(f"{a} {k}" for a, k in sorted(_PARSERS))
    if any(a == api for a, _ in _PARSERS):
        return None, [doc.diagnostic(f"unknown kind {kind!r} for {api}; netcomp reads {known}", ("kind",))]
    return None, [doc.diagnostic(f"unknown apiVersion {api!r}; netcomp reads {known}", ("apiVersion",))]
