"""What an ADD takes from the host beside the plugins' own work, and gives back.

- The VLAN/VXLAN masters networks name (`netcomp.hostLink`): made before any plugin of an ADD runs, held while
  that ADD is in flight, and removed (only those netcomp made) once no compiled network names them, no cached
  attachment uses them and no ADD in flight holds them.
- SR-IOV VFs of the node's own pools (netcomp.yaml sriovPools, for nodes without a device plugin): each sriov
  attachment of a pool's resourceName gets the first free VF of its pool as deviceID, reserved while its ADD is
  in flight; after that the cache records it, and DEL gives it back by removing the entry. A device plugin's
  resource is devices.py's."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from netcomp.cni.codes import E_INVALID_CONFIG, E_IO, E_TRY_LATER
from netcomp.errors import DelegateError, HostError, LinkMismatch
from netcomp.pods.multus import Ask
from netcomp.records.files import Records
from netcomp.records.record import Attachment

log = logging.getLogger("netcomp.delegate")


def host_link_of(conflist: Mapping[str, Any]) -> dict[str, Any] | None:
    """The host link (VLAN/VXLAN master) a compiled network names, if any."""
    link = (conflist.get("netcomp") or {}).get("hostLink")
    return link if isinstance(link, dict) and link.get("name") else None


@dataclass
class HostResources:
    """`host_link` makes a network's link when missing (host.ownedlinks.ensure); `vf_pool` lists a pool's VFs by
    resourceName (KeyError when unknown); `owned_links` / `remove_link`: the links netcomp made (host.ownedlinks)."""

    records: Records
    networks: Callable[[], Mapping[str, dict[str, Any]]]
    host_link: Callable[[dict[str, Any]], object]
    vf_pool: Callable[[str], list[str]]
    owned_links: Callable[[], set[str]]
    remove_link: Callable[[str], object]

    def __post_init__(self) -> None:
        self._vf_lock = threading.Lock()
        self.vfs_reserved: set[str] = set()  # VFs given to ADDs in flight, not yet in the cache
        self._links_lock = threading.Lock()
        self._links_busy: Counter[str] = Counter()  # host links of ADDs in flight, not yet in the cache

    def take_vfs(self, atts: list[Attachment], asks: Mapping[str, Ask] | None = None) -> list[str]:
        """Give each sriov attachment with a resourceName the first free VF of its pool as deviceID, or the VF
        its pod asks for (`asks`: by interface) when that one is of the pool and free."""
        taken: list[str] = []
        asks = asks or {}
        for a in atts:
            ask = asks.get(a.ifname)
            meta = a.conflist.get("netcomp") or {}
            if ask is not None and ask.device_id is not None and meta.get("type") == "sriov":
                fixed = [p.get("deviceID") for p in a.conflist.get("plugins", []) if p.get("type") == "sriov"]
                if not meta.get("resourceName") and ask.device_id not in fixed:
                    raise ask.error(f"deviceID {ask.device_id}: network {a.network} is the one VF {fixed[0]}")
        # Those of a device plugin's resource have their device already (devices.py): the kubelet chose it.
        wanted = [a for a in atts if (a.conflist.get("netcomp") or {}).get("resourceName") and a.device is None]
        if not wanted:
            return taken
        with self._vf_lock:
            in_use = set(self.vfs_reserved)
            for entry in self.records.entries():
                for att in entry.attachments:
                    for p in att.conflist.get("plugins", []):
                        if p.get("type") == "sriov" and p.get("deviceID"):
                            in_use.add(p["deviceID"])
            for a in wanted:
                name = a.conflist["netcomp"]["resourceName"]
                try:
                    members = self.vf_pool(name)
                except KeyError:
                    raise DelegateError(
                        E_INVALID_CONFIG,
                        f"resourceName {name!r} has no pool in netcomp.yaml (sriovPools)",
                        network=a.network,
                    ) from None
                ask = asks.get(a.ifname)
                if ask is not None and ask.device_id is not None:
                    if ask.device_id not in members:
                        raise ask.error(
                            f"deviceID {ask.device_id} is not a VF of pool {name!r} of network {a.network}",
                            f"its VFs: {', '.join(members) or 'none'}",
                        )
                    if ask.device_id in in_use:
                        raise ask.error(f"deviceID {ask.device_id} is in use by another container")
                    free = [ask.device_id]
                else:
                    free = [vf for vf in members if vf not in in_use]
                if not free:
                    raise DelegateError(
                        E_TRY_LATER, f"no free VF in pool {name!r} ({len(members)} VFs, all in use)", network=a.network
                    )
                vf = free[0]
                in_use.add(vf)
                taken.append(vf)
                conf = dict(a.conflist)
                conf["plugins"] = [{**p, "deviceID": vf} if p.get("type") == "sriov" else p for p in conf["plugins"]]
                a.conflist = conf
            self.vfs_reserved.update(taken)
        return taken

    def release_vfs(self, vfs: list[str]) -> None:
        with self._vf_lock:
            self.vfs_reserved.difference_update(vfs)

    def hold_links(self, atts: list[Attachment]) -> list[str]:
        """The VLAN/VXLAN masters the networks name, made before any plugin runs (netcomp owns them). Returns
        their names, held against removal until release_links (the ADD is cached or rolled back by then)."""
        held: list[str] = []
        links = [(a, link) for a in atts if (link := host_link_of(a.conflist))]
        if not links:
            return held
        with self._links_lock:
            for a, link in links:
                try:
                    try:
                        self.host_link(link)
                    except LinkMismatch as e:
                        # netcomp's own link, made for an earlier version of this network: replace it if no
                        # container uses it any more.
                        name = str(link["name"])
                        if not e.owned or self._links_busy[name] or name in self._links_in_cache():
                            raise
                        self.remove_link(name)
                        self.host_link(link)
                except HostError as e:
                    self._release_links_locked(held)
                    raise DelegateError(E_IO, str(e), "no plugin was run", network=a.network) from None
                held.append(str(link["name"]))
                self._links_busy[str(link["name"])] += 1
        return held

    def release_links(self, held: list[str]) -> None:
        if held:
            with self._links_lock:
                self._release_links_locked(held)

    def _release_links_locked(self, held: list[str]) -> None:
        self._links_busy.subtract(held)
        self._links_busy += Counter()  # drop what reached zero

    def _links_named(self) -> set[str]:
        """The host links the compiled networks name."""
        return {str(link["name"]) for c in self.networks().values() if (link := host_link_of(c))}

    def _links_in_cache(self) -> set[str]:
        return {
            str(link["name"])
            for e in self.records.entries()
            for a in e.attachments
            if (link := host_link_of(a.conflist))
        }

    def gc_links(self) -> list[str]:
        """Remove the host links netcomp made that no compiled network names and no attached container uses.
        Called after each compile and after a DEL that let go of a link of a network that is gone."""
        with self._links_lock:
            candidates = self.owned_links() - self._links_named() - set(self._links_busy)
            if not candidates:
                return []
            gone = sorted(candidates - self._links_in_cache())
            for name in gone:
                self.remove_link(name)
            return gone

    def after_detach(self, atts: list[Attachment]) -> None:
        """A detached attachment may have been the last user of a link whose network is gone."""
        names = {str(link["name"]) for a in atts if (link := host_link_of(a.conflist))}
        if not names:
            return
        if names - self._links_named():
            try:
                self.gc_links()
            except HostError as e:  # the detach itself succeeded; the link stays for the next compile
                log.error("cannot remove unused host links: %s", e)
