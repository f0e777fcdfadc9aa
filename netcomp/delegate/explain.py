"""Why a pod or container has (or would get) the networks it has: POST /explain, `netcomp explain`.

Nothing here decides anything: the networks, their interface names, the addresses asked for and the devices
come from the ADD's own planning (Planning.plan: choice.py, multus.py, naming.py, asks.py, and
devices.py for the kubelet's devices), and a running pod's changes from the hot-plug's own comparison
(podsync.py), so that every refusal reads word for word as the ADD (or the hot-plug) would give it. What is added
is the why of each choice, for a person; nothing is claimed, made, reserved or run."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from netcomp.cni.codes import E_INVALID_ENV
from netcomp.cni.spec import DEFAULT_VERSION
from netcomp.delegate import poolclaims
from netcomp.delegate.delegator import Delegator
from netcomp.delegate.hostres import host_link_of
from netcomp.delegate.planning import check_edit, diff_edit, pod_of
from netcomp.delegate.request import Request, Subject, check_container_id
from netcomp.errors import DelegateError, HostError
from netcomp.ipam.pool import Pool
from netcomp.pods import choice, naming
from netcomp.pods.devices import Devices
from netcomp.pods.multus import Ask
from netcomp.pods.netstatus import network_status
from netcomp.policy import nft
from netcomp.records.record import Attachment, Record

# The container ID a plan of a pod that has no container here is made for: no record is ever under it (a CNI
# container ID has no spaces), so the addresses and MACs other containers hold all count against it.
NOT_STARTED = "(not started)"


class Explainer:
    """Explains, for `netcomp explain`, with the ADD's own parts: `d`'s planning, records and devices, its
    addresses and pods, its runner for the hot-plug's checks."""

    def __init__(self, d: Delegator) -> None:
        self.records, self.planning, self.adding, self.runner = d.records, d.planning, d.adding, d.runner
        self.networks, self.default_network, self.owned_links = d.networks, d.default_network, d.owned_links
        self.addresses, self.pods, self.policies = d.addresses, d.pods, d.policies

    @property
    def devices(self) -> Devices | None:
        return self.adding.devices

    def explain(self, subject: Subject, *, hotplug: bool = True) -> dict[str, Any]:
        """The explanation document (see docs/operations.md): the subject, the networks an ADD would give it now and
        why, the refusal it would meet, and for a container attached here its record beside what its pod asks now
        (`hotplug`: whether the daemon follows edits of a running pod's annotations)."""
        entry = self._find(subject)
        if entry is not None:
            pod = pod_of(entry)
        else:
            pod = subject.pod or (naming.pod_ref(subject.cni_args) if subject.cni_args else None)
        doc = _doc(subject, entry, pod)
        if subject.container is not None and entry is None:
            why = f"container {subject.container} has no record on this node: it was never attached here, or it was "
            why += "deleted"
            doc["refusal"] = _refusal(DelegateError(E_INVALID_ENV, why, "see `netcomp attachments`"))
            return doc
        if entry is not None:
            doc["record"] = _record(entry)
            if self.policies is not None:  # MultiNetworkPolicy: the policies that select it and the rules in force
                doc["policies"] = _with_table(self.policies.explain(entry.container_id, entry.ifname), entry)
            if pod is None:  # what its runtime asked for (CNI_ARGS) is not recorded: only the record says
                doc["changes"] = self._changes(entry, None, None, hotplug)
                return doc
        notes: Mapping[str, str] | None = None
        atts: list[Attachment] = []
        asks: dict[str, Ask] = {}
        try:
            req = _request(subject, entry, pod)
            notes = self.planning.pod_annotations(req)  # the ADD's own words when the API server cannot say
            atts, asks = self.planning.plan(req)
            if self.devices is not None:
                self.devices.assign(req.pod, req.container_id, atts, [], asks)
        except DelegateError as e:
            doc["refusal"] = _refusal(e)
            atts, asks = [], {}
        doc["annotations"] = dict(notes) if notes is not None and pod is not None else None
        if atts:
            reasons = self._reasons(req, atts, asks)
            cid = req.container_id
            ns = req.pod.namespace if req.pod is not None else None
            doc["networks"] = [
                self._network(cid, ns, a, asks.get(a.ifname), *why) for a, why in zip(atts, reasons, strict=True)
            ]
        if entry is not None:
            doc["changes"] = self._changes(entry, pod, notes, hotplug)
        return doc

    def _find(self, subject: Subject) -> Record | None:
        """The record of the subject's container on this node: by ID, or the pod's (its sandbox's) by name."""
        if subject.container is not None:
            check_container_id(subject.container)
            return next((e for e in self.records.entries() if e.container_id == subject.container), None)
        if subject.pod is not None:
            key = (subject.pod.namespace, subject.pod.name)
            for e in self.records.entries():
                p = pod_of(e)
                if p is not None and (p.namespace, p.name) == key and (not subject.pod.uid or p.uid == subject.pod.uid):
                    return e
        return None

    def _reasons(self, req: Request, atts: list[Attachment], asks: Mapping[str, Ask]) -> list[tuple[str, str]]:
        """Why each planned attachment is there and why its interface has its name, in plan_attachments' order: the
        default network (on the runtime's interface), what CNI_ARGS and the runtime's args ask, then the pod's
        annotation items, in their order."""
        out: list[tuple[str, str]] = []
        if atts[0].ifname == req.ifname:
            ask = asks.get(req.ifname)
            why = (
                ask.where if ask is not None else f"the node's defaultNetwork ({self.default_network()}, netcomp.yaml)"
            )
            out.append((why, f"the runtime's interface (CNI_IFNAME {req.ifname})"))
        from_args = len(naming.split_cni_args(req.args)[0])
        for k, want in enumerate(req.wants):
            a = atts[len(out)]
            source = (
                f"CNI_ARGS {naming.ARGS_KEY}" if k < from_args else f"the runtime's args ({naming.RUNTIME_ARGS_KEY})"
            )
            out.append((f"{source}: {want.network}", _want_name(want, a)))
        for place, a in enumerate(atts[len(out) :], start=1):
            ask = asks[a.ifname]
            out.append((ask.where, _item_name(ask, a, place)))
        return out

    def _network(
        self, container_id: str, namespace: str | None, a: Attachment, ask: Ask | None, why: str, name_why: str
    ) -> dict[str, Any]:
        meta = a.conflist.get("netcomp") or {}
        link = host_link_of(a.conflist)
        out: dict[str, Any] = {
            "network": naming.display_name(a.network, a.conflist),
            "interface": a.ifname,
            "type": meta.get("type"),
            "why": why,
            "nameWhy": name_why,
            "addresses": self._addresses(a, ask, container_id, namespace),
            "device": {"resource": a.device.get("resource"), "id": a.device.get("id")} if a.device else None,
            "hostLink": None,
        }
        if link is not None:
            present = link["name"] in self.owned_links()
            what = f"{link.get('kind')} over {link.get('link')}"
            out["hostLink"] = f"{link['name']} ({what}): " + (
                "present" if present else "made by the ADD (not there now)"
            )
        return out

    def _addresses(self, a: Attachment, ask: Ask | None, container_id: str, namespace: str | None) -> dict[str, Any]:
        """Where the attachment's addresses come from: netcomp's cluster pool (how many are free, whether another
        holds an address the pod asks for: named as the ADD's refusal names it, poolclaims.holding), or the IPAM
        plugin of its conflist; and what its item asks."""
        out: dict[str, Any] = {"asked": [str(ip) for ip in ask.ips] if ask is not None else []}
        pool = Pool.of(a.network, a.conflist)
        if pool is None:
            out["from"] = _ipam_text(a.conflist)
            return out
        if self.addresses is None:
            out["from"] = "netcomp's cluster pool (this daemon has no address store)"
            return out
        if ask is not None and ask.ipam_claim is not None:
            out["from"] = (f"IPAMClaim {namespace or '?'}/{ask.ipam_claim}: the address it holds (status.ips), "
                           "on any node the pod runs on; a new one of the cluster pool at its first ADD")  # fmt: skip
            return out
        shown = self.addresses.show({a.network: pool})
        pools: list[dict[str, Any]] = shown[0]["pools"] if shown else []
        free = [f"{p['ranges']} ({p['free']} of {p['size']} free)" for p in pools]
        out["from"] = "netcomp's cluster pool: " + "; ".join(free)
        holders = {c.address: c for c in self.addresses.claims(a.network) if c.container_id != container_id}
        held = []
        for ip in ask.ips if ask is not None else ():
            c = holders.get(str(ip.ip))
            if c is not None:
                held.append(f"{ip.ip} is {poolclaims.holding(c.holder(), namespace)}")
        out["held"] = held
        return out

    def _changes(
        self, entry: Record, pod: naming.PodRef | None, notes: Mapping[str, str] | None, hotplug: bool
    ) -> dict[str, Any]:
        """What the pod's annotation asks now against the record, as the hot-plug compares them (podsync): what it
        attaches, what it detaches, or why it refuses the edit."""
        out: dict[str, Any] = {"attach": [], "detach": [], "refusal": None, "why": ""}
        if pod is None or self.pods is None:
            out["why"] = "not a pod's container: only its runtime changes its networks"
            return out
        if notes is None:
            out["why"] = "the pod's annotations cannot be read now"
            return out
        try:
            added, removed = diff_edit(self.networks(), self.pods.ask_rules, entry, pod, notes)
            check_edit(self.planning, self.runner, self.addresses, self.adding.devices, entry, pod, added, removed)
        except DelegateError as e:
            out["refusal"] = _refusal(e)
            return out
        out["attach"] = [
            {"network": naming.display_name(a.network, a.conflist), "interface": a.ifname, "why": ask.where}
            for a, ask in added
        ]
        out["detach"] = [
            {"network": naming.display_name(a.network, a.conflist), "interface": a.ifname} for a in removed
        ]
        if not added and not removed:
            out["why"] = "the record is what the annotation asks"
        elif not hotplug:
            out["why"] = "kubernetes.hotplug is off: the edit takes effect when the pod is made again"
        return out


