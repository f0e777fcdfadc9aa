"""This module works out what the policies come to for one pod of the node: which policies select it on which of its
interfaces (those of the networks a policy is for), and what each lets through, its peers resolved to their
addresses on that same network and its named ports to numbers. Semantics are Kubernetes' NetworkPolicy's, per
network: a pod selected for a direction is isolated in it on that network's interfaces only, and what passes is
the union of what the selecting policies allow. What the cluster holds (policies, namespaces, other pods) comes
through a View, read through Peers, which resolves each rule's peers once and shares the answer among every pod
the rule's policy selects; the answer is a podrules.PodRules, which nft.py writes. `touched` says which
namespaces' pods a change of a pod or a namespace's labels can change the rules of."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network
from typing import Protocol

from netcomp import foreign
from netcomp.kube.labels import Selector
from netcomp.policy.mnp import POLICY_LIMITS, Peer, Policy, PortRef, Rule
from netcomp.policy.podrules import Allow, InterfaceRules, Net, PodRules, Ports

Address = IPv4Address | IPv6Address
# Pods and namespaces one policy's selectors may look at in a round (each peer's namespaces, and the pods of each
# namespace it picks), so that no tenant's policy of many peers across a big cluster holds every pod's rules up:
# past it, its rules pick no pod.
MAX_LOOKS = 1 << 19
# The ipBlock prefixes of the policies that select one pod, in all of its table: nothing bounds how many policies
# select a pod, and nft takes a time in proportion to write a table, while the node's other pods' changes wait.
# Past it, the policies that would go beyond (in the order of their names) still isolate but let nothing through.
MAX_POD_PREFIXES = 2 * POLICY_LIMITS["prefixes"]
NamedPorts = Mapping[str, tuple[tuple[str, int], ...]]  # a container port's name -> (protocol, number) pairs
_HOST = (1 << 128) - 1  # an address, in the numbers of _numbered


@dataclass(frozen=True, slots=True)
class PodInfo:
    """A pod as policies see it: its labels, its addresses by network (as network-status names networks), and
    its containers' named ports (None: not known here)."""

    namespace: str
    name: str
    labels: Mapping[str, str]
    addresses: Mapping[str, tuple[Address, ...]]
    ports: NamedPorts | None = None


@dataclass(frozen=True, slots=True)
class Interface:
    ifname: str
    network: str  # the network's name on the node (a definition's namespace.name)
    shown: str  # as network-status names it: namespace/name for a definition, a native network's name
    kernel: bool = True  # a netdev in the pod's namespace (not a DPDK or vfio device)


@dataclass(frozen=True, slots=True)
class LocalPod:
    info: PodInfo
    interfaces: tuple[Interface, ...]


class View(Protocol):
    """What the cluster holds, as select needs it."""

    def policies(self, namespace: str) -> Iterable[Policy]: ...
    def namespace_labels(self, namespace: str) -> Mapping[str, str] | None: ...
    def namespaces(self) -> Iterable[str]: ...
    def pods(self, namespace: str) -> Iterable[PodInfo]: ...
    def pod(self, namespace: str, name: str) -> PodInfo | None: ...
    def every_policy(self) -> Iterable[Policy]: ...
    def serve(self, networks: Iterable[str]) -> None: ...


@dataclass
class Resolved:
    rules: PodRules
    unenforced: list[tuple[Interface, tuple[str, ...]]] = field(default_factory=list)  # not netdevs: by whom


def for_network(policy: Policy, iface: Interface) -> bool:
    """Whether the policy is for the interface's network (as network-status names it)."""
    return iface.shown in policy.networks


