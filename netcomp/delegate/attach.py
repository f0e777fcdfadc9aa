"""ADD, DEL, CHECK, GC and STATUS across the delegates of a container.

ADD runs the delegate conflists in parallel (they attach different interfaces and do not depend on each other);
on any failure it DELs what was attempted, in reverse, and answers the first error with the network and the
plugin named. What ADD used and got is cached (one file per container) before the answer. DEL and CHECK use
the cache, never today's intents, and run the networks in parallel too. DEL is idempotent and best-effort: it
tries every delegate and keeps the cache entries of those whose DEL failed, so a retry finishes the job and
nothing leaks silently. Host links and SR-IOV VFs are hostres.py's; the request itself is request.py's."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from netcomp.cni import result as cniresult
from netcomp.cni.cache import Attachment, Cache, Entry
from netcomp.cni.invoke import E_INVALID_CONFIG, E_INVALID_ENV, Runner, RuntimeConf, find_plugin
from netcomp.cni.spec import SUPPORTED_VERSIONS, plugin_types
from netcomp.delegate import select
from netcomp.delegate.hostres import HostResources
from netcomp.delegate.locks import KeyedLocks
from netcomp.delegate.podstatus import Pods, network_status
from netcomp.delegate.request import (
    CONTAINER_ID,
    E_IO,
    E_NOT_AVAILABLE,
    E_UNKNOWN_CONTAINER,
    Request,
)
from netcomp.errors import DelegateError, HostError

log = logging.getLogger("netcomp.delegate")


def _now(fn: Callable[..., Any], *args: Any) -> Future[Any]:
    """fn(*args) run here, as a finished Future (what pool.submit would give)."""
    fut: Future[Any] = Future()
    try:
        fut.set_result(fn(*args))
    except Exception as e:
        fut.set_exception(e)
    return fut


@dataclass
class Delegator:
    """Runs requests against the networks currently compiled on the node.

    `networks` returns the current conflists by network name (the daemon's last good plan); `default_network`
    the node's default; `link_check` which interface names already exist in a netns (host.netns.existing)."""

    runner: Runner
    cache: Cache
    networks: Callable[[], Mapping[str, dict[str, Any]]]
    default_network: Callable[[], str | None]
    link_check: Callable[[str, list[str]], set[str]]
    # Makes a network's host link (its VLAN/VXLAN master) when missing; host.links.ensure in the daemon.
    host_link: Callable[[dict[str, Any]], object] = lambda link: None
    # The VFs (PCI addresses, in allocation order) of an SR-IOV pool by resourceName; raises when unknown.
    vf_pool: Callable[[str], list[str]] = lambda name: []
    # The host links netcomp made that exist now, and removing one of them (host.links.owned / remove).
    owned_links: Callable[[], set[str]] = lambda: set()
    remove_link: Callable[[str], object] = lambda name: False
    # The cluster (daemon.kube.Cluster) when the node has one: pod annotations in, network status out.
    pods: Pods | None = None
    workers: int = 32
    locks: KeyedLocks = field(default_factory=KeyedLocks)

    def __post_init__(self) -> None:
        self.pool = ThreadPoolExecutor(self.workers, thread_name_prefix="delegate")
        self.host = HostResources(
            self.cache, self.networks, self.host_link, self.vf_pool, self.owned_links, self.remove_link
        )

    def close(self) -> None:
        self.pool.shutdown(wait=True)

    # --------------------------------------------------------------------------------------------- dispatch

    def describe(self, req: Request) -> str:
        """The networks a request is about, for the log line (cheap, never fails): for DEL and CHECK what the
        cache says the container has, for ADD what is asked for."""
        if req.command in ("DEL", "CHECK") and req.container_id:
            with contextlib.suppress(HostError):
                entry = self.cache.load(req.container_id, req.ifname)
                if entry is not None:
                    return ",".join(a.network for a in entry.attachments) or "-"
        try:
            wants, _ = select.split_cni_args(req.args)
            wants += select.from_runtime_args(req.config)
        except DelegateError:
            wants = []
        names = [n for n in [self.default_network(), *(w.network for w in wants)] if n]
        pod = select.pod_ref(req.args) if self.pods is not None else None
        if pod is not None:
            names.append(f"+annotation of pod {pod}")  # read by ADD itself: not looked up for a log line
        return ",".join(names) or "-"

    def handle(self, req: Request) -> dict[str, Any]:
        if req.command == "VERSION":
            return {"cniVersion": req.cni_version, "supportedVersions": list(SUPPORTED_VERSIONS)}
        if req.command == "STATUS":
            self.status()
            return {}
        if req.command == "GC":
            self.gc(req)
            return {}
        with self.locks.hold(req.container_id):
            if req.command == "ADD":
                return self.add(req)
            if req.command == "DEL":
                self.delete(req)
                return {}
            self.check(req)
            return {}

    # --------------------------------------------------------------------------------------------- ADD

    def plan_attachments(self, req: Request) -> tuple[list[Attachment], str]:
        nets = self.networks()
        wants, rest_args = select.split_cni_args(req.args)
        wants += select.from_runtime_args(req.config)
        wants += self._pod_wants(req)
        default = self.default_network()
        if default is None and not wants:
            raise DelegateError(
                E_INVALID_CONFIG,
                "no networks to join: no defaultNetwork is configured and none "
                f"was asked for ({select.ARGS_KEY} in CNI_ARGS)",
            )
        for name in [default, *(w.network for w in wants)]:
            if name is not None and name not in nets:
                raise DelegateError(
                    E_INVALID_CONFIG, f"network {name!r} is not compiled on this node", "see `netcomp status`"
                )
        prefixes = {n: (nets[n].get("netcomp") or {}).get("interfacePrefix") for n in nets}
        named = select.name_interfaces(default, req.ifname, wants, prefixes)
        return [Attachment(net, ifname, nets[net], None, rest_args) for net, ifname in named], rest_args

    def _pod_wants(self, req: Request) -> list[select.Want]:
        pod = select.pod_ref(req.args) if self.pods is not None else None
        if pod is None or self.pods is None:
            return []
        try:
            value = self.pods.networks_annotation(pod)
        except HostError as e:
            raise DelegateError(
                11,
                f"cannot read pod {pod} from the Kubernetes API server: {e}",
                f"the networks it asks for are in its {select.POD_NETWORKS} annotation; no plugin was run",
            ) from None
        return select.from_pod_annotation(value, pod) if value else []

    def _report(self, req: Request, atts: list[Attachment]) -> None:
        pod = select.pod_ref(req.args) if self.pods is not None else None
        if pod is not None and self.pods is not None:
            status = network_status(atts, req.ifname)
            self.pool.submit(self.pods.report, pod, status)  # after the answer; the ADD does not wait for it

    def add(self, req: Request) -> dict[str, Any]:
        if self.cache.load(req.container_id, req.ifname) is not None:
            raise DelegateError(
                E_INVALID_CONFIG,
                f"container {req.container_id} is already attached on "
                f"{req.ifname}; DEL it first (CNI: no ADD twice without DEL)",
            )
        atts, _ = self.plan_attachments(req)
        present = self.link_check(req.netns, [a.ifname for a in atts])
        if present:
            raise DelegateError(
                E_INVALID_CONFIG, f"interface {sorted(present)[0]!r} already exists in {req.netns}", "no plugin was run"
            )
        held = self.host.hold_links(atts)
        try:
            vfs = self.host.take_vfs(atts)
            try:
                return self._run_add(req, atts)
            finally:
                self.host.release_vfs(vfs)  # now in the cache (or rolled back): no longer needs a reservation
        finally:
            self.host.release_links(held)

    def _run_add(self, req: Request, atts: list[Attachment]) -> dict[str, Any]:
        futures = self._side_by_side(lambda a: self.runner.add(a.conflist, self._rt(req, a)), atts)
        first_error: DelegateError | None = None
        for a, fut in zip(atts, futures, strict=True):
            try:
                a.result = fut.result()
            except DelegateError as e:
                first_error = first_error or e
            except Exception as e:  # a bug or the host; still roll back
                first_error = first_error or DelegateError(999, f"{type(e).__name__}: {e}", network=a.network)
        entry = Entry(req.container_id, req.netns, req.ifname, req.cni_version, atts)
        if first_error is None:
            try:
                self.cache.save(entry)
            except OSError as e:
                first_error = DelegateError(E_IO, f"cannot write the attachment cache: {e.strerror}")
        if first_error is not None:
            self._rollback(req, atts)
            raise first_error
        self._report(req, atts)
        return self._answer(req, atts)

    def _side_by_side(self, fn: Callable[[Attachment], Any], atts: list[Attachment]) -> list[Future[Any]]:
        """fn(a) for each attachment, in the pool side by side; a lone one runs here (no hand-off)."""
        if len(atts) == 1:
            return [_now(fn, atts[0])]
        return [self.pool.submit(fn, a) for a in atts]

    def gc_host_links(self) -> list[str]:
        """Remove the host links netcomp made that nothing needs any more (HostResources.gc_links)."""
        return self.host.gc_links()

    def _answer(self, req: Request, atts: list[Attachment]) -> dict[str, Any]:
        # Like Multus: the runtime gets the result of the network on its own CNI_IFNAME (the default network),
        # or of the first attachment when there is no default.
        main = next((a for a in atts if a.ifname == req.ifname), atts[0])
        assert main.result is not None
        return cniresult.convert(main.result, req.cni_version)

    def _rollback(self, req: Request, atts: list[Attachment]) -> None:
        for a in reversed(atts):
            # The error the caller sees is the one that made us roll back; DEL errors here are secondary.
            with contextlib.suppress(DelegateError):
                self.runner.delete(a.conflist, self._rt(req, a), a.result)

    def _rt(self, req: Request, a: Attachment, netns: str | None = None) -> RuntimeConf:
        return RuntimeConf(req.container_id, req.netns if netns is None else netns, a.ifname, a.args, a.capability_args)

    # --------------------------------------------------------------------------------------------- DEL

    def delete(self, req: Request) -> None:
        entry = self.cache.load(req.container_id, req.ifname)
        if entry is None:
            return  # nothing of ours (DEL is idempotent)
        self._delete_entry(entry, req.netns or entry.netns)

    def _delete_entry(self, entry: Entry, netns: str, atts: list[Attachment] | None = None) -> None:
        """DEL `atts` (default: every attachment of the entry) in `netns`. Side by side, as ADD ran them (they
        are independent: no network's delegates see another's), so a container on three networks goes in the
        time of its slowest; each conflist's own plugins still go in reverse. What was deleted leaves the cache
        entry (the entry goes when it is empty); what failed stays, and the error is raised."""
        atts = list(entry.attachments) if atts is None else atts

        def one(a: Attachment) -> None:
            self.runner.delete(
                a.conflist, RuntimeConf(entry.container_id, netns, a.ifname, a.args, a.capability_args), a.result
            )

        errors: list[DelegateError | None] = []
        for a, fut in zip(atts, self._side_by_side(one, atts), strict=True):
            try:
                fut.result()
                errors.append(None)
            except DelegateError as e:
                errors.append(e)
            except Exception as e:  # a bug or the host: the attachment stays cached all the same
                errors.append(DelegateError(999, f"{type(e).__name__}: {e}", network=a.network))
        done = [a for a, e in zip(atts, errors, strict=True) if e is None]
        entry.attachments = [a for a in entry.attachments if all(a is not d for d in done)]
        if entry.attachments:
            self.cache.save(entry)
        else:
            self.cache.remove(entry.container_id, entry.ifname)
        self.host.after_detach(done)
        if any(e is not None for e in errors):
            # The error of the last network, as a DEL in reverse order would have met it first.
            raise next(e for e in reversed(errors) if e is not None)

    # --------------------------------------------------------------------------------------------- CHECK

    def check(self, req: Request) -> None:
        entry = self.cache.load(req.container_id, req.ifname)
        if entry is None:
            raise DelegateError(
                E_UNKNOWN_CONTAINER,
                f"container {req.container_id} on {req.ifname} is not known",
                "no ADD was cached for it",
            )

        def one(a: Attachment) -> None:
            assert a.result is not None
            self.runner.check(a.conflist, self._rt(req, a), a.result)

        # Side by side, as ADD and DEL; all finish before the answer, which is the first network's error in the
        # container's order.
        futures = self._side_by_side(one, entry.attachments)
        wait(futures)
        for fut in futures:
            fut.result()

    # --------------------------------------------------------------------------------------------- GC, STATUS

    def gc(self, req: Request) -> None:
        """CNI 1.1 GC: every cached attachment not in `cni.dev/valid-attachments` is deleted (best-effort)."""
        valid_list = req.config.get("cni.dev/valid-attachments")
        if not isinstance(valid_list, list):
            raise DelegateError(E_INVALID_CONFIG, "GC needs cni.dev/valid-attachments")
        valid = {(v.get("containerID"), v.get("ifname")) for v in valid_list if isinstance(v, dict)}
        for entry in self.cache.entries():
            if (entry.container_id, entry.ifname) in valid:
                continue
            # A failed DEL stays in the cache; the next GC tries again.
            with self.locks.hold(entry.container_id), contextlib.suppress(DelegateError):
                self._delete_entry(entry, entry.netns)

    def status(self) -> None:
        default = self.default_network()
        nets = self.networks()
        if default is not None and default not in nets:
            raise DelegateError(
                E_NOT_AVAILABLE,
                f"default network {default!r} is not compiled",
                "see `netcomp status` and `journalctl -u netcomp`",
            )
        for name in [default] if default else []:
            for ptype in plugin_types(nets[name]):
                try:
                    find_plugin(ptype, self.runner.plugin_dirs)
                except DelegateError as e:
                    raise DelegateError(E_NOT_AVAILABLE, e.msg, f"default network {name!r}") from None

    def attachments(self) -> dict[str, Any]:
        """What is attached, from the cache (GET /attachments, `netcomp attachments`): per container its
        namespace and, per network, the interface, addresses and MAC its ADD got; and the entries that
        cannot be read."""
        entries, broken = self.cache.scan()
        return {
            "containers": [
                {
                    "containerID": e.container_id,
                    "netns": e.netns,
                    "ifname": e.ifname,
                    "cniVersion": e.cni_version,
                    "networks": network_status(e.attachments, e.ifname),
                }
                for e in sorted(entries, key=lambda e: (e.container_id, e.ifname))
            ],
            "unreadable": [{"file": str(path), "error": why} for path, why in broken],
        }

    # --------------------------------------------------------------------------------------------- hot-plug

    def hotplug(
        self, command: str, container_id: str, netns: str, network: str, ifname: str | None, key_ifname: str
    ) -> dict[str, Any]:
        """Add one network to (or remove it from) a running container, recorded in its cache entry."""
        if not CONTAINER_ID.match(container_id or ""):
            raise DelegateError(E_INVALID_ENV, f"invalid container id {container_id[:80]!r}")
        select.check_ifname(key_ifname)
        with self.locks.hold(container_id):
            entry = self.cache.load(container_id, key_ifname) or Entry(container_id, netns, key_ifname, "1.0.0")
            if command == "DEL":
                gone = [a for a in entry.attachments if a.network == network and (not ifname or a.ifname == ifname)]
                if gone:
                    # The namespace recorded when it was attached: the one the interface lives in.
                    self._delete_entry(entry, entry.netns or netns, gone)
                return {}
            nets = self.networks()
            if network not in nets:
                raise DelegateError(E_INVALID_CONFIG, f"network {network!r} is not compiled on this node")
            prefixes = {n: (nets[n].get("netcomp") or {}).get("interfacePrefix") for n in nets}
            taken = [a.ifname for a in entry.attachments]
            wants = [select.Want(a.network, a.ifname) for a in entry.attachments]
            named = select.name_interfaces(None, key_ifname, [*wants, select.Want(network, ifname)], prefixes)
            new_ifname = named[-1][1]
            if new_ifname in taken or self.link_check(netns, [new_ifname]):
                raise DelegateError(E_INVALID_CONFIG, f"interface {new_ifname!r} already exists in {netns}")
            att = Attachment(network, new_ifname, nets[network])
            held = self.host.hold_links([att])
            try:
                att.result = self.runner.add(att.conflist, RuntimeConf(container_id, netns, new_ifname))
                entry.attachments.append(att)
                entry.netns = netns
                try:
                    self.cache.save(entry)
                except OSError as e:
                    self.runner.delete(att.conflist, RuntimeConf(container_id, netns, new_ifname), att.result)
                    raise HostError(f"cannot write the attachment cache: {e.strerror}") from None
            finally:
                self.host.release_links(held)
            return cniresult.convert(att.result, entry.cni_version)