def _request(subject: Subject, entry: Record | None, pod: naming.PodRef | None) -> Request:
    """The ADD the subject's runtime would send (its CNI_ARGS parsed as parse_request parses them), for the
    container recorded (the addresses it holds are its own) or for none yet."""
    if entry is not None:
        args, ifname, cid = entry.args, entry.ifname, entry.container_id
    else:
        args, ifname, cid = subject.cni_args or "", subject.ifname, NOT_STARTED
    if pod is not None and naming.pod_ref(args) is None:
        args = f"K8S_POD_NAMESPACE={pod.namespace};K8S_POD_NAME={pod.name}" + (f";{args}" if args else "")
        if pod.uid:
            args += f";K8S_POD_UID={pod.uid}"
    naming.check_ifname(ifname)
    wants, rest = naming.split_cni_args(args)
    config = {"cniVersion": DEFAULT_VERSION}
    return Request("ADD", cid, "", ifname, args, config, tuple(wants), rest, naming.pod_ref(args), "")


def _doc(
    subject: Subject, entry: Record | None, pod: naming.PodRef | None, refusal: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "pod": str(pod) if pod is not None else None,
        "container": entry.container_id if entry is not None else subject.container,
        "ifname": entry.ifname if entry is not None else subject.ifname,
        "running": entry is not None,
        "cniArgs": subject.cni_args,
        "networks": [],
        "refusal": refusal,
        "record": None,
        "changes": None,
    }


