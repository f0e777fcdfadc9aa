"""The CNI spec's configuration rules (Section 1, "Network configuration format") as pure functions: they parse
JSON with positions, lift a single-plugin `.conf` into a conflist, verify what the spec and libcni require, and
serialize deterministically."""

from __future__ import annotations

import json
import re
from typing import Any, Final

import orjson

from netcomp.names import CNI_NAME, is_cni_name

# Versions a conflist may declare. Debian's plugins (1.1.1) speak up to 1.0.0 and refuse 1.1.0.
SUPPORTED_VERSIONS = ("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")
DEFAULT_VERSION: Final = "1.0.0"  # what netcomp writes and answers when nothing else is asked for


def parse_version(version: str) -> tuple[int, ...]:
    """A CNI version as numbers, to compare ("0.4.0" < "1.0.0"); (0,) for one that is not dotted numbers."""
    parts = version.split(".") if isinstance(version, str) else []
    return tuple(int(p) for p in parts) if parts and all(p.isdigit() for p in parts) else (0,)


class ConfigProblem(ValueError):
    """A CNI config that cannot be used; line/column are 1-based positions in its JSON text, when known."""

    def __init__(self, message: str, line: int = 0, column: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column


def parse_json(data: bytes) -> Any:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigProblem(f"not valid UTF-8 at byte {e.start}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigProblem(f"not valid JSON: {e.msg}", e.lineno, e.colno) from None


def to_conflist(obj: Any) -> dict[str, Any]:
    """A conflist as is; a single-plugin config (.conf) lifted into a conflist of one plugin."""
    if not isinstance(obj, dict):
        raise ConfigProblem("a CNI configuration must be a JSON object")
    if "plugins" in obj:
        return obj
    if "type" not in obj:
        raise ConfigProblem("neither a conflist (no 'plugins') nor a plugin config (no 'type')")
    out: dict[str, Any] = {k: obj[k] for k in ("cniVersion", "name") if k in obj}
    out["plugins"] = [{k: v for k, v in obj.items() if k not in ("name", "cniVersion")}]
    return out


def plugin_types(conflist: dict[str, Any]) -> list[str]:
    """Every binary a conflist needs: each plugin's type and each plugin's ipam type, in order, once."""
    seen: list[str] = []
    for p in conflist.get("plugins") or []:
        if not isinstance(p, dict):
            continue
        ipam = p.get("ipam")
        for t in (p.get("type"), ipam.get("type") if isinstance(ipam, dict) else None):
            if isinstance(t, str) and t and t not in seen:
                seen.append(t)
    return seen


def verify_conflist(conf: Any, *, check_name: bool = True) -> list[str]:
    """What is wrong with a conflist, as sentences; empty when it is usable."""
    if not isinstance(conf, dict):
        return ["a CNI configuration must be a JSON object"]
    problems: list[str] = []
    if check_name:
        name = conf.get("name")
        if not isinstance(name, str) or not is_cni_name(name):
            problems.append(f"network name {name!r} does not match {CNI_NAME.pattern}")
    version = conf.get("cniVersion")
    if version is not None and version not in SUPPORTED_VERSIONS:
        problems.append(f"cniVersion {version!r} is not one of {', '.join(SUPPORTED_VERSIONS)}")
    plugins = conf.get("plugins")
    if not isinstance(plugins, list) or not plugins:
        problems.append("'plugins' must be a non-empty list")
        return problems
    for i, p in enumerate(plugins):
        if not isinstance(p, dict):
            problems.append(f"plugins[{i}] must be an object")
            continue
        t = p.get("type")
        if not isinstance(t, str) or not t:
            problems.append(f"plugins[{i}] has no 'type'")
        elif not is_cni_name(t):
            problems.append(f"plugins[{i}].type {t!r} must be a plain plugin name, not a path")
        ipam = p.get("ipam")
        if ipam is not None and ipam != {}:  # an empty ipam section names no plugin
            it = ipam.get("type") if isinstance(ipam, dict) else None
            if not isinstance(it, str) or not is_cni_name(it):
                problems.append(f"plugins[{i}].ipam.type {it!r} must be a plain plugin name, not a path")
    return problems


def routes_without_gw(conf: dict[str, Any]) -> list[str]:
    """Routes of IPAM sections that lack `gw`: the reference plugins install them via the gateway but then fail
    CHECK ("Expected Route ... GW:<nil> not found"), so a container on such a network fails every CHECK."""
    out = []
    for i, p in enumerate(conf.get("plugins") or []):
        ipam = p.get("ipam") if isinstance(p, dict) else None
        routes = ipam.get("routes") if isinstance(ipam, dict) else None
        for j, r in enumerate(routes if isinstance(routes, list) else []):
            if isinstance(r, dict) and not r.get("gw"):
                out.append(
                    f"plugins[{i}].ipam.routes[{j}] to {r.get('dst')} has no gw; CNI CHECK will fail "
                    "for it (give gw explicitly)"
                )
    return out


def dumps(conf: dict[str, Any]) -> bytes:
    """json.dumps(indent=2)'s bytes and a trailing newline, by orjson (the stdlib's indenting encoder is slow)."""
    return orjson.dumps(conf, option=orjson.OPT_INDENT_2) + b"\n"


# A run of 19 digits or more: the only way to write an integer that may not fit in 64 bits.
_LONG_DIGITS, _LONG_DIGITS_TEXT = re.compile(rb"[0-9]{19}"), re.compile(r"[0-9]{19}")


def loads(data: bytes | str) -> Any:
    """JSON from a peer or a plugin: orjson, or the stdlib for what orjson refuses but JSON allows and for an
    integer that may not fit in 64 bits (orjson reads those as inexact floats); ValueError for anything that is
    not JSON, nesting too deep for either included."""
    first: Exception | None = None
    if not (_LONG_DIGITS_TEXT.search(data) if isinstance(data, str) else _LONG_DIGITS.search(data)):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as e:
            first = e
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(str(first or e)) from None


# Arrays and objects inside each other in foreign JSON: every format netcomp reads needs fewer than 10.
MAX_DEPTH = 32


def too_deep(obj: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether arrays and objects nest deeper than `limit` in obj: iterative, linear in its size."""
    stack: list[tuple[Any, int]] = [(obj, 1)] if isinstance(obj, dict | list) else []  # containers only
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        children = node.values() if isinstance(node, dict) else node
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return False


def loads_foreign(data: bytes | str) -> Any:
    """JSON another writer made (an annotation, the kubelet's files): as loads, and ValueError also when arrays and
    objects nest deeper than MAX_DEPTH, so that nothing that walks it later meets a RecursionError."""
    doc = loads(data)
    if too_deep(doc):
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
    return doc


def compact(obj: Any) -> bytes:
    """Compact JSON for a plugin's stdin or an answer; the stdlib's for what orjson refuses (integers over 64 bits)."""
    try:
        return orjson.dumps(obj)
    except orjson.JSONEncodeError:
        return json.dumps(obj).encode()
