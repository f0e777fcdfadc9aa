"""The Delegator: what ADD, DEL, CHECK, GC and STATUS across the delegates of a container share (the networks,
the cache, the plugins' runner, the pool they run side by side in), an ADD's planning and the one DEL path,
written so that the daemon may die at any instant and lose nothing: nothing runs before the write-ahead is on
disk (adding.py's `attach`, the one ADD path), an attachment still `adding` is undone and never guessed done,
DEL and CHECK act only on the namespace of the recorded identity, and a DEL tries every attachment side by
side, keeping what failed with its error for the runtime's retry. docs/reliability.md, "The write-ahead record"
and "Namespaces by identity", says why each holds. Host links and SR-IOV VFs are hostres.py's; the request
itself is request.py's."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from netcomp import faults
from netcomp.cni import result as cniresult
from netcomp.cni.codes import (
    E_INVALID_CONFIG,
    E_IO,
    E_OTHER,
    E_TRY_LATER,
)
from netcomp.cni.invoke import Runner, RuntimeConf
from netcomp.delegate import poolclaims
from netcomp.delegate.hostres import HostResources
from netcomp.delegate.locks import KeyedLocks
from netcomp.delegate.request import Request
from netcomp.errors import DelegateError, HostError, NetcompError
from netcomp.host import container
from netcomp.host import netns as nsutil
from netcomp.host.netns import NetnsId
from netcomp.ipam.store import AddressAllocator
from netcomp.pods import asks as podasks
from netcomp.pods import choice, multus, naming
from netcomp.pods.devices import Devices
from netcomp.pods.multus import Ask
from netcomp.pods.netstatus import Pods
from netcomp.records.files import Records
from netcomp.records.record import Attachment, Record

log = logging.getLogger("netcomp.delegate")


def _now(fn: Callable[..., Any], *args: Any) -> Future[Any]:
    """fn(*args) run here, as a finished Future (what pool.submit would give)."""
    fut: Future[Any] = Future()
    try:
        fut.set_result(fn(*args))
    except Exception as e:
        fut.set_exception(e)
    return fut


def why_unwritten(e: OSError | ValueError) -> str:
    """Why the cache could not be written: the disk's error, or a result that cannot be written as JSON."""
    return (e.strerror or str(e)) if isinstance(e, OSError) else str(e)


def as_delegate_error(e: Exception, network: str) -> DelegateError:
    if isinstance(e, DelegateError):
        return e
    if isinstance(e, HostError):
        return DelegateError(E_IO, str(e), network=network)
    return DelegateError(E_OTHER, f"{type(e).__name__}: {e}", network=network)  # a bug; the rest still happens


