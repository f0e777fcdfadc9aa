"""What DANM's and Multus's formats (danm.py, nad.py) share on their way onto the native Network model. An unknown
key is a warning here, not an error: the API server prunes unknown fields of these CRDs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from netcomp.errors import Diagnostic
from netcomp.intent.intent import Intent
from netcomp.intent.model import Network
from netcomp.intent.source import Document, PathKey, walk
from netcomp.intent.validation import pydantic_diagnostics

_K8S_META = {"name", "namespace", "labels", "annotations", "uid", "resourceVersion", "generation", "creationTimestamp",
             "managedFields", "ownerReferences", "finalizers", "selfLink", "deletionTimestamp",
             "deletionGracePeriodSeconds", "generateName"}  # fmt: skip


class Collector:
    def __init__(self, doc: Document) -> None:
        self.doc = doc
        self.diags: list[Diagnostic] = []

    def error(self, msg: str, loc: Sequence[Any], key: bool = False) -> None:
        self.diags.append(self.doc.diagnostic(msg, loc, key=key))

    def warn(self, msg: str, loc: Sequence[Any], key: bool = True) -> None:
        self.diags.append(self.doc.diagnostic(msg, loc, key=key, severity="warning"))

    @property
    def failed(self) -> bool:
        return any(d.is_error for d in self.diags)


def mapping(c: Collector, data: Any, loc: PathKey, required: bool = True) -> dict[str, Any] | None:
    if data is None:
        if required:
            c.error(f"missing required key {loc[-1]!r}", loc[:-1])
        return None
    if not isinstance(data, dict):
        c.error(f"{'.'.join(map(str, loc))}: must be a mapping", loc)
        return None
    return data


def metadata(c: Collector, data: dict[str, Any]) -> dict[str, Any] | None:
    meta = mapping(c, data.get("metadata"), ("metadata",))
    if meta is None:
        return None
    for k in meta:
        if k not in _K8S_META:
            c.warn(f"metadata.{k}: ignored (not Kubernetes object metadata)", ("metadata", k))
    return meta


def unknown_top(c: Collector, data: dict[str, Any]) -> None:
    for k in data:
        if k not in ("apiVersion", "kind", "metadata", "spec", "status"):
            c.warn(f"unknown key {k!r} ignored (the API server would prune it)", (k,))


def validate(
    c: Collector,
    native: dict[str, Any],
    fieldmap: dict[PathKey, PathKey],
    fmt: str,
    inline: dict[str, Any] | None = None,
    namespace: str | None = None,
    meta: dict[str, Any] | None = None,
) -> tuple[Intent | None, list[Diagnostic]]:
    def translate(loc: Sequence[Any]) -> PathKey:
        # Drop pydantic's union tags (they are not keys of the converted data), then map to the source format.
        t, _ = walk(native, loc)
        return next((fieldmap[t[:n]] for n in range(len(t), -1, -1) if t[:n] in fieldmap), ())

    try:
        net = Network.model_validate(native)
    except ValidationError as e:
        return None, [*c.diags, *pydantic_diagnostics(c.doc, e, translate)]
    if c.failed:
        return None, c.diags
    return Intent(net, c.doc, fmt, fieldmap, inline, namespace, meta or {}), c.diags
