"""The Delegator: what serves a runtime's requests on this node. It owns the state ADD, DEL, CHECK, GC and STATUS
share (the compiled networks, the records, the plugins' runner, the pool delegates run side by side in, one lock
per container) and builds the parts that act on it: planning.py (an ADD planned), adding.py (the one ADD path)
and deleting.py (the one DEL path, recovery included), each given what it needs. `handle` takes a parsed
request to the path that serves it; hot-plug goes through the same two paths. The request itself is
request.py's, host links and VFs hostres.py's."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from netcomp.cni import result as cniresult
from netcomp.cni.codes import E_INVALID_CONFIG
from netcomp.cni.invoke import Runner
from netcomp.cni.spec import DEFAULT_VERSION, SUPPORTED_VERSIONS
from netcomp.delegate import check_gc_status, listing
from netcomp.delegate.adding import Adding
from netcomp.delegate.deleting import Deleting, Recovered
from netcomp.delegate.hostres import HostResources
from netcomp.delegate.locks import KeyedLocks
from netcomp.delegate.planning import Planning
from netcomp.delegate.request import Reply, Request, check_container_id
from netcomp.errors import DelegateError
from netcomp.host import container
from netcomp.host import netns as nsutil
from netcomp.host.netns import NetnsId
from netcomp.ipam.store import AddressAllocator
from netcomp.pods import naming
from netcomp.pods.devices import Devices
from netcomp.pods.netstatus import Pods
from netcomp.policy.enforcer import Enforcer
from netcomp.records.files import Records
from netcomp.records.record import Attachment, Record


@dataclass
class Delegator:
    """Runs requests against the networks currently compiled on the node.

    `networks` returns the current conflists by network name (the daemon's last good plan); `default_network`
    the node's default; `link_names` the interface names in a netns (a path or an fd on it:
    host.container.link_names); `host_netns` the namespaces never given to a container (host.netns.host_namespaces),
    `host_unsure` why the host's is not known (then every ADD is refused). The parts are given these fields when
    the Delegator is made: set them then, not after (`use_devices` changes the devices of every part)."""

    runner: Runner
    records: Records
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
    # The cluster's side of the node's pods when the node has one: pod annotations in, network status out.
    pods: Pods | None = None
    host_netns: set[NetnsId] = field(default_factory=set)
    host_unsure: str = ""
    # The allocator of the networks whose addresses are netcomp's to give (ipam: {type: cluster}).
    addresses: AddressAllocator | None = None
    # The devices device plugins gave pods, for networks of a device-plugin resource (None: such a network is
    # refused as having no pool); use_devices changes them.
    devices: Devices | None = None
    # Where a device a killed plugin left in a container goes back to: the namespace the delegates run in.
    home_netns: str = "/proc/self/ns/net"
    # MultiNetworkPolicy's rules of the node's pods (a node with a cluster where the API is served).
    policies: Enforcer | None = None
    workers: int = 32
    locks: KeyedLocks = field(default_factory=KeyedLocks)

    def __post_init__(self) -> None:
        self.pool = ThreadPoolExecutor(self.workers, thread_name_prefix="delegate")
        self.host = HostResources(
            self.records, self.networks, self.host_link, self.vf_pool, self.owned_links, self.remove_link
        )
        self.planning = Planning(self.records, self.networks, self.default_network, self.pods)
        self.deleting = Deleting(
            self.records,
            self.runner,
            self.pool,
            self.locks,
            self.host,
            self.addresses,
            self.link_names,
            self.home_netns,
        )
        self.adding = Adding(
            self.records, self.runner, self.pool, self.planning, self.deleting, self.host, self.addresses, self.pods,
            self.link_names, self.host_netns, self.host_unsure,
        )  # fmt: skip
        self.adding.devices, self.adding.policies = self.devices, self.policies
        if self.policies is not None:
            self.deleting.saved = self.policies.saved
        # (container, ifname) of records with attachments to undo, and how many (Deleting keeps it).
        self.unfinished = self.deleting.unfinished

    def use_devices(self, devices: Devices | None) -> None:
        """The devices device plugins gave pods, from now on (the settings changed)."""
        self.devices = self.adding.devices = devices

    def when_undone(self, undone: Callable[[tuple[str, str], bool], object]) -> None:
        """Tell `undone`, with the container's lock held, of a record written with nothing left to undo or
        removed: its (container ID, ifname) and whether the record is still there (cluster/podsync.PodSync.undone:
        a pod edit put off until that undo is done is synced again)."""
        self.deleting.undone = undone

    def close(self) -> None:
        self.pool.shutdown(wait=True)

    def handle(self, req: Request) -> Reply:
        """A runtime's request, served: VERSION, STATUS and GC need no container; ADD, DEL and CHECK hold the
        container's lock (one request per container at a time; different containers in parallel)."""
        if req.command == "VERSION":
            return Reply({"cniVersion": req.cni_version, "supportedVersions": list(SUPPORTED_VERSIONS)})
        if req.command == "STATUS":
            check_gc_status.status(self.networks(), self.default_network(), self.runner.plugin_dirs)
            return Reply({})
        if req.command == "GC":
            check_gc_status.gc(self.records, self.locks, self.deleting, req)
            return Reply({})
        with self.locks.hold(req.container_id):
            if req.command == "ADD":
                return self.adding.add(req)
            if req.command == "DEL":
                return Reply({}, self.deleting.delete(req))
            return Reply({}, check_gc_status.check(self.records, self.runner, self.pool, req))

    def hotplug(
        self,
        command: str,
        container_id: str,
        netns: str,
        network: str,
        ifname: str | None,
        key_ifname: str,
        pod: naming.PodRef | None = None,
    ) -> dict[str, Any]:
        """Add one network to (or remove it from) a running container (`netcomp attach|detach`, POST /delegate),
        recorded in its record, through the same ADD and DEL paths as the runtime's requests (host links, VFs,
        write-ahead, rollback). `pod`: the container's pod, for a network of a device plugin's resource (it takes
        a device the pod holds and no attachment uses)."""
        check_container_id(container_id)
        for name in (key_ifname, *([ifname] if ifname else [])):
            naming.check_ifname(name)
        with self.locks.hold(container_id):
            entry = self.records.load(container_id, key_ifname)
            if command == "DEL":
                if entry is not None:
                    self._detach_one(entry, netns, network, ifname)
                return {}
            if entry is None:
                entry = Record(container_id, netns, key_ifname, DEFAULT_VERSION)
            else:
                self.deleting.undo_unfinished(entry)
            nets = self.networks()
            network = naming.resolve_node(network, nets)
            wants = [naming.Want(a.network, a.ifname) for a in entry.attachments]
            named = naming.name_interfaces(
                None, key_ifname, [*wants, naming.Want(network, ifname)], naming.prefixes(nets)
            )
            att = Attachment(network, named[-1][1], nets[network])
            self.adding.attach(entry, [att], netns, pod)
            assert att.result is not None
            return cniresult.convert(att.result, entry.cni_version)

    def _detach_one(self, entry: Record, netns: str, network: str, ifname: str | None) -> None:
        """A hot-plug DEL: the attachments of `network` (as `netcomp detach` names it: a network, namespace/name, or
        a definition's bare name, resolved as naming.resolve_node resolves it for attach), on `ifname` if given."""

        gone = [
            a
            for a in entry.attachments
            if naming.refers_to(network, a.network, a.conflist) and (not ifname or a.ifname == ifname)
        ]
        if len({a.network for a in gone}) > 1:
            raise DelegateError(
                E_INVALID_CONFIG,
                f"network {network!r} is ambiguous in container {entry.container_id}: "
                + ", ".join(sorted({naming.display_name(a.network, a.conflist) for a in gone})),
                "name it as namespace/name",
            )
        if gone:
            with nsutil.recorded(entry, netns, entry.netns, pin=True) as target:
                self.deleting.detach(entry, gone, target.path, why="detach", raise_errors=True)

    def recover(self, records: list[Record] | None = None) -> Recovered:
        """At start-up, before serving: undo what ADDs left in progress when the daemon died (Deleting.recover).
        `records`: every record, read once by the caller for all of start-up, or here when not given."""
        return self.deleting.recover(records, self.devices, self.networks())

    def retry_unfinished(self) -> tuple[int, int]:
        return self.deleting.retry_unfinished()

    def attachments(self) -> dict[str, Any]:
        return listing.attachments(self.records)

    def gc_host_links(self) -> list[str]:
        """Remove the host links netcomp made that nothing needs any more (HostResources.gc_links)."""
        return self.host.gc_links()