@dataclass
class Delegator:
    """Runs requests against the networks currently compiled on the node.

    `networks` returns the current conflists by network name (the daemon's last good plan); `default_network`
    the node's default; `link_names` the interface names in a netns (a path or an fd on it:
    host.container.link_names); `host_netns` the namespaces never given to a container (host.netns.host_namespaces);
    """

    runner: Runner
    cache: Records
    networks: Callable[[], Mapping[str, dict[str, Any]]]
    default_network: Callable[[], str | None]
    link_names: Callable[[str | int], set[str]] = container.link_names
    # Makes a network's host link (its VLAN/VXLAN master) when missing; host.ownedlinks.ensure in the daemon.
    host_link: Callable[[dict[str, Any]], object] = lambda link: None
    # The VFs (PCI addresses, in allocation order) of an SR-IOV pool by resourceName; raises when unknown.
    vf_pool: Callable[[str], list[str]] = lambda name: []
    # The host links netcomp made that exist now, and removing one of them (host.ownedlinks.owned / remove).
    owned_links: Callable[[], set[str]] = lambda: set()
    remove_link: Callable[[str], object] = lambda name: False
    # The cluster (cluster.intents.Cluster) when the node has one: pod annotations in, network status out.
    pods: Pods | None = None
    host_netns: set[NetnsId] = field(default_factory=set)
    host_unsure: str = ""  # why the host's namespace is not known (then every ADD is refused)
    # The allocator of the networks whose addresses are netcomp's to give (ipam: {type: cluster}).
    addresses: AddressAllocator | None = None
    # The devices device plugins gave pods, for networks of a device-plugin resource (None: such a network is
    # refused as having no pool).
    devices: Devices | None = None
    # Where a device a killed plugin left in a container goes back to: the namespace the delegates run in.
    home_netns: str = "/proc/self/ns/net"
    workers: int = 32
    locks: KeyedLocks = field(default_factory=KeyedLocks)
    # Told, with the container's lock held, of a record written with nothing left to undo or removed: its
    # (container ID, ifname) and whether the record is still there (delegate/podsync.PodSync.undone: a pod edit
    # put off until that undo is done is synced again).
    undone: Callable[[tuple[str, str], bool], object] = lambda key, kept: None

    def __post_init__(self) -> None:
        self.pool = ThreadPoolExecutor(self.workers, thread_name_prefix="delegate")
        # (container, ifname) of entries with attachments to undo, and how many: kept as entries are written,
        # so that status and the periodic retry need not read every entry.
        self.unfinished: dict[tuple[str, str], int] = {}
        self._asked: dict[tuple[str, ...], str] = {}  # (network, mac|ip, value) -> container, ADDs in flight
        self._asked_lock = threading.Lock()
        self.host = HostResources(
            self.cache, self.networks, self.host_link, self.vf_pool, self.owned_links, self.remove_link
        )

    def close(self) -> None:
        self.pool.shutdown(wait=True)

    # --------------------------------------------------------------------------------------------- an ADD planned

    def plan_attachments(self, req: Request) -> tuple[list[Attachment], dict[str, Ask]]:
        """The attachments of an ADD, the default network first, and what the pod asks of each (by interface),
        already put into them: every check that needs no plugin is done by now."""
        nets = self.networks()
        pod, notes = req.pod, self.pod_annotations(req)
        policy = self.pods.policy if self.pods is not None else multus.Policy()
        default = self.default_network()
        if default is not None:
            default = naming.resolve_node(default, nets)
        wants = [naming.Want(naming.resolve_node(w.network, nets), w.ifname) for w in req.wants]
        asked = choice.plan(pod, notes, nets, policy, req.ifname) if pod is not None else choice.PodNetworks()
        if asked.default is not None:
            default = asked.default  # the pod's choice, in the node default's place
        wants += [w for w, _ in asked.more]
        default_ask, pod_asks = asked.default_ask, [a for _, a in asked.more]
        if default is None and not wants:
            raise DelegateError(
                E_INVALID_CONFIG,
                "no networks to join: no defaultNetwork is configured and none "
                f"was asked for ({naming.ARGS_KEY} in CNI_ARGS)",
            )
        multus.check_interfaces([(w.ifname or "", a) for w, a in asked.more], req.ifname, default is not None)
        named = naming.name_interfaces(default, req.ifname, wants, prefixes(nets))
        caps = _capability_args(req.config)
        atts = [Attachment(net, ifname, nets[net], None, req.rest_args, caps) for net, ifname in named]
        for a, element in zip(atts[len(atts) - len(pod_asks) :], pod_asks, strict=True):
            a.element = multus.element_key(a.network, a.ifname, element)  # an annotation edit may detach it
        in_order: list[Ask | None] = [*([default_ask] if default is not None else []), *[None] * len(req.wants)]
        asks = {a.ifname: ask for a, ask in zip(atts, [*in_order, *pod_asks], strict=True) if ask is not None}
        self.prepare_asks(req.container_id, atts, asks)
        return atts, asks

    def prepare_asks(self, container_id: str, atts: list[Attachment], asks: Mapping[str, Ask]) -> None:
        """Put what the pod asks of each attachment into it (asks.prepare), checked against what the node's other
        containers hold."""
        held: list[Attachment] | None = None
        for a in atts:
            ask = asks.get(a.ifname)
            if ask is None:
                continue
            if held is None and (ask.ips or ask.mac):
                held = podasks.held_by_others(self.cache.entries(), container_id)
            podasks.prepare(a, ask, held or [])
            podasks.check_gateways(a, ask)

    def reserve(self, container_id: str, atts: list[Attachment], asks: Mapping[str, Ask]) -> list[tuple[str, ...]]:
        """The MACs and addresses pods ask for, held for the ADD in flight (the cache shows only finished ones):
        two pods asking for one at once cannot both pass. DelegateError 7 naming the item when one is held."""
        keys: list[tuple[str, ...]] = []
        for a in atts:
            ask = asks.get(a.ifname)
            if ask is None:
                continue
            keys += [(a.network, "mac", ask.mac)] if ask.mac else []
            keys += [(a.network, "ip", str(ip.ip)) for ip in ask.ips]
        with self._asked_lock:
            for key in keys:
                other = self._asked.get(key)
                if other is not None and other != container_id:
                    ask = next(asks[a.ifname] for a in atts if a.network == key[0] and a.ifname in asks)
                    raise ask.error(f"{key[1]} {key[2]} on network {key[0]} is being given to another container now")
            for key in keys:
                self._asked[key] = container_id
        return keys

    def unreserve(self, keys: list[tuple[str, ...]]) -> None:
        with self._asked_lock:
            for key in keys:
                self._asked.pop(key, None)

    def pod_annotations(self, req: Request) -> Mapping[str, str]:
        """The pod's annotations netcomp reads ({} with no cluster, no pod, or a pod the API server does not
        know); DelegateError 11 when the API server cannot say."""
        if req.pod is None or self.pods is None:
            return {}
        try:
            return self.pods.annotations(req.pod)
        except HostError as e:
            raise DelegateError(
                E_TRY_LATER,
                f"cannot read pod {req.pod} from the Kubernetes API server: {e}",
                "the networks it asks for are in its annotations; no plugin was run",
            ) from None

    def save(self, entry: Record) -> None:
        """Write the entry (OSError as the cache raises it), or remove it when it holds nothing."""
        key = (entry.container_id, entry.ifname)
        if entry.attachments:
            self.cache.save(entry)
        else:
            self.cache.remove(*key)
        n = sum(1 for a in entry.attachments if a.state == "undo")
        if n:
            self.unfinished[key] = n
        else:
            self.unfinished.pop(key, None)
        if not entry.unfinished:  # every path that finishes an undo writes the record here
            self.undone(key, bool(entry.attachments))

    def side_by_side(self, fn: Callable[[Attachment], Any], atts: list[Attachment]) -> list[Future[Any]]:
        """fn(a) for each attachment side by side, in atts' order: all but the first handed to the pool, then the
        first run here, by the request's own thread, which would only wait otherwise (a lone one is no hand-off
        at all)."""
        rest = [self.pool.submit(fn, a) for a in atts[1:]]
        return [_now(fn, atts[0]), *rest] if atts else []

    def gc_host_links(self) -> list[str]:
        """Remove the host links netcomp made that nothing needs any more (HostResources.gc_links)."""
        return self.host.gc_links()

    @staticmethod
    def answer(runtime_ifname: str, version: str, atts: list[Attachment]) -> dict[str, Any]:
        # Like Multus: the runtime gets the result of the network on its own CNI_IFNAME (the default network),
        # or of the first attachment when there is no default.
        main = next((a for a in atts if a.ifname == runtime_ifname), atts[0])
        assert main.result is not None
        return cniresult.convert(main.result, version)

    @staticmethod
    def runtime_conf(entry: Record, a: Attachment, netns: str) -> RuntimeConf:
        return RuntimeConf(entry.container_id, netns, a.ifname, a.args, a.capability_args)

    # --------------------------------------------------------------------------------------------- DEL

    def delete(self, req: Request) -> tuple[str, ...]:
        """What the container's record holds detached and the record removed; the networks it named (on an
        error too: the error's `networks`, for the request's log line)."""
        entry = self.cache.load(req.container_id, req.ifname)
        if entry is None:
            return ()  # nothing of ours (DEL is idempotent)
        networks = tuple(a.network for a in entry.attachments)
        try:
            with nsutil.recorded(entry, req.netns, entry.netns, pin=True) as target:
                if not target.found and entry.attached:
                    log.info(
                        "DEL of container %s: its network namespace is gone; freeing what its plugins hold outside it",
                        entry.container_id,
                    )
                unfinished = entry.unfinished
                self.detach(entry, list(entry.attachments), target.path, why="DEL", raise_errors=True)
                if unfinished:  # an ADD that never finished: what its killed plugins left goes too
                    self.sweep(entry, target, unfinished)
        except NetcompError as e:
            e.networks = networks
            raise
        return networks

    def detach(
        self, entry: Record, atts: list[Attachment], netns: str, *, why: str, raise_errors: bool = False
    ) -> list[DelegateError]:
        """DEL `atts` of the entry in `netns` ("" when the namespace is gone), side by side (their networks are
        independent; each conflist's own plugins go in reverse). What was deleted leaves the entry (the file goes
        when it is empty); what failed stays as `undo` with its error, logged. The one DEL path: runtime DEL,
        hot-plug DEL, rollback, GC and recovery."""

        def one(a: Attachment) -> None:
            self.runner.delete(a.conflist, self.runtime_conf(entry, a, netns), a.result)
            self._give_back(a, why, entry.container_id)  # only once its delegate has let go of them

        futures = self.side_by_side(one, atts)
        errors: list[DelegateError] = []
        done: list[Attachment] = []
        for a, fut in zip(atts, futures, strict=True):
            try:
                fut.result()
                done.append(a)
            except Exception as e:
                err = as_delegate_error(e, a.network)
                # A plugin's DEL of what its ADD never made may fail (host-device's "failed to find" the interface
                # it never moved): an attachment with no result was never made whole, and when its interface is
                # not in the namespace there is nothing of it to DEL.
                never_made = a.result is None
                if (err.permanent or never_made) and self._nothing_left(a, netns, why, entry.container_id, err):
                    done.append(a)
                    continue
                errors.append(err)
                a.state, a.error = "undo", err.full_msg + (f" ({err.details})" if err.details else "")
                a.permanent = err.permanent
                log.error(
                    "%s of container %s: DEL of network %s on %s failed, kept for a later DEL%s: %s",
                    why,
                    entry.container_id,
                    a.network,
                    a.ifname,
                    " (no retry can change this: it goes once its interface is gone)" if a.permanent else "",
                    a.error,
                )
        faults.point("after-del")
        entry.attachments = [a for a in entry.attachments if all(a is not d for d in done)]
        try:
            self.save(entry)
        except (OSError, ValueError) as e:
            # The entry on disk still names everything this DEL tried: a later DEL tries it again.
            log.error("cannot record the DEL of container %s: %s", entry.container_id, why_unwritten(e))
        self.host.after_detach(done)
        if errors and raise_errors:
            # The error of the last network, as a DEL in reverse order would have met it first.
            raise errors[-1]
        return errors

    def _give_back(self, a: Attachment, why: str, cid: str) -> None:
        """What netcomp gave a detached attachment: its addresses, its device-info copy (the device itself is
        the kubelet's; a copy that cannot be removed is left to start-up's sweep)."""
        poolclaims.give_back(self.addresses, a)
        if a.device:
            try:
                Devices.remove_info(a)
            except HostError as e:
                log.error("%s of container %s: %s", why, cid, e)

    def _nothing_left(self, a: Attachment, netns: str, why: str, cid: str, err: DelegateError) -> bool:
        """After a DEL of `a` failed for a reason no retry changes (its plugin refuses the config's version, its
        arguments cannot be exec'd), or of an attachment its ADD never made whole: whether nothing of it is left,
        so that it can be forgotten rather than kept for ever. Nothing is left when its namespace is gone (`netns`
        "": recorded() found it nowhere) or has no interface of its name; what netcomp gave it (addresses, a
        device-info copy) is given back then."""
        try:
            left = bool(netns) and a.ifname in self.link_names(netns)
        except (HostError, DelegateError):
            return False
        if left:
            return False
        self._give_back(a, why, cid)
        log.warning(
            "%s of container %s: DEL of network %s on %s failed (%s); nothing of it is left in its namespace: "
            "forgotten",
            why,
            cid,
            a.network,
            a.ifname,
            err.full_msg,
        )
        return True

    def sweep(self, entry: Record, target: nsutil.Target, undone: list[Attachment]) -> None:
        """After an undo of `undone`: what the namespace has beyond what it had when the ADD began and what is
        still attached, and that a plugin killed half-way (a timeout, or the daemon killed with its delegates, as
        systemd's KillMode=mixed does) leaves (container.sweep: a temporary-named link, a device it was given),
        which its DEL does not find. Best-effort."""
        if entry.links_before is None or not target.found or not target.path or not undone:
            return
        try:
            strays = self.link_names(target.path) - set(entry.links_before) - {a.ifname for a in entry.attachments}
            strays.discard("lo")
            devices = {
                str(v)
                for a in undone
                for p in a.conflist.get("plugins") or []
                for k, v in p.items()
                if k in ("device", "deviceID", "pciBusID") and isinstance(v, str)
            }
            done = container.sweep(target.path, strays, self.home_netns, devices) if strays else []
            if done:
                log.warning(
                    "container %s: interfaces a killed plugin left in its namespace: %s",
                    entry.container_id,
                    "; ".join(done),
                )
        except (HostError, DelegateError) as e:
            log.error("container %s: cannot look for interfaces a killed plugin left: %s", entry.container_id, e)

    def undo_unfinished(self, entry: Record) -> None:
        """DEL what an ADD left unfinished (or a rollback left undone) before anything else is done to the
        container; DelegateError when some of it cannot be undone yet."""
        todo = entry.unfinished
        if not todo:
            return
        with nsutil.recorded(entry, entry.netns, pin=True) as target:
            errors = self.detach(entry, todo, target.path, why="undo of an unfinished ADD")
            if not errors:
                self.sweep(entry, target, todo)
        if errors:
            raise DelegateError(
                E_TRY_LATER,
                f"container {entry.container_id} has attachments an earlier ADD left that cannot be undone yet: "
                f"{errors[-1].full_msg}",
                "DEL the container, or fix what the plugin reports",
            )


def prefixes(nets: Mapping[str, Mapping[str, Any]]) -> dict[str, str | None]:
    return {n: (c.get("netcomp") or {}).get("interfacePrefix") for n, c in nets.items()}


def _capability_args(config: Mapping[str, Any]) -> dict[str, Any]:
    """The runtime's runtimeConfig (CNI spec: capabilities the runtime fills in), passed on to the delegates
    that declare them."""
    rc = config.get("runtimeConfig")
    return dict(rc) if isinstance(rc, dict) else {}
