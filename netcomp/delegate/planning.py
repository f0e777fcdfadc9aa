"""This module plans an ADD: which networks a container joins and under which names (the default network,
CNI_ARGS, the runtime's args and, for a pod, its annotations), what the pod asks of each attachment, put into it
and checked against what the node's other containers hold, and the MACs and addresses asked for, held while the
ADD is in flight. It also plans a pod's edit (hot-plug by editing its annotations: what is added and removed,
checked before anything changes). Nothing here runs a plugin or writes a record; `netcomp explain` plans with
the same code."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Mapping
from typing import Any

from netcomp.cni.codes import E_INVALID_CONFIG, E_TRY_LATER
from netcomp.cni.invoke import Runner
from netcomp.delegate import poolclaims
from netcomp.delegate.deleting import runtime_conf
from netcomp.delegate.request import Request
from netcomp.errors import DelegateError, HostError
from netcomp.ipam.store import AddressAllocator
from netcomp.pods import asks as podasks
from netcomp.pods import choice, multus, naming
from netcomp.pods.devices import Devices
from netcomp.pods.multus import Ask, AskRules
from netcomp.pods.naming import PodRef
from netcomp.pods.netstatus import Pods
from netcomp.records.files import Records
from netcomp.records.record import Attachment, Record


class Planning:
    """`networks` returns the compiled conflists by network name (the daemon's last good plan), `default_network`
    the node's default; `pods` is the cluster's side of the node's pods (None: no cluster)."""

    def __init__(
        self,
        records: Records,
        networks: Callable[[], Mapping[str, dict[str, Any]]],
        default_network: Callable[[], str | None],
        pods: Pods | None,
    ) -> None:
        self.records, self.networks, self.default_network, self.pods = records, networks, default_network, pods
        self._asked: dict[tuple[str, ...], str] = {}  # (network, mac|ip, value) -> container, ADDs in flight
        self._asked_lock = threading.Lock()

    def plan(self, req: Request) -> tuple[list[Attachment], dict[str, Ask]]:
        """The attachments of an ADD, the default network first, and what the pod asks of each (by interface),
        already put into them: every check that needs no plugin is done by now."""
        nets = self.networks()
        pod, notes = req.pod, self.pod_annotations(req)
        rules = self.pods.ask_rules if self.pods is not None else multus.AskRules()
        default = self.default_network()
        if default is not None:
            default = naming.resolve_node(default, nets)
        wants = [naming.Want(naming.resolve_node(w.network, nets), w.ifname) for w in req.wants]
        asked = choice.plan(pod, notes, nets, rules, req.ifname) if pod is not None else choice.PodNetworks()
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
        named = naming.name_interfaces(default, req.ifname, wants, naming.prefixes(nets))
        rc = req.config.get("runtimeConfig")  # CNI: capabilities the runtime fills in, for delegates declaring them
        caps = dict(rc) if isinstance(rc, dict) else {}
        atts = [Attachment(net, ifname, nets[net], None, req.rest_args, caps) for net, ifname in named]
        for a, element in zip(atts[len(atts) - len(pod_asks) :], pod_asks, strict=True):
            a.element = multus.element_key(a.network, a.ifname, element)  # an annotation edit may detach it
        in_order: list[Ask | None] = [*([default_ask] if default is not None else []), *[None] * len(req.wants)]
        asks = {a.ifname: ask for a, ask in zip(atts, [*in_order, *pod_asks], strict=True) if ask is not None}
        if pod is not None and notes.get(multus.IPAM_CLAIMS) == "true":
            asks = poolclaims.own_claims(atts, asks, pod, rules.fields)
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
                held = podasks.held_by_others(self.records.entries(), container_id)
            podasks.prepare(a, ask, held or [])
            podasks.check_gateways(a, ask)

    def reserve(self, container_id: str, atts: list[Attachment], asks: Mapping[str, Ask]) -> list[tuple[str, ...]]:
        """The MACs and addresses pods ask for, held for the ADD in flight (records show only finished ones):
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


# ------------------------------------------------------------------------------------------ a pod edit planned


def pod_of(entry: Record) -> PodRef | None:
    p = entry.pod
    return PodRef(p["namespace"], p["name"], p.get("uid", "")) if p and p.get("namespace") and p.get("name") else None


def check_edit(
    planning: Planning,
    runner: Runner,
    addresses: AddressAllocator | None,
    devices: Devices | None,
    entry: Record,
    pod: PodRef,
    added: list[tuple[Attachment, Ask]],
    removed: list[Attachment],
) -> None:
    """Every check an ADD of the added elements makes that touches nothing, made before anything is detached:
    a refused edit leaves the pod as it was (docs/kubernetes.md, "Hot-plug by editing the pod"). What each asks
    is put into its attachment here (Planning.prepare_asks: addresses in the subnet, MACs and addresses other
    containers hold, cni-args, capabilities, gateways); then the plugins' preflight, the addresses the
    cluster's claims give another container, and the devices the pod holds, counted as they will be once
    `removed` is gone (on copies: the ADD hands them out itself)."""
    new = [a for a, _ in added]
    asks = {a.ifname: ask for a, ask in added}
    planning.prepare_asks(entry.container_id, new, asks)
    for a in new:
        runner.preflight(a.conflist, runtime_conf(entry, a, entry.netns))
    poolclaims.check(addresses, new, entry.container_id, pod.namespace, asks)
    if devices is not None and new:
        kept = [a for a in entry.attachments if all(a is not r for r in removed)]
        devices.assign(pod, entry.container_id, [copy.copy(a) for a in new], kept, asks)


def diff_edit(
    nets: Mapping[str, dict[str, Any]], rules: AskRules, entry: Record, pod: PodRef, notes: Mapping[str, str]
) -> tuple[list[tuple[Attachment, Ask]], list[Attachment]]:
    """What the annotation asks now and the record does not have (new attachments, with their asks), and what
    the record has that it no longer asks for."""
    asked = choice.plan(pod, notes, nets, rules, entry.ifname)
    default = next((a for a in entry.attachments if a.ifname == entry.ifname), None)
    if asked.default is not None and default is not None and asked.default != default.network:
        raise (asked.default_ask or _whole(pod)).error(
            f"the default network ({entry.ifname}) of a running pod does not change: it is {default.network}",
            "delete the pod and make it again to change it",
        )
    want = [(w.network, w.ifname or "", ask) for w, ask in asked.more]
    multus.check_interfaces([(i, ask) for _, i, ask in want], entry.ifname, default is not None)
    keys = {multus.element_key(n, i, ask): (n, i, ask) for n, i, ask in want}
    current = {a.element: a for a in entry.attachments if a.element}
    removed = [a for k, a in current.items() if k not in keys]
    added = []
    for key, (net, ifname, ask) in keys.items():
        if key in current:
            continue
        a = Attachment(net, ifname, nets[net], None, entry.args, {}, element=key)
        added.append((a, ask))
    return added, removed


def _whole(pod: PodRef) -> Ask:
    return Ask("", pod.namespace, f"pod {pod}")
