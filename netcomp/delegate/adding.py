"""The one ADD path. A runtime's ADD (`Adding.add`) and a hot-plug both go through `Adding.attach`, which
records the new attachments before any plugin runs (the write-ahead), runs their delegates side by side, checks
what the pod asked for against what they made, and records the outcome; on any failure it DELs the new
attachments through the one DEL path (deleting.py, the same shape), which gives back what they took. The steps
stand here in the order an ADD takes them; what a daemon killed at each step leaves, and how it is undone, is in
docs/reliability.md."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

from netcomp import faults
from netcomp.cni import result as cniresult
from netcomp.cni.codes import E_INVALID_CONFIG, E_INVALID_ENV, E_IO
from netcomp.cni.invoke import Runner
from netcomp.delegate import poolclaims
from netcomp.delegate.deleting import Deleting, as_delegate_error, runtime_conf, side_by_side, why_unwritten
from netcomp.delegate.hostres import HostResources
from netcomp.delegate.planning import Planning
from netcomp.delegate.request import Reply, Request
from netcomp.errors import DelegateError, NetcompError
from netcomp.host import container, nsenter
from netcomp.host import netns as nsutil
from netcomp.host.netns import NetnsId
from netcomp.ipam.store import AddressAllocator
from netcomp.pods import asks as podasks
from netcomp.pods import multus, naming
from netcomp.pods.devices import Devices
from netcomp.pods.multus import Ask
from netcomp.pods.netstatus import Pods, network_status
from netcomp.policy.enforcer import Enforcer
from netcomp.records.files import Records
from netcomp.records.record import Attachment, Record

log = logging.getLogger("netcomp.delegate")


def answer(runtime_ifname: str, version: str, atts: list[Attachment]) -> dict[str, Any]:
    """The runtime's result: like Multus's, that of the network on its own CNI_IFNAME (the default network), or
    of the first attachment when there is no default, in the request's cniVersion."""
    main = next((a for a in atts if a.ifname == runtime_ifname), atts[0])
    assert main.result is not None
    return cniresult.convert(main.result, version)


