"""A runtime's request to the verb that serves it: VERSION, STATUS and GC need no container; ADD, DEL and CHECK
hold the container's lock (one request per container at a time; different containers in parallel)."""

from __future__ import annotations

from typing import Any

from netcomp.cni.spec import SUPPORTED_VERSIONS
from netcomp.delegate import verbs
from netcomp.delegate.delegator import Delegator
from netcomp.delegate.request import Request


def handle(d: Delegator, req: Request) -> dict[str, Any]:
    if req.command == "VERSION":
        return {"cniVersion": req.cni_version, "supportedVersions": list(SUPPORTED_VERSIONS)}
    if req.command == "STATUS":
        verbs.status(d)
        return {}
    if req.command == "GC":
        verbs.gc(d, req)
        return {}
    with d.locks.hold(req.container_id):
        if req.command == "ADD":
            return d.add(req)
        if req.command == "DEL":
            d.delete(req)
            return {}
        verbs.check(d, req)
        return {}
