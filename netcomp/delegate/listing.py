"""What is attached, from the cache: GET /attachments and `netcomp attachments`."""

from __future__ import annotations

from typing import Any

from netcomp.pods.netstatus import network_status
from netcomp.records.files import Records


def attachments(records: Records) -> dict[str, Any]:
    """What is attached, from the cache (GET /attachments, `netcomp attachments`): per container its
    namespace and, per network, the interface, addresses and MAC its ADD got, the device a device plugin gave
    it, and its state when it is not attached; and the entries that cannot be read."""
    entries, broken = records.scan()
    out = []
    for e in sorted(entries, key=lambda e: (e.container_id, e.ifname)):
        nets = network_status(e.attachments, e.ifname)
        for n, a in zip(nets, e.attachments, strict=True):
            if a.device:
                n["device"] = {"resource": a.device.get("resource"), "id": a.device.get("id")}
            if a.state != "attached":
                n["state"] = a.state
                if a.error:
                    n["error"] = a.error
                if a.permanent:
                    n["permanent"] = True
        out.append(
            {
                "containerID": e.container_id,
                "netns": e.netns,
                "ifname": e.ifname,
                "cniVersion": e.cni_version,
                "networks": nets,
            }
        )
    return {"containers": out, "unreadable": [{"file": str(path), "error": why} for path, why in broken]}
