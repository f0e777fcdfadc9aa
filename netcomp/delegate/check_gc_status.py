"""The verbs that neither attach nor detach: CHECK (each cached attachment checked in the namespace ADD recorded),
GC (CNI 1.1: what the runtime no longer knows is DELeted) and STATUS (is the default network usable)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from netcomp.cni.codes import E_INVALID_CONFIG, E_INVALID_NETNS, E_NOT_AVAILABLE, E_OTHER, E_UNKNOWN_CONTAINER
from netcomp.cni.invoke import Runner, find_plugin
from netcomp.cni.spec import plugin_types
from netcomp.delegate.deleting import Deleting, as_delegate_error, runtime_conf, side_by_side
from netcomp.delegate.locks import KeyedLocks
from netcomp.delegate.request import Request
from netcomp.errors import DelegateError, NetcompError, printable
from netcomp.host import netns as nsutil
from netcomp.records.files import Records
from netcomp.records.record import Record

log = logging.getLogger("netcomp.delegate")


def check(records: Records, runner: Runner, pool: ThreadPoolExecutor, req: Request) -> tuple[str, ...]:
    """Every attachment of the container's record checked; the networks it named (on an error too: the error's
    `networks`, for the request's log line)."""
    entry = records.load(req.container_id, req.ifname)
    if entry is None:
        raise DelegateError(
            E_UNKNOWN_CONTAINER,
            f"container {req.container_id} on {req.ifname} is not known",
            "no ADD was cached for it",
        )
    networks = tuple(a.network for a in entry.attachments)
    try:
        _check(runner, pool, req, entry)
    except NetcompError as e:
        e.networks = networks
        raise
    return networks


def _check(runner: Runner, pool: ThreadPoolExecutor, req: Request, entry: Record) -> None:
    # Code 3 tells a runtime it need not DEL (CNI spec, "Error"): only for a container with no record at all.
    if entry.unfinished:
        raise DelegateError(
            E_OTHER,
            f"container {req.container_id} on {req.ifname} is not attached: its ADD did not finish",
            "DEL it",
        )
    # The path ADD was given first: plugins compare it with the `sandbox` of the result they check.
    with nsutil.recorded(entry, entry.netns, req.netns, pin=False) as target:
        if not target.found:
            raise DelegateError(
                E_INVALID_NETNS,
                f"the network namespace container {req.container_id} was attached in is gone",
                f"ADD attached it in {entry.netns}",
            )

        # Side by side, as ADD and DEL; all finish before the answer, which is the first network's error in
        # the container's order.
        for a in entry.attachments:  # CHECK compares with what ADD returned: without it there is nothing to check
            if a.result is None:
                raise DelegateError(
                    E_OTHER, f"{a.ifname}: its ADD recorded no result to CHECK against", network=a.network
                )
        calls = [(a.conflist, runtime_conf(entry, a, target.path), a.result) for a in entry.attachments]
        futures = side_by_side(pool, runner.check, calls)
        failures = [(a, fut.exception()) for a, fut in zip(entry.attachments, futures, strict=True)]
        for a, exc in failures:
            if isinstance(exc, Exception):
                raise as_delegate_error(exc, a.network)


def valid_attachments(req: Request) -> set[tuple[str, str]]:
    """What a GC keeps: `cni.dev/valid-attachments`, each an object of exactly `containerID` and `ifname` (CNI
    spec 1.1, "GC"). A list with anything else in it (null, `containerId`, an entry without `ifname`) is refused
    whole, with code 7: read leniently, it would name nothing, and GC would tear down every live container. (A
    config older than CNI 1.1, which has no GC, is refused by request.parse_request.)"""
    # The spec's text named it `cni.dev/attachments` until it was corrected; libcni sends both.
    items = req.config.get("cni.dev/valid-attachments", req.config.get("cni.dev/attachments"))
    if not isinstance(items, list):
        raise DelegateError(E_INVALID_CONFIG, "GC needs cni.dev/valid-attachments, a list", "nothing was deleted")
    valid = set()
    for i, v in enumerate(items):
        ok = isinstance(v, dict) and set(v) == {"containerID", "ifname"}
        if not ok or not all(isinstance(x, str) and x for x in v.values()):
            raise DelegateError(
                E_INVALID_CONFIG,
                f"cni.dev/valid-attachments[{i}] is not an attachment: {printable(repr(v), 200)}",
                'each must be {"containerID": ..., "ifname": ...}; nothing was deleted',
            )
        valid.add((v["containerID"], v["ifname"]))
    return valid


def gc(records: Records, locks: KeyedLocks, deleting: Deleting, req: Request) -> None:
    """CNI 1.1 GC: every cached attachment of the request's network not in `cni.dev/valid-attachments` is deleted
    (best-effort). A record of another runtime network (another runtime's, whose list names none of them) is left
    alone, as libcni GCs only its list's; one that names none (written before netcomp kept it, or by a hot-plug
    alone) is any network's. A container with a request in flight is left to the next GC."""
    valid = valid_attachments(req)
    for entry in records.entries():
        if (entry.container_id, entry.ifname) in valid or entry.runtime_network not in ("", req.network):
            continue
        # A failed DEL stays in the cache; the next GC tries again. A container a request is in flight for is left
        # to the next GC too: an ADD the runtime is making now (its GC's list was made before), or a DEL.
        with locks.hold(entry.container_id, wait=False) as held:
            fresh = records.load(entry.container_id, entry.ifname) if held else None
            if fresh is None:
                continue
            try:
                with nsutil.recorded(fresh, fresh.netns, pin=True) as target:
                    deleting.detach(fresh, list(fresh.attachments), target.path, why="GC")
            except DelegateError as e:  # whether its namespace is gone cannot be told: kept, for the next GC
                log.warning("GC of container %s: %s", fresh.container_id, e)


def status(nets: Mapping[str, dict[str, Any]], default: str | None, plugin_dirs: list[str]) -> None:
    if default is not None and default not in nets:
        raise DelegateError(
            E_NOT_AVAILABLE,
            f"default network {default!r} is not compiled",
            "see `netcomp status` and `journalctl -u netcomp`",
        )
    for name in [default] if default else []:
        for ptype in plugin_types(nets[name]):
            try:
                find_plugin(ptype, plugin_dirs)
            except DelegateError as e:
                raise DelegateError(E_NOT_AVAILABLE, e.msg, f"default network {name!r}") from None
