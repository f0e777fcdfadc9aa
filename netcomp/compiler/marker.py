"""The `netcomp` block of a compiled conflist: the ownership marker (pruning touches only files that carry it) and
what the daemon reads back at attach time (the backend type, the interface prefix, the host link to make, the
SR-IOV resource, the address pool), so that a compiled file is self-contained. libcni and the plugins never see
it: only `plugins[]` entries reach them."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the daemon reads markers (is_owned) without importing the intent models
    from netcomp.intent.intent import Intent


def meta(intent: Intent, **extra: Any) -> dict[str, Any]:
    """The `netcomp` block of `intent`'s conflist, with the backend's `extra` (None values left out)."""
    out: dict[str, Any] = {"generated": True, "type": intent.network.spec.type}
    if intent.network.spec.interfacePrefix is not None:
        out["interfacePrefix"] = intent.network.spec.interfacePrefix
    if intent.namespace is not None:
        out["namespace"] = intent.namespace  # a namespaced object's (a NetworkAttachmentDefinition, a DanmNet)
    out.update(intent.meta)
    out.update({k: v for k, v in extra.items() if v is not None})
    return out


def is_owned(data: bytes) -> bool:
    """A file is ours when it is a JSON object whose `netcomp.generated` is true (meta() writes it)."""
    if b'"netcomp"' not in data:
        return False
    try:
        obj = json.loads(data)
    except ValueError:
        return False
    return isinstance(obj, dict) and isinstance(obj.get("netcomp"), dict) and obj["netcomp"].get("generated") is True
