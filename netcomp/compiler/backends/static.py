"""static: an existing CNI file chosen by networkID (DANM's static integration level), or a
NetworkAttachmentDefinition's inline config. Passed through; the network name becomes the intent's. The file's
own cniVersion is kept (its plugins were written for it); the configured one applies when it has none."""

from __future__ import annotations

from typing import Any

from netcomp.compiler.backends.backend import Backend, RenderInput
from netcomp.compiler.marker import meta
from netcomp.intent.intent import Intent
from netcomp.intent.model import StaticSpec

_PASSED = ("disableCheck", "disableGC")


def _conflist(intent: Intent, inp: RenderInput) -> dict[str, Any]:
    if intent.inline_config is not None:
        return dict(intent.inline_config)
    assert inp.static is not None, "static intent rendered without its file"
    return inp.static.conflist


def context(intent: Intent, inp: RenderInput) -> dict[str, Any]:
    spec = intent.network.spec
    assert isinstance(spec, StaticSpec)
    conf = _conflist(intent, inp)
    # Inside a conflist, libcni injects name and cniVersion into each plugin; stale copies only mislead.
    plugins = [{k: v for k, v in p.items() if k not in ("name", "cniVersion")} for p in conf["plugins"]]
    return {
        "cniVersion": conf.get("cniVersion") or inp.cni_version,
        "name": intent.name,
        "extra": {k: conf[k] for k in _PASSED if k in conf},
        "plugins": plugins,
        "meta": meta(intent, resourceName=spec.resourceName),
    }


BACKEND = Backend("static", "static.json.j2", context)
