"""This module says which networks a container joins from CNI_ARGS (`NETCOMP_NETWORKS=a,b@ifname`) or the
runtime's `args` (`netcomp.io/networks`), and names their interfaces: the default network gets CNI_IFNAME, others
an explicit `@ifname`, else their interfacePrefix (or `net`) plus an index counted per prefix. A pod's
annotations are multus.py's."""

from __future__ import annotations

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
    """`a,b@ifname,ns/c`: networks by name (a NetworkAttachmentDefinition's as namespace/name), checked."""
    out = []
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        net, _, ifname = item.partition("@")
        if not all(is_cni_name(part) for part in net.split("/")) or net.count("/") > 1:
            raise DelegateError(E_INVALID_CONFIG, f"invalid network name {net!r} in the list of networks")
        out.append(Want(net, check_ifname(ifname) if ifname else None))
    return out


def namespace_of(conf: Mapping[str, Any]) -> str | None:
    """The namespace of a compiled network (a NetworkAttachmentDefinition's); None for a node-wide one."""
    ns = (conf.get("netcomp") or {}).get("namespace")
    return ns if isinstance(ns, str) else None


def network_key(namespace: str, name: str) -> str:
    """A namespaced network's name on the node (its conflist's and files' name): namespace.name. A namespace
    has no dots and a native network's name neither, so no node-wide network is ever called that."""
    return f"{namespace}.{name}"


def display_name(network: str, conf: Mapping[str, Any] | None) -> str:
    """How Multus names a network to people (network-status, events): namespace/name for a namespaced one."""
    ns = namespace_of(conf or {})
    return f"{ns}/{network[len(ns) + 1 :]}" if ns and network.startswith(f"{ns}.") else network


def resolve_node(ref: str, nets: Mapping[str, Mapping[str, Any]]) -> str:
    """The network a node-level reference means (defaultNetwork, CNI_ARGS, a runtime's args): a network's name,
    `namespace/name` for a NetworkAttachmentDefinition, or a definition's bare name when only one namespace has
    one of that name. DelegateError 7 naming what is compiled when none is."""
    ns, slash, name = ref.rpartition("/")
    if slash:
        key = network_key(ns, name)
        if key in nets:
            return key
    elif ref in nets:
        return ref
    else:
        found = sorted(k for k, c in nets.items() if (n := namespace_of(c)) and k == network_key(n, ref))
        if len(found) == 1:
            return found[0]
        if found:
            raise DelegateError(
                E_INVALID_CONFIG,
                f"network {ref!r} is ambiguous: " + ", ".join(display_name(k, nets[k]) for k in found),
                "name it as namespace/name",
            )
    raise DelegateError(E_INVALID_CONFIG, f"network {ref!r} is not compiled on this node", "see `netcomp status`")


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


def prefixes(nets: Mapping[str, Mapping[str, Any]]) -> dict[str, str | None]:
    """Each network's interfacePrefix (None where it has none), for name_interfaces."""
    return {n: (c.get("netcomp") or {}).get("interfacePrefix") for n, c in nets.items()}


def refers_to(ref: str, network: str, conf: Mapping[str, Any]) -> bool:
    """Whether `ref`, as `netcomp detach` takes it (a network, namespace/name, or a definition's bare name),
    names `network` (whose conflist is `conf`), as resolve_node resolves it for attach."""
    if ref in (network, display_name(network, conf)):
        return True
    ns = namespace_of(conf)
    return ns is not None and "/" not in ref and network == network_key(ns, ref)
