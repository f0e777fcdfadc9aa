"""pydantic's errors as the author's diagnostics: each error's `loc` walked through the document (and a format's
field map) to the key or value it is about, with a message that names what was expected. A rule across fields
raises `BrokenAt` (fields.py): its path is appended to the error's `loc` before the walk, so the caret lands on
the key that breaks it rather than on the mapping where the validator runs."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

from pydantic import BaseModel, ValidationError

from netcomp.errors import Diagnostic
from netcomp.intent.fields import DNS1123_LABEL, IFNAME, MAC, NETWORK_ID, PCI_ADDRESS, RESOURCE_NAME, BrokenAt
from netcomp.intent.model import Network
from netcomp.intent.source import Document, PathKey

_PATTERN_TEXT = {
    DNS1123_LABEL: "a DNS-1123 label: lower-case letters, digits and '-', starting and ending with a letter or digit",
    IFNAME: "an interface name: letters, digits, '_', '.', '-'; no '/', ':' or spaces",
    NETWORK_ID: "a file-name stem: letters, digits, '_', '.', '-'; no '/'",
    PCI_ADDRESS: "a PCI address like 0000:3b:02.1",
    MAC: "a MAC address like 02:00:00:00:00:01",
    RESOURCE_NAME: "a device resource name like intel.com/sriov_netdevice: letters, digits, '_', '.', '-', one '/'",
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
        etype = err["type"]
        ctx = err.get("ctx") or {}
        broken = ctx.get("error")
        at = broken if isinstance(broken, BrokenAt) else None
        loc = tuple(err["loc"]) + (at.at if at else ())
        src_loc = translate(loc) if translate else loc
        path, _ = doc.resolve(src_loc)
        key = at.key if at else False
        where = _dotted(path)
        disc = str(ctx.get("discriminator", "type")).strip("'")  # the key a tagged union is chosen by
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
            msg = f"unknown {disc} {ctx.get('tag')!r}; expected one of {ctx.get('expected_tags', '')}"
            src_loc = (*src_loc, disc)
            path, _ = doc.resolve(src_loc)
            where = _dotted(path)
        elif etype == "union_tag_not_found":
            msg = f"missing required key {disc!r}"
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
        out.append(doc.diagnostic(text, path if key else src_loc, key=key))
    return out
