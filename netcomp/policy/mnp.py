"""This module reads a MultiNetworkPolicy (k8s.cni.cncf.io v1beta1 and v1beta2: a NetworkPolicy's spec, and the
k8s.v1.cni.cncf.io/policy-for annotation naming the networks it is for) into a Policy. An object is foreign
input: a policy whose podSelector or networks cannot be read selects nothing and says why; a rule with a part
that cannot be read is left out whole, so that what it was to let through stays shut (the pods the policy
selects are isolated all the same). Which pods and addresses a policy comes to is resolve.py's."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from ipaddress import collapse_addresses, ip_network, summarize_address_range
from itertools import islice
from typing import Any, TypeVar

from netcomp.cni.spec import MAX_DEPTH, too_deep
from netcomp.kube.labels import Selector, from_label_selector
from netcomp.names import is_dns_label
from netcomp.policy.podrules import PROTOCOLS, Net

GROUP, PLURAL = "k8s.cni.cncf.io", "multi-networkpolicies"
VERSIONS = ("v1beta2", "v1beta1")  # both serve the same objects; the first the server has is followed
POLICY_FOR = "k8s.v1.cni.cncf.io/policy-for"
MAX_REFS = 64
MAX_EXCEPTS = 128  # of an ipBlock: a tenant's list, each one worked against what is left
MAX_RULES = 256  # of a direction; more are left out and said
# What one rule, and all of a policy's rules, may make (prefixes: its ipBlocks less their exceptions; values: its
# selectors' In and NotIn values, kept a string and a set slot each), so that no tenant's policy makes a huge nft
# set, or is kept many times its size, on every node; a rule that would go past one is left out and said.
RULE_LIMITS = {"peers": 256, "ports": 256, "prefixes": 4096, "values": 1024}
POLICY_LIMITS = {"peers": 1024, "ports": 1024, "prefixes": 8192, "values": 4096}
MAX_SHARED = 1 << 15  # what equal parts kept once (_shared) may hold (_weight): all forgotten at once past this
_SHARED: dict[Any, Any] = {}
_HELD = [0]  # what the parts in _SHARED hold
T = TypeVar("T")


class PolicyError(ValueError):
    """A policy that selects nothing: why."""


@dataclass(frozen=True, slots=True)
class PortRef:
    """A rule's port: a number (with `end`, a range), a container port's name, or None: every port of the
    protocol."""

    protocol: str
    port: int | str | None
    end: int | None = None


@dataclass(frozen=True, slots=True)
class Peer:
    """Pods (by a selector in the policy's namespace, or in the namespaces a selector picks, or both), or
    addresses: an ipBlock's CIDR with its exceptions taken out."""

    pods: Selector | None = None
    namespaces: Selector | None = None
    block: tuple[Net, ...] | None = None


@dataclass(frozen=True, slots=True)
class Rule:
    """From or to whom (no peer: anyone) and on which ports (none: every port)."""

    peers: tuple[Peer, ...] = ()
    ports: tuple[PortRef, ...] = ()


@dataclass(frozen=True, slots=True)
class Policy:
    namespace: str
    name: str
    networks: tuple[str, ...]  # as network-status names them: a bare name, its namespace's definition and the native
    pods: Selector
    ingress: tuple[Rule, ...] | None  # None: not a policy of this direction; () isolates, letting nothing in
    egress: tuple[Rule, ...] | None
    problems: tuple[str, ...] = field(default=(), compare=False)  # the rules left out, and why
    prefixes: int = field(default=0, compare=False)  # what its rules' ipBlocks make, in all

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


def parse(obj: Any) -> Policy:
    """A MultiNetworkPolicy object as the API server returns it; PolicyError when it selects nothing."""
    if too_deep(obj):  # what reads it later (str() of a value included) meets no RecursionError
        raise PolicyError(f"it nests deeper than {MAX_DEPTH} levels")
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict) or not all(isinstance(meta.get(k), str) for k in ("namespace", "name")):
        raise PolicyError("not a namespaced object with a name")
    ns, name = meta["namespace"], meta["name"]
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    notes = meta.get("annotations") or {}
    if not isinstance(notes, dict):
        raise PolicyError("its annotations are not a map")
    networks = _networks(ns, notes.get(POLICY_FOR))
    made = _Made()
    try:
        made.count("values", _values(spec.get("podSelector")))
        pods = from_label_selector(spec.get("podSelector") if spec.get("podSelector") is not None else {})
    except ValueError as e:
        raise PolicyError(f"its podSelector is not a label selector: {e}") from None
    if made.made["values"] > POLICY_LIMITS["values"]:
        raise PolicyError(f"its podSelector holds more than {POLICY_LIMITS['values']} values")
    types = spec.get("policyTypes")
    if types is None:  # as NetworkPolicy: Ingress always, Egress when it has egress rules
        types = ["Ingress", *(["Egress"] if spec.get("egress") else [])]
    if not isinstance(types, list) or not all(t in ("Ingress", "Egress") for t in types):
        raise PolicyError("policyTypes is a list of Ingress and Egress")
    problems: list[str] = []
    ingress = _rules(spec.get("ingress"), "ingress", "from", problems, made) if "Ingress" in types else None
    egress = _rules(spec.get("egress"), "egress", "to", problems, made) if "Egress" in types else None
    blocks = sum(len(p.block) for r in (*(ingress or ()), *(egress or ())) for p in r.peers if p.block is not None)
    return Policy(sys.intern(ns), name, networks, _shared(pods), ingress, egress, tuple(problems), blocks)