def _refusal(e: DelegateError) -> dict[str, Any]:
    """As the runtime would read it in the ADD's CNI error."""
    return {"code": e.code, "msg": e.full_msg, "details": e.details}


# ------------------------------------------------------------------------------------------------ why


def _prefix(a: Attachment) -> str | None:
    value = (a.conflist.get("netcomp") or {}).get("interfacePrefix")
    return value if isinstance(value, str) and value else None


def _want_name(want: naming.Want, a: Attachment) -> str:
    if want.ifname:
        return f"asked for by name ({want.network}@{want.ifname})"
    prefix = _prefix(a)
    if prefix:
        return f"the network's interfacePrefix {prefix!r} and the next index free for that prefix"
    return f"{naming.DEFAULT_PREFIX!r} (the network has no interfacePrefix) and the next index free"


def _item_name(ask: Ask, a: Attachment, place: int) -> str:
    """`place`: the item's place among the annotation's items that are not on the runtime's interface, from 1 (as
    podplan names them: Multus counts the cluster default network as net0, DANM its first connection as eth0)."""
    if ask.ifname:
        return "the item's own interface"
    if ask.kind is not None:  # DANM's: networks._danm
        prefix = _prefix(a)
        why = f"the network's container_prefix {prefix!r}" if prefix else f"{choice.DANM_PREFIX!r}: no container_prefix"
        return f"DANM: connection {place} of the annotation is {prefix or choice.DANM_PREFIX}{place} ({why})"
    return (
        f"Multus: item {place - 1} of the annotation is {choice.MULTUS_PREFIX}{place} (the cluster default "
        f"network is {choice.MULTUS_PREFIX}0), whatever the network's interfacePrefix"
    )


