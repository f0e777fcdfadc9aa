"""This module converts CNI results between spec versions: 0.3.0 to 1.1.0 share a shape, and before 1.0.0 each IP
carries `version`. It refuses results of 0.1.0/0.2.0 (`ip4`/`ip6`), which no plugin netcomp runs produces."""

from __future__ import annotations

from typing import Any

from netcomp.cni.codes import E_INCOMPATIBLE
from netcomp.cni.spec import SUPPORTED_VERSIONS
from netcomp.errors import DelegateError

# The versions whose results carry `version` on each IP (the shape before 1.0.0), and the first without it.
IP_VERSIONED = ("0.3.0", "0.3.1", "0.4.0")
FIRST_UNVERSIONED = next(v for v in SUPPORTED_VERSIONS if v not in IP_VERSIONED)


def convert(result: dict[str, Any], version: str) -> dict[str, Any]:
    """The result in `version`'s shape: a new dict with new `ips` (what differs); the rest is shared with `result`."""
    if version not in SUPPORTED_VERSIONS:
        raise DelegateError(
            E_INCOMPATIBLE, f"incompatible CNI version {version!r}", f"supported: {', '.join(SUPPORTED_VERSIONS)}"
        )
    if "ip4" in result or "ip6" in result:
        raise DelegateError(E_INCOMPATIBLE, "cannot convert a CNI 0.2.0 result")
    out = dict(result)
    out["cniVersion"] = version
    ips = out.get("ips")
    if not isinstance(ips, list):
        return out
    out["ips"] = ips = [dict(ip) if isinstance(ip, dict) else ip for ip in ips]
    for ip in ips:
        if not isinstance(ip, dict):
            continue
        if version in IP_VERSIONED:
            addr = str(ip.get("address", ""))
            ip.setdefault("version", "6" if ":" in addr else "4")
        else:
            ip.pop("version", None)
    return out