def _shared(part: T) -> T:
    """One object for equal parts of policies (selectors, peers, ports, prefixes, networks): the policies of a
    cluster say the same things many times. A Rule is never shared: resolve.py keeps a rule's addresses by the
    Rule alone, and a podSelector alone picks in its own policy's namespace (peers are kept by peers and
    namespace, so they may be). Bounded by what the parts hold, not how many they are: one can be an ipBlock's
    thousands of prefixes, and parts of policies edited or gone stay until all are forgotten."""
    weight = _weight(part)
    if _HELD[0] + weight > MAX_SHARED:
        _SHARED.clear()
        _HELD[0] = 0
    kept: T = _SHARED.setdefault(part, part)
    if kept is part:
        _HELD[0] += weight
    return kept


def _weight(part: Any) -> int:
    """What a part holds: a tuple's items (prefixes, peers, ports, networks), a selector's requirements and values."""
    if isinstance(part, Selector):
        return 1 + sum(1 + len(r.values) for r in part.requirements)
    return 1 + len(part) if isinstance(part, tuple) else 1


def _networks(ns: str, text: Any) -> tuple[str, ...]:
    """The networks as network-status names them: `namespace/name` a definition only; a bare name the policy's
    namespace's definition or the netcomp Network of that name."""
    if not isinstance(text, str) or not text.strip():
        raise PolicyError(f"it has no {POLICY_FOR} annotation naming the networks it is for")
    refs = text.split(",", MAX_REFS)
    if len(refs) > MAX_REFS:
        raise PolicyError(f"{POLICY_FOR} names more than {MAX_REFS} networks")
    out = []
    for ref in (r.strip() for r in refs):
        space, slash, name = ref.rpartition("/")
        space = space or ns
        if not (is_dns_label(space) and name and len(name) <= 253 and all(is_dns_label(p) for p in name.split("."))):
            raise PolicyError(f"{POLICY_FOR}: {ref[:80]!r} is not a network's namespace/name or name")
        out += [f"{space}/{name}"] if slash else [f"{space}/{name}", name]
    return _shared(tuple(dict.fromkeys(out)))


class _Made:
    """What a policy's rules make so far, against RULE_LIMITS and POLICY_LIMITS: the peers and ports of the rules
    taken, and every prefix an ipBlock was worked out to (of a rule left out too: the work was done)."""

    def __init__(self) -> None:
        self.made = dict.fromkeys(POLICY_LIMITS, 0)
        self.in_rule = dict.fromkeys(("prefixes", "values"), 0)  # what the rule being read made of them

    def room(self, what: str) -> tuple[int, str]:
        """How many `what` the rule being read may make still, and the limit that says so."""
        left = POLICY_LIMITS[what] - self.made[what]
        in_rule = RULE_LIMITS[what] - self.in_rule.get(what, 0)
        if left < in_rule:
            return left, f"more than {POLICY_LIMITS[what]} {what} in all of a policy's rules"
        return in_rule, f"more than {RULE_LIMITS[what]} {what} in a rule"

    def count(self, what: str, n: int) -> None:
        self.made[what] += n
        self.in_rule[what] += n

    def rule(self, item: dict[str, Any], peers_key: str) -> Rule:
        self.in_rule = dict.fromkeys(self.in_rule, 0)
        rule = Rule(_peers(item.get(peers_key), self), _ports(item.get("ports"), self))
        self.made["peers"] += len(rule.peers)
        self.made["ports"] += len(rule.ports)
        return rule


def _rules(items: Any, direction: str, peers_key: str, problems: list[str], made: _Made) -> tuple[Rule, ...]:
    if items is None:
        return ()
    if not isinstance(items, list):
        problems.append(f"{direction} is not a list: nothing lets through")
        return ()
    rules = []
    for i, item in enumerate(items):
        if i == MAX_RULES:
            problems.append(f"{direction}: the rules past {MAX_RULES} are left out")
            break
        try:
            if not isinstance(item, dict):
                raise ValueError("not an object")
            rules.append(made.rule(item, peers_key))
        except ValueError as e:
            problems.append(f"{direction}[{i}] is left out: {e}")
    return tuple(rules)