# ------------------------------------------------------------------------------------------------ what


def _ipam_text(conflist: Mapping[str, Any]) -> str:
    """The IPAM section of the first plugin that has one, for a person: its type and subnets or addresses."""
    for p in conflist.get("plugins") or []:
        ipam = p.get("ipam") if isinstance(p, dict) else None
        if not isinstance(ipam, dict) or not ipam.get("type"):
            continue
        kind = str(ipam["type"])
        ranges = [r for rs in ipam.get("ranges") or [] if isinstance(rs, list) for r in rs if isinstance(r, dict)]
        if ipam.get("subnet"):
            ranges.insert(0, ipam)
        parts = [
            str(r.get("subnet")) + (f" from {r['rangeStart']}" if r.get("rangeStart") else "")
            + (f" to {r['rangeEnd']}" if r.get("rangeEnd") else "")
            for r in ranges
        ]  # fmt: skip
        parts += [str(x.get("address")) for x in ipam.get("addresses") or [] if isinstance(x, dict)]
        return f"the {kind} IPAM plugin" + (f": {', '.join(parts)}" if parts else "")
    return "no IPAM: no address (layer 2 only)"


# ------------------------------------------------------------------------------------------------ a running pod


def _with_table(doc: dict[str, Any] | None, entry: Record) -> dict[str, Any] | None:
    """The rules in force, with what the pod's table holds in the kernel: packets dropped per chain, and the
    table's rules and set elements counted (or why it cannot be read)."""
    if doc is None or not doc.get("interfaces") or not entry.netns:
        return doc
    try:
        state = nft.read(entry.netns)
    except (HostError, DelegateError) as e:
        doc["kernel"] = f"the table cannot be read: {e}"
        return doc
    if state is None:
        doc["kernel"] = "the pod's namespace has no netcomp table"
        return doc
    doc["dropped"] = state.dropped
    doc["kernel"] = f"{sum(state.rules.values())} rules, {sum(state.elements.values())} addresses in sets"
    return doc


def _record(entry: Record) -> list[dict[str, Any]]:
    """What the container's record says it got: per attachment its network, interface, addresses, MAC, device,
    state, and the annotation element it was attached for."""
    out = []
    for n, a in zip(network_status(entry.attachments, entry.ifname), entry.attachments, strict=True):
        n["state"] = a.state
        n["element"] = a.element or None
        n["device"] = {"resource": a.device.get("resource"), "id": a.device.get("id")} if a.device else None
        claimed = sorted({str(c["ipam_claim"]).rpartition("/")[0] for c in a.claims if c.get("ipam_claim")})
        n["ipamClaim"] = claimed[0] if claimed else None  # its addresses are the IPAMClaim's (namespace/name)
        out.append(n)
    return out