class Peers:
    """The view as one round of rules reads it: each rule's peers resolved to their addresses on a network once,
    shared by every pod the rule's policy selects, and the node's own pods (`own`) counted with the addresses
    their records have (a peer from its ADD on, before its network-status is written) and the view's labels.
    Made anew for each round: what it answers is what the view held when it was first asked. A rule whose
    addresses are what they were in the round `before` gets that round's tuple again: rules are then compared
    with those in force, and documents found by their rules (nft.py), by identity, not address by address."""

    def __init__(
        self, view: View, own: Mapping[tuple[str, str], PodInfo] | None = None, before: Peers | None = None
    ) -> None:
        self.view, self.own = view, own or {}
        self._in_ns: dict[str, list[PodInfo]] = {}
        self._spaces: dict[int, tuple[Selector, list[str]]] = {}
        self._picked: dict[tuple[int, str], tuple[tuple[Peer, ...], list[PodInfo]]] = {}  # by id: its object kept
        self._nets: dict[tuple[int, str], tuple[Rule, tuple[int, ...], tuple[Net, ...]]] = {}
        self._before = before._nets if before is not None else {}
        self._every: list[str] | None = None  # the namespaces
        self._looks: dict[str, int] = {}  # pods and namespaces each policy's selectors looked at (by its ref)

    def pods(self, namespace: str) -> list[PodInfo]:
        got = self._in_ns.get(namespace)
        if got is None:
            got, seen = [], set()
            for p in self.view.pods(namespace):
                mine = self.own.get((p.namespace, p.name))
                seen.add(p.name)
                got.append(p if mine is None else PodInfo(p.namespace, p.name, p.labels, mine.addresses, mine.ports))
            got += [p for (ns, name), p in self.own.items() if ns == namespace and name not in seen]
            self._in_ns[namespace] = got
        return got

    def _names(self) -> list[str]:
        if self._every is None:
            self._every = list(self.view.namespaces())
        return self._every

    def spaces(self, selector: Selector) -> list[str]:
        got = self._spaces.get(id(selector))
        if got is None:
            names = [ns for ns in self._names() if selector.matches(self.view.namespace_labels(ns) or {})]
            got = self._spaces[id(selector)] = (selector, names)
        return got[1]

    def picked(self, policy: Policy, peers: tuple[Peer, ...]) -> list[PodInfo]:
        """The pods a rule's pod and namespace selectors pick (a podSelector alone: in the policy's namespace);
        none once the policy's selectors have looked at MAX_LOOKS pods and namespaces this round (said once)."""
        key = (id(peers), policy.namespace)
        got = self._picked.get(key)
        if got is not None:
            return got[1]
        found: dict[tuple[str, str], PodInfo] = {}
        looks = self._looks.get(policy.ref, 0)
        for peer in peers:
            if peer.block is not None:
                continue
            spaces = [policy.namespace]
            if peer.namespaces is not None:  # a selector not matched yet this round looks at every namespace
                looks += 0 if id(peer.namespaces) in self._spaces else len(self._names())
                spaces = self.spaces(peer.namespaces) if looks <= MAX_LOOKS else []
            for ns in spaces:
                looks += len(self.pods(ns)) + 1
                if looks > MAX_LOOKS:
                    break
                for p in self.pods(ns):
                    if peer.pods is None or peer.pods.matches(p.labels):
                        found[(p.namespace, p.name)] = p
        self._looks[policy.ref] = looks
        if looks > MAX_LOOKS:  # not kept: another policy of the namespace with the same peers looks on its own
            foreign.ignore("MultiNetworkPolicy", policy.ref, f"its selectors look at more than {MAX_LOOKS} pods and "
                           "namespaces a round: its rules past that pick no pod")  # fmt: skip
            return []
        pods = [found[k] for k in sorted(found)]
        self._picked[key] = (peers, pods)
        return pods

    def addresses(self, rule: Rule, pods: list[PodInfo], shown: str) -> tuple[Net, ...]:
        """The addresses of a rule's picked pods on a network, as host prefixes."""
        key = (id(rule), shown)
        got = self._nets.get(key)
        if got is None:
            numbers, was = _numbered(pods, shown), self._before.get(key)
            same = was is not None and was[0] is rule and was[1] == numbers
            got = self._nets[key] = was if same and was is not None else (rule, numbers, _hosts(numbers))
        return got[2]


def pod_rules(pod: LocalPod, view: View | Peers) -> Resolved:
    peers = view if isinstance(view, Peers) else Peers(view)
    policies = [p for p in peers.view.policies(pod.info.namespace) if p.pods.matches(pod.info.labels)]
    out = Resolved(PodRules())
    found = []
    room = MAX_POD_PREFIXES
    for iface in pod.interfaces:
        mine = sorted((p for p in policies if for_network(p, iface)), key=lambda p: (p.namespace, p.name))
        if not mine:
            continue
        if not iface.kernel:
            out.unenforced.append((iface, tuple(p.ref for p in mine)))
            continue
        allowing, room = _allowing(mine, room, f"{pod.info.namespace}/{pod.info.name} {iface.ifname}")
        ingress = [(p, r) for p in allowing if p.ingress is not None for r in p.ingress]
        egress = [(p, r) for p in allowing if p.egress is not None for r in p.egress]
        isolated_in = any(p.ingress is not None for p in mine)
        isolated_out = any(p.egress is not None for p in mine)
        found.append(
            InterfaceRules(
                iface.ifname,
                iface.network,
                _allows(ingress, pod, iface, peers, inbound=True) if isolated_in else None,
                _allows(egress, pod, iface, peers, inbound=False) if isolated_out else None,
                tuple(p.ref for p in mine),
            )
        )
    out.rules = PodRules(tuple(found))
    return out