def _peers(items: Any, made: _Made) -> tuple[Peer, ...]:
    if items is None:
        return ()
    if not isinstance(items, list):
        raise ValueError("its peers are not a list")
    room, words = made.room("peers")
    if len(items) > room:
        raise ValueError(f"{len(items)} peers: {words}")
    out = []
    for j, p in enumerate(items):
        if not isinstance(p, dict) or not ({"podSelector", "namespaceSelector", "ipBlock"} & p.keys()):
            raise ValueError(f"peer {j} has no podSelector, namespaceSelector or ipBlock")
        if "ipBlock" in p:
            if p.keys() & {"podSelector", "namespaceSelector"}:
                raise ValueError(f"peer {j}: an ipBlock goes alone")
            out.append(Peer(block=_block(p["ipBlock"], j, made)))
            continue
        values = _values(p.get("podSelector")) + _values(p.get("namespaceSelector"))
        room, words = made.room("values")
        made.count("values", values)
        if values > room:
            raise ValueError(f"peer {j}: its selectors hold {values} values: {words}")
        out.append(Peer(_selector(p, "podSelector", j), _selector(p, "namespaceSelector", j)))
    return _shared(tuple(out))


def _values(selector: Any) -> int:
    """How many values a LabelSelector's matchExpressions list (what reading it keeps, a string each)."""
    exprs = selector.get("matchExpressions") if isinstance(selector, dict) else None
    return (
        sum(len(v) for e in exprs if isinstance(e, dict) and isinstance(v := e.get("values"), list))
        if isinstance(exprs, list)
        else 0
    )


def _selector(peer: dict[str, Any], key: str, j: int) -> Selector | None:
    if peer.get(key) is None:
        return None
    try:
        return _shared(from_label_selector(peer[key]))
    except ValueError as e:
        raise ValueError(f"peer {j}: its {key} is not a label selector: {e}") from None


def _block(obj: Any, j: int, made: _Made) -> tuple[Net, ...]:
    """The CIDR less its exceptions, as prefixes in address order, counted into `made`; ValueError for a CIDR or
    an exception that is not one, an exception outside it (NetworkPolicy refuses those), or past made's room."""
    room, words = made.room("prefixes")
    if not isinstance(obj, dict) or not isinstance(obj.get("cidr"), str):
        raise ValueError(f"peer {j}: ipBlock has no cidr")
    raw = obj.get("except") or []
    if not isinstance(raw, list) or len(raw) > MAX_EXCEPTS or not all(isinstance(e, str) for e in raw):
        raise ValueError(f"peer {j}: ipBlock's except is not a list of at most {MAX_EXCEPTS} CIDRs")
    if room < 1:
        raise ValueError(f"peer {j}: ipBlock less its exceptions makes {words}")
    try:
        whole = ip_network(obj["cidr"], strict=False)
        excepts = [ip_network(e, strict=False) for e in raw]
    except ValueError:
        raise ValueError(f"peer {j}: ipBlock {obj['cidr'][:60]!r} or an exception is not a CIDR") from None
    for ex in excepts:
        if ex.version != whole.version or not ex.subnet_of(whole) or ex == whole:  # type: ignore[arg-type]
            raise ValueError(f"peer {j}: except {ex} is not strictly inside {whole}")
    # The exceptions sorted and merged (repeated or nested ones once), and each gap between them summarized:
    # linear in what is made, which stops past the room.
    left: list[Net] = []
    start, address = int(whole.network_address), type(whole.network_address)
    cuts = [(int(ex.network_address), int(ex.broadcast_address)) for ex in collapse_addresses(excepts)]  # type: ignore[type-var]
    for cut, past in [*cuts, (int(whole.broadcast_address) + 1, 0)]:
        if start < cut:
            left += islice(summarize_address_range(address(start), address(cut - 1)), room + 1 - len(left))
        if len(left) > room:
            break
        start = past + 1
    made.count("prefixes", len(left))
    if len(left) > room:
        raise ValueError(f"peer {j}: ipBlock less its exceptions makes {words}")
    return _shared(tuple(left))


def _ports(items: Any, made: _Made) -> tuple[PortRef, ...]:
    if items is None:
        return ()
    if not isinstance(items, list):
        raise ValueError("its ports are not a list")
    room, words = made.room("ports")
    if len(items) > room:
        raise ValueError(f"{len(items)} ports: {words}")
    out = []
    for j, p in enumerate(items):
        proto = (p.get("protocol") or "TCP") if isinstance(p, dict) else None
        if not isinstance(proto, str) or (proto := proto.lower()) not in PROTOCOLS:
            raise ValueError(f"port {j}: protocol is TCP, UDP or SCTP")
        port, end = p.get("port"), p.get("endPort")
        if isinstance(port, bool) or not (port is None or isinstance(port, (int, str))):
            raise ValueError(f"port {j}: port is a number or a name")
        if isinstance(port, str) and port.isascii() and port.isdigit():
            port = int(port)
        if isinstance(port, int) and not 1 <= port <= 65535:
            raise ValueError(f"port {j}: {port} is not a port")
        if isinstance(port, str) and not (len(port) <= 15 and is_dns_label(port.lower())):
            raise ValueError(f"port {j}: {port[:20]!r} is not a port's name")
        if end is not None and (not isinstance(port, int) or isinstance(end, bool) or not isinstance(end, int)
                                or not port <= end <= 65535):  # fmt: skip
            raise ValueError(f"port {j}: endPort goes with a port number, and from it to at most 65535")
        out.append(PortRef(proto, port, end))
    return _shared(tuple(out))
