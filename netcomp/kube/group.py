"""netcomp's own names on the API server, defined once: its API group, the labels it writes on its objects, and an
object's creation time as netcomp reads it. This module makes no call."""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from netcomp.names import LABEL_NAME_RE

GROUP, VERSION = "netcomp.io", "v1"  # AddressClaim, TenantClaim and AddressBlock objects
NETWORK = "netcomp.io/network"  # label: the network an object belongs to (a node selects by it)
NODE = "netcomp.io/node"  # label (the node's name, or its hash when no label value can hold it) and annotation


def digest(data: str | bytes) -> str:
    """A short digest of a text: 16 hex digits of its SHA-256."""
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()[:16]


def node_label(node: str) -> str:
    """The node as a label value: its name, or a hash of it when longer than a label value may be (a node's name
    may be a 253-character DNS name, a label value 63; the API server refuses an object with a longer one)."""
    return node if len(node) <= 63 and LABEL_NAME_RE.fullmatch(node) else f"h-{digest(node)}"


def created(meta: dict[str, Any]) -> float:
    """An object's creationTimestamp (its metadata's) in epoch seconds; 0.0 when it has none that reads."""
    stamp = meta.get("creationTimestamp")
    if not isinstance(stamp, str) or len(stamp) > 64:
        return 0.0
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0
