"""Hot-plug: one network added to, or taken out of, a running container (`netcomp attach|detach`, POST
/delegate), recorded in its cache entry, through the same ADD and DEL paths as the runtime's requests (host
links, SR-IOV VFs, write-ahead, rollback)."""

from __future__ import annotations

from typing import Any

from netcomp.cni import result as cniresult
from netcomp.cni.codes import E_INVALID_CONFIG
from netcomp.cni.spec import DEFAULT_VERSION
from netcomp.delegate import adding
from netcomp.delegate.delegator import Delegator, prefixes
from netcomp.delegate.request import check_container_id
from netcomp.errors import DelegateError
from netcomp.host import netns as nsutil
from netcomp.pods import naming
from netcomp.records.record import Attachment, Record


def hotplug(
    d: Delegator,
    command: str,
    container_id: str,
    netns: str,
    network: str,
    ifname: str | None,
    key_ifname: str,
    pod: naming.PodRef | None = None,
) -> dict[str, Any]:
    """Add one network to (or remove it from) a running container, recorded in its cache entry, through
    the same ADD and DEL paths as the runtime's requests. `pod`: the container's pod, for a network of a
    device plugin's resource (it takes a device the pod holds and no attachment uses)."""
    check_container_id(container_id)
    naming.check_ifname(key_ifname)
    if ifname:
        naming.check_ifname(ifname)
    with d.locks.hold(container_id):
        entry = d.cache.load(container_id, key_ifname)
        if command == "DEL":
            if entry is None:
                return {}
            gone = [a for a in entry.attachments if _names(a, network) and (not ifname or a.ifname == ifname)]
            if len({a.network for a in gone}) > 1:
                raise DelegateError(
                    E_INVALID_CONFIG,
                    f"network {network!r} is ambiguous in container {container_id}: "
                    + ", ".join(sorted({naming.display_name(a.network, a.conflist) for a in gone})),
                    "name it as namespace/name",
                )
            if gone:
                with nsutil.recorded(entry, netns, entry.netns, pin=True) as target:
                    d.detach(entry, gone, target.path, why="detach", raise_errors=True)
            return {}
        if entry is None:
            entry = Record(container_id, netns, key_ifname, DEFAULT_VERSION)
        else:
            d.undo_unfinished(entry)
        nets = d.networks()
        network = naming.resolve_node(network, nets)
        wants = [naming.Want(a.network, a.ifname) for a in entry.attachments]
        named = naming.name_interfaces(None, key_ifname, [*wants, naming.Want(network, ifname)], prefixes(nets))
        att = Attachment(network, named[-1][1], nets[network])
        adding.attach(d, entry, [att], netns, pod)
        assert att.result is not None
        return cniresult.convert(att.result, entry.cni_version)


def _names(a: Attachment, ref: str) -> bool:
    """Whether `ref` (as `netcomp detach` takes it: a network, namespace/name, or a definition's bare name)
    names the attachment's network, as naming.resolve_node resolves it for attach."""
    ns = naming.namespace_of(a.conflist)
    if ref in (a.network, naming.display_name(a.network, a.conflist)):
        return True
    return ns is not None and "/" not in ref and a.network == naming.network_key(ns, ref)