def _allowing(policies: list[Policy], room: int, where: str) -> tuple[list[Policy], int]:
    """The policies whose rules let through on one interface of a pod: in the order of their names, while their
    ipBlocks fit in `room`, what is left of the pod's MAX_POD_PREFIXES; the others still isolate (said once)."""
    out = []
    for p in policies:
        if p.prefixes <= room:
            room -= p.prefixes
            out.append(p)
        else:
            why = f"{where}: its ipBlocks take the pod's table past {MAX_POD_PREFIXES} prefixes: nothing let through"
            foreign.ignore("MultiNetworkPolicy", p.ref, why)
    return out, room


def touched(policies: Iterable[Policy], namespace: str, labelsets: Iterable[Mapping[str, str]]) -> set[str]:
    """The namespaces of the policies with a peer that can pick a pod in `namespace` while its labels are one
    of `labelsets` (a podSelector alone picks in the policy's own namespace): whose pods' rules a change of such a
    pod, or of the namespace's labels from one labelset to another, can change."""
    sets = list(labelsets)
    out = set()
    for p in policies:
        if p.namespace in out:
            continue
        for rule in (*(p.ingress or ()), *(p.egress or ())):
            if any(
                peer.block is None
                and (
                    p.namespace == namespace
                    if peer.namespaces is None
                    else any(peer.namespaces.matches(labels) for labels in sets)
                )
                for peer in rule.peers
            ):
                out.add(p.namespace)
                break
    return out


def _allows(
    rules: list[tuple[Policy, Rule]], pod: LocalPod, iface: Interface, peers: Peers, *, inbound: bool
) -> tuple[Allow, ...]:
    """What a direction's rules let through. Ingress's named ports are the pod's own; egress's are each peer
    pod's (an ipBlock has none, so a named port lets nothing through to it)."""
    out: list[Allow] = []
    own = pod.info.ports if inbound else None
    for policy, rule in rules:
        blocks = tuple(n for peer in rule.peers if peer.block is not None for n in peer.block)
        if not rule.peers or blocks:
            ports = _numbers(rule.ports, own)
            if ports is not None:
                out.append(Allow(blocks or None, ports))
        pods = peers.picked(policy, rule.peers)
        if not pods:
            continue
        if inbound or not any(isinstance(r.port, str) for r in rule.ports):
            ports = _numbers(rule.ports, own)
            if ports is not None and (nets := peers.addresses(rule, pods, iface.shown)):
                out.append(Allow(nets, ports))
            continue
        by_ports: dict[tuple[Ports, ...], list[PodInfo]] = defaultdict(list)  # egress to named ports: each pod's
        for peer_pod in pods:
            if (ports := _numbers(rule.ports, peer_pod.ports or {})) is not None:
                by_ports[ports].append(peer_pod)
        for ports, group in sorted(by_ports.items()):
            if nets := _addresses(group, iface.shown):
                out.append(Allow(nets, ports))
    return tuple(out)


def _addresses(pods: Iterable[PodInfo], shown: str) -> tuple[Net, ...]:
    """Each pod's addresses on the network (as network-status names it), as host prefixes, IPv4 first, each in
    address order (sorted as numbers: ipaddress's own comparisons are many times slower)."""
    return _hosts(_numbered(pods, shown))


def _numbered(pods: Iterable[PodInfo], shown: str) -> tuple[int, ...]:
    """The addresses as sorted numbers, each `(prefix length << 128) | address`: IPv4 first."""
    return tuple(sorted({(a.max_prefixlen << 128) | int(a) for p in pods for a in p.addresses.get(shown, ())}))


def _hosts(numbers: tuple[int, ...]) -> tuple[Net, ...]:
    return tuple(IPv4Network((n & _HOST, 32)) if n >> 128 == 32 else IPv6Network((n & _HOST, 128)) for n in numbers)


def _numbers(refs: tuple[PortRef, ...], named: NamedPorts | None) -> tuple[Ports, ...] | None:
    """A rule's ports as numbers: () for every port; a named one as the pod's container port of that name and
    protocol. None when the rule names ports and none of them is one here (it lets nothing through)."""
    if not refs:
        return ()
    out: set[Ports] = set()
    for ref in refs:
        if ref.port is None:
            out.add(Ports(ref.protocol, 1, 65535))
        elif isinstance(ref.port, int):
            out.add(Ports(ref.protocol, ref.port, ref.end or ref.port))
        else:
            out.update(
                Ports(ref.protocol, n, n) for proto, n in (named or {}).get(ref.port, ()) if proto == ref.protocol
            )
    return tuple(sorted(out)) if out else None
