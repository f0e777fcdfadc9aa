"""A runtime's request to the verb that serves it: VERSION, STATUS and GC need no container; ADD, DEL and CHECK
hold the container's lock (one request per container at a time; different containers in parallel)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from netcomp.cni.spec import SUPPORTED_VERSIONS
from netcomp.delegate import adding, check_gc_status
from netcomp.delegate.delegator import Delegator
from netcomp.delegate.request import Request


@dataclass(frozen=True, slots=True)
class Done:
    """What a request did: its CNI result ({} for the verbs that have none) and, for DEL and CHECK, the networks
    the container's record named (None: the request's own, ADD's)."""

    result: dict[str, Any]
    networks: tuple[str, ...] | None = None


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
            return Done(adding.add(d, req))
        if req.command == "DEL":
            return Done({}, d.delete(req))
        return Done({}, check_gc_status.check(d, req))
