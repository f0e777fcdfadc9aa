"""Intents: documents turned into validated Network models, whatever format they came in."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from pydantic import BaseModel, ValidationError

from netcomp.errors import Diagnostic
from netcomp.intent.model import DNS1123_LABEL, IFNAME, MAC, NETWORK_ID, PCI_ADDRESS, Network
from netcomp.intent.source import Document, PathKey


@dataclass(frozen=True, eq=False, slots=True)
class Intent:
    """A validated network and where it came from.

    `fieldmap` translates native model paths to the paths of the source format (DanmNet's `spec.Options.vlan`
    for the model's `spec.vlan`), so rules can point at what the author wrote."""

    network: Network
    doc: Document
    format: str
    fieldmap: Mapping[PathKey, PathKey] = field(default_factory=dict)
    inline_config: Mapping[str, Any] | None = None  # NetworkAttachmentDefinition spec.config, parsed
    # Facts derived from the network (rules.py), computed once per Intent: an unchanged file keeps its Intent
    # objects across compiles, so the cross-intent rules cost a dict lookup per intent on a recompile.
    memo: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    name: str = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", self.network.metadata.name)

    def source_loc(self, loc: Sequence[Any]) -> PathKey:
        loc = tuple(loc)
        for n in range(len(loc), -1, -1):
            mapped = self.fieldmap.get(loc[:n])
            if mapped is not None:
                return mapped + loc[n:] if n == len(loc) else mapped
        return loc

    def diagnostic(
        self,
        message: str,
        loc: Sequence[Any] = (),
        *,
        key: bool = False,
        severity: str = "error",
        notes: Sequence[str] = (),
    ) -> Diagnostic:
        return self.doc.diagnostic(message, self.source_loc(loc), key=key, severity=severity, notes=notes)


Parser = Callable[[Document], tuple[Intent | None, list[Diagnostic]]]

_PATTERN_TEXT = {
    DNS1123_LABEL: "a DNS-1123 label: lower-case letters, digits and '-', starting and ending with a letter or digit",
    IFNAME: "an interface name: letters, digits, '_', '.', '-'; no '/', ':' or spaces",
    NETWORK_ID: "a file-name stem: letters, digits, '_', '.', '-'; no '/'",
    PCI_ADDRESS: "a PCI address like 0000:3b:02.1",
    MAC: "a MAC address like 02:00:00:00:00:01",
}


@cache
def _known_keys() -> frozenset[str]:
    """Every key any native model accepts, for 'did you mean' hints."""
    names: set[str] = set()
    seen: set[type] = set()

    def walk(tp: Any) -> None:
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            if tp in seen:
                return
            seen.add(tp)
            for fname, f in tp.model_fields.items():
                names.add(fname)
                walk(f.annotation)
        for arg in getattr(tp, "__args__", ()) or ():
            walk(arg)
        for m in getattr(tp, "__metadata__", ()) or ():
            walk(m)

    walk(Network)
    return frozenset(names)


def _dotted(loc: Sequence[Any]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def pydantic_diagnostics(
    doc: Document, exc: ValidationError, translate: Callable[[Sequence[Any]], PathKey] | None = None
) -> list[Diagnostic]:
    """Turn pydantic's errors into positioned diagnostics; `translate` maps native paths to source paths."""
    out: list[Diagnostic] = []
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        src_loc = translate(loc) if translate else loc
        path, _ = doc.resolve(src_loc)
        etype = err["type"]
        ctx = err.get("ctx") or {}
        key = False
        notes: list[str] = []
        where = _dotted(path)
        if etype == "extra_forbidden":
            name = loc[-1]
            msg = f"unknown key {name!r}"
            if where.endswith(str(name)):
                where = where[: -len(str(name))].rstrip(".")
            hint = difflib.get_close_matches(str(name), _known_keys() - {name}, n=1, cutoff=0.75)
            if hint:
                msg += f" (did you mean {hint[0]!r}?)"
            key = True
        elif etype == "missing":
            msg = f"missing required key {loc[-1]!r}"
        elif etype == "union_tag_invalid":
            expected = ctx.get("expected_tags", "")
            disc = str(ctx.get("discriminator", "type")).strip("'")
            msg = f"unknown {disc} {ctx.get('tag')!r}; expected one of {expected}"
            src_loc = (*src_loc, disc)
            path, _ = doc.resolve(src_loc)
            where = _dotted(path)
        elif etype == "union_tag_not_found":
            msg = f"missing required key {str(ctx.get('discriminator', 'type')).strip(chr(39))!r}"
            key = True
        elif etype == "string_pattern_mismatch":
            pattern = ctx.get("pattern", "")
            msg = f"{err['input']!r} is not " + _PATTERN_TEXT.get(pattern, f"of the form {pattern}")
        elif etype in ("value_error", "assertion_error"):
            msg = str(ctx.get("error", err["msg"]))
        else:
            msg = err["msg"]
            if "input" in err and not isinstance(err["input"], dict | list) and etype != "string_too_long":
                msg += f", got {err['input']!r}"
            elif etype == "string_too_long":
                msg = f"{err['input']!r} is {len(str(err['input']))} characters; {msg[0].lower()}{msg[1:]}"
        text = f"{where}: {msg}" if where else msg
        out.append(doc.diagnostic(text, path if key else src_loc, key=key, notes=notes))
    return out


def _native(doc: Document) -> tuple[Intent | None, list[Diagnostic]]:
    try:
        net = Network.model_validate(doc.data)
    except ValidationError as e:
        return None, pydantic_diagnostics(doc, e)
    return Intent(net, doc, "netcomp.io/v1 Network"), []


def _registry() -> dict[tuple[str, str], Parser]:
    from netcomp.intent import compat

    table: dict[tuple[str, str], Parser] = {("netcomp.io/v1", "Network"): _native}
    for kind in ("DanmNet", "ClusterNetwork", "TenantNetwork"):
        table[("danm.k8s.io/v1", kind)] = compat.danm
    table[("k8s.cni.cncf.io/v1", "NetworkAttachmentDefinition")] = compat.nad
    return table


_PARSERS: dict[tuple[str, str], Parser] | None = None


def parse_document(doc: Document) -> tuple[Intent | None, list[Diagnostic]]:
    """Dispatch a document to the parser of its (apiVersion, kind)."""
    global _PARSERS
    if _PARSERS is None:
        _PARSERS = _registry()
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
