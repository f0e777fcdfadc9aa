"""A runtime's request to the verb that serves it: VERSION, STATUS and GC need no container; ADD, DEL and CHECK
hold the container's lock (one request per container at a time; different containers in parallel)."""

from __future__ import annotations

from netcomp.cni.spec import SUPPORTED_VERSIONS
from netcomp.delegate import adding, check_gc_status
from netcomp.delegate.delegator import Delegator
from netcomp.delegate.request import Done, Request


def handle(d: Delegator, req: Request) -> Done:
    if req.command == "VERSION":
        return Done({"cniVersion": req.cni_version, "supportedVersions": list(SUPPORTED_VERSIONS)})
    if req.command == "STATUS":
        check_gc_status.status(d)
        return Done({})
    if req.command == "GC":
        check_gc_status.gc(d, req)
        return Done({})
    with d.locks.hold(req.container_id):
        if req.command == "ADD":
            return adding.add(d, req)
        if req.command == "DEL":
            return Done({}, d.delete(req))
        return Done({}, check_gc_status.check(d, req))
