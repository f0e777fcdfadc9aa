"""The one ADD path: a runtime's ADD (`add`) and a hot-plug both go through `attach`, which records the new
attachments before any plugin runs (the write-ahead), runs their delegates side by side, checks what the pod
asked for against what they made, and records the outcome; on any failure it DELs the new attachments through
the one DEL path (`Delegator.detach`), which gives back what they took. The Delegator (delegator.py) holds the
state both paths use and the DEL path; this module holds the steps only an ADD takes, in the order it takes
them. What a daemon killed at each step leaves, and how it is undone, is in docs/reliability.md."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Mapping
from concurrent.futures import as_completed
from typing import Any

from netcomp import faults
from netcomp.cni.codes import E_INVALID_CONFIG, E_INVALID_ENV, E_IO
from netcomp.delegate import poolclaims
from netcomp.delegate.delegator import Delegator, as_delegate_error, why_unwritten
from netcomp.delegate.request import Done, Request
from netcomp.errors import DelegateError
from netcomp.host import container, nsenter
from netcomp.host import netns as nsutil
from netcomp.host.netns import NetnsId
from netcomp.pods import asks as podasks
from netcomp.pods import multus, naming
from netcomp.pods.multus import Ask
from netcomp.pods.netstatus import network_status
from netcomp.records.record import Attachment, Record

log = logging.getLogger("netcomp.delegate")


def add(d: Delegator, req: Request) -> Done:
    """A runtime's ADD: the networks planned and held, attached, the pod told; the runtime's result and the
    networks attached (an error names them once they are planned)."""
    entry = d.cache.load(req.container_id, req.ifname)
    if entry is not None and entry.attached:
        if entry.request and entry.request == req.digest and not entry.unfinished:
            # The same ADD again: the runtime (or the shim, after the daemon died before its answer)
            # retries one that finished. Answer what was recorded.
            log.info("ADD of container %s repeated: answered from its record", req.container_id)
            return Done(
                d.answer(req.ifname, req.cni_version, entry.attachments), tuple(a.network for a in entry.attachments)
            )
        raise DelegateError(
            E_INVALID_CONFIG,
            f"container {req.container_id} is already attached on "
            f"{req.ifname}; DEL it first (CNI: no ADD twice without DEL)",
        )
    if entry is not None:
        d.undo_unfinished(entry)  # an earlier ADD that never answered ok: undone before this one
    reserved: list[tuple[str, ...]] = []
    atts: list[Attachment] = []
    try:
        atts, asks = d.plan_attachments(req)
        reserved = d.reserve(req.container_id, atts, asks)
        entry = Record(req.container_id, req.netns, req.ifname, req.cni_version, request=req.digest)
        if req.pod is not None:
            entry.pod = {"namespace": req.pod.namespace, "name": req.pod.name, "uid": req.pod.uid}
            entry.args = req.rest_args
        attach(d, entry, atts, req.netns, req.pod, asks)
    except DelegateError as e:
        e.networks = tuple(a.network for a in atts) if atts else None
        if req.pod is not None and d.pods is not None:  # best-effort, after the answer, as Multus does
            reason = "NoNetworkFound" if isinstance(e, multus.NoNetwork) else "FailedAddNetworks"
            d.pods.event(req.pod, "Warning", reason, e.full_msg + (f" ({e.details})" if e.details else ""))
        raise
    finally:
        d.unreserve(reserved)  # recorded in the cache entry by now, or given back
    if req.pod is not None and d.pods is not None:
        for a in atts:
            r = a.result or {}
            if r.get("interfaces") or r.get("ips"):
                ips = " ".join(str(ip.get("address")) for ip in r.get("ips") or [])
                name = naming.display_name(a.network, a.conflist)
                d.pods.event(req.pod, "Normal", "AddedInterface", f"Add {a.ifname} [{ips}] from {name}")
        d.pods.report(req.pod, network_status(atts, req.ifname))  # queued: the ADD does not wait for it
    return Done(d.answer(req.ifname, req.cni_version, atts), tuple(a.network for a in atts))


def attach(
    d: Delegator,
    entry: Record,
    new: list[Attachment],
    netns_path: str,
    pod: naming.PodRef | None = None,
    asks: Mapping[str, Ask] | None = None,
) -> None:
    """The one ADD path: check the namespace and the names, take host links, VFs and addresses, record the new
    attachments (write-ahead), run their delegates side by side, check what the pod asked for and move its
    default routes, and record the outcome; on any failure DEL the new attachments again (which gives back
    what they took) and raise the first error. `asks`: what a pod asks of each attachment, by interface."""
    asks = asks or {}
    for a in new:  # what no plugin could ever run with is refused, not recorded and rolled back
        d.runner.preflight(a.conflist, d.runtime_conf(entry, a, netns_path))
    nid, ck, everything = _target(d, entry, new, netns_path)
    if d.devices is not None:  # before anything is made: the kubelet's answer may be "try again"
        d.devices.assign(pod, entry.container_id, new, entry.attachments, asks)
    entry.netns, entry.netns_id, entry.netns_cookie = netns_path, nid, ck
    entry.links_before = sorted(everything)  # what an undo leaves alone
    held = d.host.hold_links(new)
    try:
        vfs = d.host.take_vfs(new, asks)
        try:
            who = (str(pod), pod.uid) if pod is not None else ("", "")
            claims = poolclaims.take(d.addresses, new, entry.container_id, *who, asks=asks)
            faults.point("after-claim")
            entry.attachments.extend(new)
            try:
                d.save(entry)  # the write-ahead: nothing runs before this is on disk
            except (OSError, ValueError) as e:
                entry.attachments = [a for a in entry.attachments if all(a is not n for n in new)]
                if claims and d.addresses is not None:
                    d.addresses.release(claims, "rollback")
                raise DelegateError(
                    E_IO, f"cannot write the attachment cache: {why_unwritten(e)}", "no plugin was run"
                ) from None
            if claims and d.addresses is not None:
                d.addresses.settle(claims)  # recorded now: no longer only in flight
            if d.devices is not None:
                d.devices.write_info(new)  # named by the write-ahead: a DEL or an undo removes it
            faults.point("after-write-ahead")
            _run(d, entry, new, asks)
        finally:
            d.host.release_vfs(vfs)  # in the cache (or rolled back) by now: no longer needs a reservation
    finally:
        d.host.release_links(held)


def _target(
    d: Delegator, entry: Record, new: list[Attachment], netns_path: str
) -> tuple[NetnsId, int | None, set[str]]:
    """The namespace an ADD is to attach in: its identity and cookie, and the interfaces it holds now. Refused
    when it is the host's (or whether it is cannot be told), when the container was attached in another one, or
    when an interface of `new` is there already; no plugin has run then."""
    fd, nid = nsenter.open_netns(netns_path)
    try:
        ck = nsutil.cookie(fd)
        if nid in d.host_netns:
            raise DelegateError(
                E_INVALID_ENV,
                f"{netns_path} is the host's network namespace, not a container's",
                "netcomp never attaches networks to the host; no plugin was run",
            )
        if d.host_unsure:  # whether it is the host's cannot be told: never let through
            raise DelegateError(E_IO, f"cannot tell whether {netns_path} is the host's: {d.host_unsure}")
        same = entry.netns_id == nid and entry.netns_cookie in (None, ck)
        if entry.netns_id is not None and entry.attachments and not same:
            raise DelegateError(
                E_INVALID_ENV,
                f"{netns_path} is not the network namespace container {entry.container_id} was attached in",
                f"it was attached in {entry.netns or '?'}",
            )
        names = [a.ifname for a in new]
        everything = d.link_names(fd)
        present = ({a.ifname for a in entry.attachments} | everything) & set(names)
        if present:
            raise DelegateError(
                E_INVALID_CONFIG,
                f"interface {sorted(present)[0]!r} already exists in {netns_path}",
                "no plugin was run",
            )
    finally:
        os.close(fd)
    return nid, ck, everything


def _run(d: Delegator, entry: Record, new: list[Attachment], asks: Mapping[str, Ask]) -> None:
    def one(a: Attachment) -> dict[str, Any]:
        return d.runner.add(a.conflist, d.runtime_conf(entry, a, entry.netns))

    futures = d.side_by_side(one, new)
    first_error: DelegateError | None = None
    for fut in as_completed(futures):
        faults.point("between-delegates")
        with contextlib.suppress(Exception):
            fut.result()
    for a, fut in zip(new, futures, strict=True):
        try:
            a.result = fut.result()
        except Exception as e:
            first_error = first_error or as_delegate_error(e, a.network)
    if first_error is None and asks:
        try:
            _fulfil(d, entry, new, asks)
        except Exception as e:  # netlink trouble too: whatever it is, the ADD is rolled back
            first_error = as_delegate_error(e, new[0].network)
    if first_error is None:
        for a in new:
            a.state = "attached"
        try:
            d.cache.append_outcome(entry, new)  # one write appended to the write-ahead
        except (OSError, ValueError) as e:
            first_error = DelegateError(E_IO, f"cannot write the attachment cache: {why_unwritten(e)}")
            for a in new:
                a.state = "adding"
    if first_error is not None:
        with nsutil.recorded(entry, entry.netns, pin=True) as target:
            if not d.detach(entry, new, target.path, why="rollback"):
                d.sweep(entry, target, new)
        raise first_error
    faults.point("before-answer")


def _fulfil(d: Delegator, entry: Record, new: list[Attachment], asks: Mapping[str, Ask]) -> None:
    """Once every delegate succeeded: each interface has the MAC and addresses its pod asked for, and the
    default routes are where the pod's default-route puts them (recorded in the results)."""
    with nsutil.recorded(entry, entry.netns, pin=True) as target:
        policy: list[container.PolicyRoutes] = []
        for a in new:
            ask = asks.get(a.ifname)
            if ask is None:
                continue
            state = None
            if ask.mac is not None or ask.ips or ask.proutes:
                state = container.link_state(target.path, a.ifname)
                podasks.check(a, ask, state)
            if ask.proutes:
                policy += podasks.policy_routes(a, ask, state)
        moves = podasks.routes([(a, asks.get(a.ifname)) for a in new])
        try:
            if policy:
                container.add_policy_routes(target.path, policy)
            if moves:
                container.set_default_routes(target.path, moves)
        except container.RouteRefused as e:
            owner = next(asks[a.ifname] for a in new if a.ifname == e.ifname)
            what = "proutes" if owner.proutes and not owner.gateways else "default-route"
            raise owner.error(f"{what}: {e}", "a gateway must be on the network's subnet") from None
    if moves:
        podasks.record_routes(new, moves)