class Adding:
    """Attaches networks. `devices`: the devices device plugins gave pods (None: a network of such a resource is
    refused as having no pool); `host_netns`: the namespaces never given to a container, `host_unsure` why the
    host's is not known (then every ADD is refused); `link_names` as for Deleting."""

    def __init__(
        self,
        records: Records,
        runner: Runner,
        pool: ThreadPoolExecutor,
        planning: Planning,
        deleting: Deleting,
        host: HostResources,
        addresses: AddressAllocator | None,
        pods: Pods | None,
        link_names: Callable[[str | int], set[str]],
        host_netns: set[NetnsId],
        host_unsure: str,
    ) -> None:
        self.records, self.runner, self.pool, self.planning, self.deleting = records, runner, pool, planning, deleting
        self.host, self.addresses, self.pods, self.link_names = host, addresses, pods, link_names
        self.host_netns, self.host_unsure = host_netns, host_unsure
        self.devices: Devices | None = None
        self.policies: Enforcer | None = None  # MultiNetworkPolicy's rules, written inside the ADD

    def add(self, req: Request) -> Reply:
        """A runtime's ADD: the networks planned and held, attached, the pod told; the runtime's result and the
        networks attached (an error names them once they are planned)."""
        entry = self.records.load(req.container_id, req.ifname)
        if entry is not None and entry.attached:
            if entry.request and entry.request == req.digest and not entry.unfinished:
                # The same ADD again: the runtime (or the shim, after the daemon died before its answer)
                # retries one that finished. Answer what was recorded.
                log.info("ADD of container %s repeated: answered from its record", req.container_id)
                networks = tuple(a.network for a in entry.attachments)
                return Reply(answer(req.ifname, req.cni_version, entry.attachments), networks)
            raise DelegateError(
                E_INVALID_CONFIG,
                f"container {req.container_id} is already attached on "
                f"{req.ifname}; DEL it first (CNI: no ADD twice without DEL)",
            )
        if entry is not None:
            self.deleting.undo_unfinished(entry)  # an earlier ADD that never answered ok: undone before this one
        reserved: list[tuple[str, ...]] = []
        atts: list[Attachment] = []
        try:
            atts, asks = self.planning.plan(req)
            reserved = self.planning.reserve(req.container_id, atts, asks)
            entry = Record(req.container_id, req.netns, req.ifname, req.cni_version, request=req.digest)
            entry.runtime_network = req.network
            if req.pod is not None:
                entry.pod = {"namespace": req.pod.namespace, "name": req.pod.name, "uid": req.pod.uid}
                entry.args = req.rest_args
            self.attach(entry, atts, req.netns, req.pod, asks)
        except NetcompError as e:
            e.networks = tuple(a.network for a in atts) if atts else None  # "?" in the log line: not yet planned
            if isinstance(e, DelegateError) and req.pod is not None and self.pods is not None:  # as Multus does
                reason = "NoNetworkFound" if isinstance(e, multus.NoNetwork) else "FailedAddNetworks"
                self.pods.event(req.pod, "Warning", reason, e.full_msg + (f" ({e.details})" if e.details else ""))
            raise
        finally:
            self.planning.unreserve(reserved)  # in the record by now, or given back
        if req.pod is not None and self.pods is not None:
            added = [
                f"{a.ifname} [{' '.join(str(ip.get('address')) for ip in r.get('ips') or [])}] from "
                + naming.display_name(a.network, a.conflist)
                for a in atts
                if (r := a.result or {}).get("interfaces") or r.get("ips")
            ]
            if added:  # one event for the ADD, however many interfaces: each is a write the API server pays for
                self.pods.event(req.pod, "Normal", "AddedInterface", "Add " + ", ".join(added))
            self.pods.report(req.pod, network_status(atts, req.ifname))  # queued: the ADD does not wait for it
        return Reply(answer(req.ifname, req.cni_version, atts), tuple(a.network for a in atts))

    def attach(
        self,
        entry: Record,
        new: list[Attachment],
        netns_path: str,
        pod: naming.PodRef | None = None,
        asks: Mapping[str, Ask] | None = None,
    ) -> None:
        """Check the namespace and the names, take host links, VFs and addresses, record the new attachments
        (write-ahead), run their delegates side by side, check what the pod asked for and move its default
        routes, and record the outcome; on any failure DEL the new attachments again (which gives back what they
        took) and raise the first error. `asks`: what a pod asks of each attachment, by interface."""
        asks = asks or {}
        for a in new:  # what no plugin could ever run with is refused, not recorded and rolled back
            self.runner.preflight(a.conflist, runtime_conf(entry, a, netns_path))
        nid, ck, everything = self._target(entry, new, netns_path)
        if self.devices is not None:  # before anything is made: the kubelet's answer may be "try again"
            self.devices.assign(pod, entry.container_id, new, entry.attachments, asks)
        entry.netns, entry.netns_id, entry.netns_cookie = netns_path, nid, ck
        entry.links_before = sorted(everything)  # what an undo leaves alone
        held = self.host.hold_links(new)
        try:
            vfs = self.host.take_vfs(new, asks)
            try:
                who = (str(pod), pod.uid) if pod is not None else ("", "")
                claims = poolclaims.take(self.addresses, new, entry.container_id, *who, asks=asks)
                faults.point("after-claim")
                entry.attachments.extend(new)
                try:
                    self.deleting.save(entry)  # the write-ahead: nothing runs before this is on disk
                except (OSError, ValueError) as e:
                    entry.attachments = [a for a in entry.attachments if all(a is not n for n in new)]
                    if claims and self.addresses is not None:
                        self.addresses.release(claims, "rollback")
                    raise DelegateError(
                        E_IO, f"cannot write the attachment cache: {why_unwritten(e)}", "no plugin was run"
                    ) from None
                if claims and self.addresses is not None:
                    self.addresses.settle(claims)  # recorded now: no longer only in flight
                if self.devices is not None:
                    self.devices.write_info(new)  # named by the write-ahead: a DEL or an undo removes it
                faults.point("after-write-ahead")
                self._run(entry, new, asks)
            finally:
                self.host.release_vfs(vfs)  # in the record (or rolled back) by now: no longer needs a reservation
        finally:
            self.host.release_links(held)

    def _target(self, entry: Record, new: list[Attachment], netns_path: str) -> tuple[NetnsId, int | None, set[str]]:
        """The namespace an ADD is to attach in: its identity and cookie, and the interfaces it holds now.
        Refused when it is the host's (or whether it is cannot be told), when the container was attached in
        another one, or when an interface of `new` is there already; no plugin has run then."""
        fd, nid = nsenter.open_netns(netns_path)
        try:
            ck = nsutil.cookie(fd)
            if nid in self.host_netns:
                raise DelegateError(
                    E_INVALID_ENV,
                    f"{netns_path} is the host's network namespace, not a container's",
                    "netcomp never attaches networks to the host; no plugin was run",
                )
            if self.host_unsure:  # whether it is the host's cannot be told: never let through
                raise DelegateError(E_IO, f"cannot tell whether {netns_path} is the host's: {self.host_unsure}")
            same = entry.netns_id == nid and entry.netns_cookie in (None, ck)
            if entry.netns_id is not None and entry.attachments and not same:
                raise DelegateError(
                    E_INVALID_ENV,
                    f"{netns_path} is not the network namespace container {entry.container_id} was attached in",
                    f"it was attached in {entry.netns or '?'}",
                )
            everything = self.link_names(fd)
            present = ({a.ifname for a in entry.attachments} | everything) & {a.ifname for a in new}
            if present:
                raise DelegateError(
                    E_INVALID_CONFIG,
                    f"interface {sorted(present)[0]!r} already exists in {netns_path}",
                    "no plugin was run",
                )
        finally:
            os.close(fd)
        return nid, ck, everything

    def _run(self, entry: Record, new: list[Attachment], asks: Mapping[str, Ask]) -> None:
        if self.policies is not None:  # the pod's rules written while its delegates run (`attached` waits for them)
            try:
                self.policies.ahead(entry, new)
            except Exception:  # a bug: `attached` works them out after the delegates, as without ahead
                log.exception("policy: cannot write the rules of container %s ahead", entry.container_id)
        futures = side_by_side(
            self.pool, self.runner.add, [(a.conflist, runtime_conf(entry, a, entry.netns)) for a in new]
        )
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
                self._fulfil(entry, new, asks)
            except Exception as e:  # netlink trouble too: whatever it is, the ADD is rolled back
                first_error = as_delegate_error(e, new[0].network)
        if first_error is None and self.policies is not None:
            faults.point("before-policy")
            try:  # the pod's policies in force before the ADD answers: never reachable unprotected
                self.policies.attached(entry, new)
            except Exception as e:
                first_error = as_delegate_error(e, new[0].network)
        if first_error is None:
            for a in new:
                a.state = "attached"
            try:
                self.records.append_outcome(entry, new)  # one write appended to the write-ahead
            except (OSError, ValueError) as e:
                first_error = DelegateError(E_IO, f"cannot write the attachment cache: {why_unwritten(e)}")
                for a in new:
                    a.state = "adding"
        if first_error is not None:
            self.deleting.undo(entry, new, "rollback")
            raise first_error
        faults.point("before-answer")

    @staticmethod
    def _fulfil(entry: Record, new: list[Attachment], asks: Mapping[str, Ask]) -> None:
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
