"""One intent to its artifact: rendered through its backend's template, verified, serialized. Deterministic and
free of I/O: the caller supplies static files and the answers to "is this plugin installed" and "is this host device
there"."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson

from netcomp.cni import spec as cnispec
from netcomp.compiler.backends import registry
from netcomp.compiler.backends.backend import RenderInput
from netcomp.compiler.jinja import Templates
from netcomp.compiler.plan import Artifact, filename_for
from netcomp.errors import Diagnostic, IntentError
from netcomp.intent.intent import Intent

_PLUGIN_LISTS: dict[tuple[str, ...], tuple[str, ...]] = {}
# The plugin keys that name a host device: the master of a macvlan, ipvlan or vlan link, host-device's device
# (containernetworking/plugins, each plugin's README).
DEVICE_KEYS = {"macvlan": "master", "ipvlan": "master", "vlan": "master", "host-device": "device"}
NODE_ONLY = "compiled away from the node: --strict makes this an error"


def _plugins(conf: dict[str, Any]) -> tuple[str, ...]:
    """The conflist's plugin types, one tuple per distinct list (many networks share a handful)."""
    types = tuple(cnispec.plugin_types(conf))
    return _PLUGIN_LISTS.setdefault(types, types)


def render(intent: Intent, templates: Templates, inp: RenderInput) -> tuple[Artifact, list[Diagnostic]]:
    """One intent to its artifact and warnings. Raises IntentError when the output is not a usable conflist (a
    broken admin template, or a static file that is not valid CNI)."""
    backend = registry.REGISTRY[intent.network.spec.type]
    text = templates.render(backend.template, backend.context(intent, inp))
    where = f"template {backend.template}"
    try:
        conf = orjson.loads(text)
    except orjson.JSONDecodeError as e:
        why = f"{where} produced invalid JSON ({e.msg} at line {e.lineno}, column {e.colno} of its output)"
        raise IntentError([intent.diagnostic(why)]) from None
    problems = cnispec.verify_conflist(conf)
    if isinstance(conf, dict) and conf.get("name") != intent.name:
        problems.append(f"network name is {conf.get('name')!r}, not {intent.name!r}")
    if problems:
        raise IntentError([intent.diagnostic(f"{where} produced an unusable conflist: {p}", ()) for p in problems])
    warnings = [intent.diagnostic(w, ("spec",), key=True, severity="warning") for w in cnispec.routes_without_gw(conf)]
    art = Artifact(intent.name, filename_for(intent.name), cnispec.dumps(conf), intent.doc.source.name, _plugins(conf))
    return art, warnings


def missing_plugins(
    plan_intents: Sequence[tuple[Intent, Artifact]],
    installed: Callable[[str], bool],
    dirs: Sequence[str],
    *,
    offline: bool,
) -> list[tuple[Intent, Diagnostic]]:
    """A plugin type absent from the plugin dirs: one diagnostic per type, at its first use. An error for a
    daemon (attach would fail); a warning when compiling offline (the node may have it)."""
    missing = {p for p in {p for _, art in plan_intents for p in art.plugins} if not installed(p)}
    users: dict[str, list[Intent]] = {}
    if missing:
        for intent, art in plan_intents:
            for p in art.plugins:
                if p in missing:
                    users.setdefault(p, []).append(intent)
    where = ", ".join(dirs)
    return _missing(users, lambda p: f"CNI plugin {p!r} is not installed in {where}", ("spec", "type"), offline)


def host_devices(conflist: Mapping[str, Any]) -> set[str]:
    """The host devices a compiled network names: its host link's parent (netcomp.hostLink.link; the host link
    itself netcomp makes), and each plugin's master or device."""
    meta = conflist.get("netcomp")
    link = meta.get("hostLink") if isinstance(meta, dict) else None
    link = link if isinstance(link, dict) else {}
    out = {str(link["link"])} if link.get("link") else set()
    for p in conflist.get("plugins") or []:
        key = DEVICE_KEYS.get(str(p.get("type"))) if isinstance(p, dict) else None
        value = p.get(key) if key else None
        if isinstance(value, str) and value and value != link.get("name"):
            out.add(value)
    return out


def missing_devices(
    plan_intents: Sequence[tuple[Intent, Artifact]], present: Callable[[str], bool], *, offline: bool
) -> list[tuple[Intent, Diagnostic]]:
    """A host device a network names that is not on this machine: one diagnostic per device, at its first use
    (its hostDevice). An error with --strict (on the node, every network that names it fails); a warning
    otherwise: a CI machine has none of the node's devices."""
    users: dict[str, list[Intent]] = {}
    for intent, art in plan_intents:
        for dev in sorted(host_devices(cnispec.loads(art.data))):
            if not present(dev):
                users.setdefault(dev, []).append(intent)
    return _missing(users, lambda dev: f"host device {dev!r} is not on this machine", ("spec", "hostDevice"), offline)


def _missing(
    users: Mapping[str, list[Intent]], says: Callable[[str], str], at: tuple[str, ...], offline: bool
) -> list[tuple[Intent, Diagnostic]]:
    """One diagnostic per thing missing (what `says` of it), at its first user's `at`, counting the others.
    Offline, nobody fails (a warning on the first user); on a node, every network that needs it does (the one
    message, an error)."""
    out: list[tuple[Intent, Diagnostic]] = []
    for thing, its in users.items():
        more = f" (and {len(its) - 1} more networks)" if len(its) > 1 else ""
        diag = its[0].diagnostic(
            says(thing) + more + (f" ({NODE_ONLY})" if offline else ""), at, severity="warning" if offline else "error"
        )
        out.extend((it, diag) for it in (its[:1] if offline else its))
    return out
