"""Which networks a container joins and what its interfaces are called.

The node's default network gets the runtime's CNI_IFNAME. More networks come from CNI_ARGS
(`NETCOMP_NETWORKS=a,b@ifname`), from the runtime's `args` (`"netcomp.io/networks": "a,b@ifname"` or a list,
at the top of `args` or under `args.cni`), and with Kubernetes from the pod's `k8s.v1.cni.cncf.io/networks`
annotation (Multus's format: `a,ns/b@ifname`, or a JSON list of `{"name", "namespace", "interface"}`).
Names: an explicit `@ifname`, else the network's interfacePrefix plus an index counted per prefix (stor0,
stor1), else `net<index>`."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from netcomp.cni.codes import E_INVALID_CONFIG, E_INVALID_ENV
from netcomp.errors import DelegateError
from netcomp.names import ifname_problem, is_cni_name

ARGS_KEY = "NETCOMP_NETWORKS"
RUNTIME_ARGS_KEY = "netcomp.io/networks"
DEFAULT_PREFIX = "net"


@dataclass(frozen=True, slots=True)
class Want:
    network: str
    ifname: str | None = None


def check_ifname(name: str) -> str:
    """An interface name a runtime or a pod gives, checked (names.ifname_problem), or CNI error 4."""
    problem = ifname_problem(name)
    if problem is not None:
        raise DelegateError(E_INVALID_ENV, f"invalid interface name {name[:40]!r}", problem)
    return name


def parse_list(text: str) -> list[Want]:
    out = []
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        net, _, ifname = item.partition("@")
        if not is_cni_name(net):
            raise DelegateError(E_INVALID_CONFIG, f"invalid network name {net!r} in the list of networks")
        out.append(Want(net, check_ifname(ifname) if ifname else None))
    return out


def split_cni_args(cni_args: str) -> tuple[list[Want], str]:
    """Our key out of CNI_ARGS, and CNI_ARGS without it (delegates such as host-local reject unknown keys)."""
    wants: list[Want] = []
    rest = []
    for pair in cni_args.split(";") if cni_args else []:
        key, _, value = pair.partition("=")
        if key == ARGS_KEY:
            wants.extend(parse_list(value))
        elif pair:
            rest.append(pair)
    return wants, ";".join(rest)


POD_NETWORKS = "k8s.v1.cni.cncf.io/networks"
NETWORK_STATUS = "k8s.v1.cni.cncf.io/network-status"
_POD_ITEM_KEYS = {"name", "namespace", "interface"}


@dataclass(frozen=True, slots=True)
class PodRef:
    namespace: str
    name: str
    uid: str = field(default="", compare=False)  # K8S_POD_UID, when the runtime gives it

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


def pod_ref(cni_args: str) -> PodRef | None:
    """The pod a request is for: kubelet's K8S_POD_NAMESPACE, K8S_POD_NAME (and K8S_POD_UID) in CNI_ARGS."""
    pairs = dict(p.partition("=")[::2] for p in cni_args.split(";") if p) if cni_args else {}
    ns, name = pairs.get("K8S_POD_NAMESPACE", ""), pairs.get("K8S_POD_NAME", "")
    return PodRef(ns, name, pairs.get("K8S_POD_UID", "")) if ns and name else None


def from_pod_annotation(value: str, pod: PodRef) -> list[Want]:
    """The networks a pod asks for. netcomp's networks are the node's (one name space), so a namespace in a
    reference (`default/storage`) is accepted, as Multus users write it, and does not change the network."""

    def bad(why: str) -> DelegateError:
        return DelegateError(E_INVALID_CONFIG, f"pod {pod}: annotation {POD_NETWORKS} is not valid: {why}")

    text = value.strip()
    if not text.startswith("["):
        items = [i.strip() for i in text.split(",") if i.strip()]
        try:
            return parse_list(",".join(i.rpartition("/")[2] if "/" in i.partition("@")[0] else i for i in items))
        except DelegateError as e:
            raise bad(e.msg) from None
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise bad(f"not JSON: {e}") from None
    wants = []
    for i, item in enumerate(doc if isinstance(doc, list) else [None]):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise bad(f"item {i} is not an object with a name")
        extra = set(item) - _POD_ITEM_KEYS
        if extra:
            raise bad(f"item {i} asks for {', '.join(sorted(extra))}, which netcomp does not do (it takes "
                      f"{', '.join(sorted(_POD_ITEM_KEYS))}); the network's own IPAM decides addresses")  # fmt: skip
        ifname = item.get("interface")
        if ifname is not None and not isinstance(ifname, str):
            raise bad(f"item {i}: interface is not a string")
        try:
            wants.extend(parse_list(item["name"] + (f"@{ifname}" if ifname else "")))
        except DelegateError as e:
            raise bad(f"item {i}: {e.msg}") from None
    return wants


def from_runtime_args(config: Mapping[str, Any]) -> list[Want]:
    args = config.get("args")
    if not isinstance(args, dict):
        return []
    cni = args.get("cni")
    for holder in (args, cni if isinstance(cni, dict) else {}):
        value = holder.get(RUNTIME_ARGS_KEY)
        if isinstance(value, str):
            return parse_list(value)
        if isinstance(value, list):
            return parse_list(",".join(str(v) for v in value))
    return []


def name_interfaces(
    default: str | None, runtime_ifname: str, wants: Sequence[Want], prefixes: Mapping[str, str | None]
) -> list[tuple[str, str]]:
    """(network, ifname) for every attachment, the default network first."""
    out: list[tuple[str, str]] = []
    taken = {w.ifname for w in wants if w.ifname}
    if default is not None:
        out.append((default, check_ifname(runtime_ifname)))
        taken.add(runtime_ifname)
    counters: dict[str, int] = {}
    for w in wants:
        if w.ifname:
            name = w.ifname
        else:
            prefix = prefixes.get(w.network) or DEFAULT_PREFIX
            i = counters.get(prefix, 0)
            while f"{prefix}{i}" in taken:
                i += 1
            name = check_ifname(f"{prefix}{i}")
            counters[prefix] = i + 1
            taken.add(name)
        out.append((w.network, name))
    seen: set[str] = set()
    for _, name in out:
        if name in seen:
            raise DelegateError(E_INVALID_CONFIG, f"interface name {name!r} is asked for twice")
        seen.add(name)
    return out
