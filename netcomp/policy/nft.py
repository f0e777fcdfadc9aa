"""This module writes a pod's policy as an nftables table in the pod's own network namespace: `document` turns
PodRules into the libnftables JSON of one transaction that replaces the table whole (or removes it), `apply`
hands it to libnftables (the library the nft tool is made of, which the nftables package brings) on a thread
inside the namespace, or runs `nft` there where the library cannot be loaded or another nft is named; `read`
says what the table holds for `netcomp explain`. It never touches the node's own ruleset: the library's netlink
socket is opened, and nft started, from a thread that is inside the pod's namespace.

The table: base chains `input` and `output` (filter priority, policy accept) send each isolated interface's
traffic to its own chain (`in_<ifname>`, `out_<ifname>`). There is no forward chain: a policy is about what
reaches the pod and what the pod sends, as NetworkPolicy is, and multi-networkpolicy-iptables hooks INPUT and
OUTPUT only. ARP is its own family (`arp`), which an inet table never sees: it always passes, as IPv4 needs."""

from __future__ import annotations

import _thread
import bisect
import ctypes
import functools
import json
import os
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from ipaddress import IPv4Network, IPv6Network, collapse_addresses
from typing import Any

from netcomp.cni.process import ExecResult, real_exec
from netcomp.errors import DelegateError, HostError
from netcomp.host.nsenter import inside
from netcomp.policy.podrules import Allow, InterfaceRules, Net, PodRules, Ports

TABLE, FAMILY = "netcomp", "inet"
NFT = "/usr/sbin/nft"
LIBRARY = "libnftables.so.1"
JSON_OUTPUT = 1 << 4  # NFT_CTX_OUTPUT_JSON: the library reads its input as JSON too
HELD = 120.0  # seconds a context is kept at most for `apply(hold=...)`
# What is kept for the pods that share it, all of it dropped once more is asked for: the elements of sets of peers
# (an ipBlock's thousands of prefixes are as many), and the bytes of documents by the rules they were made of.
ELEMENTS_KEPT = 1 << 15
_ELEMENTS: dict[int, tuple[tuple[Net, ...], tuple[list[Any], list[Any]]]] = {}
DOCUMENTS_KEPT = 1 << 22
_DOCUMENTS: dict[PodRules, bytes] = {}
_HELD = {"elements": 0, "documents": 0}
ENV = {"LC_ALL": "C"}
COMMENT_BYTES = 127  # the kernel keeps a rule's comment in at most 128 bytes with its NUL (NFTNL_UDATA_COMMENT_MAXLEN)
SHOWN_LINES, LINE_CHARS = 4, 300  # of nft's stderr, in an error
ANY_NEIGHBOUR = 255  # hop limit of ND messages (RFC 4861): one with 255 was sent on this link
ON_LINK = 1  # hop limit of MLD messages (RFC 3810)


@dataclass(frozen=True, slots=True)
class Direction:
    key: str  # the chain names' prefix and the counters'
    hook: str
    ifname_key: str  # iifname or oifname
    peer: str  # saddr or daddr
    # What every interface needs, before any policy: IPv6 neighbour discovery (RFC 4861) and multicast listener
    # messages (RFC 3810), which IPv6 needs as IPv4 needs ARP, and the DHCP client's exchange (ports, RFC 2131 and
    # RFC 8415), whose answers conntrack cannot match to a request sent to a broadcast or multicast address.
    nd: tuple[str, ...]
    mld: tuple[str, ...]
    dhcp: tuple[tuple[str, int, int], ...]  # (nfproto, source port, destination port)


INGRESS = Direction(
    "in",
    "input",
    "iifname",
    "saddr",
    ("nd-router-advert", "nd-neighbor-solicit", "nd-neighbor-advert", "nd-redirect"),
    ("mld-listener-query",),
    (("ipv4", 67, 68), ("ipv6", 547, 546)),
)
EGRESS = Direction(
    "out",
    "output",
    "oifname",
    "daddr",
    ("nd-router-solicit", "nd-neighbor-solicit", "nd-neighbor-advert"),
    ("mld-listener-report", "mld-listener-done", "mld2-listener-report"),
    (("ipv4", 68, 67), ("ipv6", 546, 547)),
)


def document(rules: PodRules) -> dict[str, Any]:
    """The JSON of one nft transaction: the table made anew with what `rules` say, or (no rules) removed. Adding
    the table first makes deleting it valid whether it existed or not. The same rules give the same bytes."""
    table = {"family": FAMILY, "name": TABLE}
    cmds: list[dict[str, Any]] = [
        {"metainfo": {"json_schema_version": 1}},
        {"add": {"table": table}},
        {"delete": {"table": table}},
    ]
    if not rules:
        return {"nftables": cmds}
    cmds.append({"add": {"table": table}})
    for d in (INGRESS, EGRESS):
        isolated = [(i, allows) for i in rules.interfaces if (allows := _allows(i, d)) is not None]
        if not isolated:
            continue
        cmds.append(_add("chain", name=d.hook, type="filter", hook=d.hook, prio=0, policy="accept"))
        for iface, allows in isolated:
            chain = f"{d.key}_{iface.ifname}"
            cmds.append(_add("chain", name=chain))
            cmds.append(_add("counter", name=chain))
            match, jump = _is(_meta(d.ifname_key), _exactly(iface.ifname)), {"jump": {"target": _exactly(chain)}}
            cmds.append(_rule(d.hook, match, jump, comment=_comment(iface)))
            cmds.extend(_chain(chain, d, allows))
    return {"nftables": cmds}


def _allows(iface: InterfaceRules, d: Direction) -> tuple[Allow, ...] | None:
    return iface.ingress if d is INGRESS else iface.egress


def _chain(chain: str, d: Direction, allows: tuple[Allow, ...]) -> Iterator[dict[str, Any]]:
    """An isolated interface's chain, in order: replies, what every interface needs, each Allow, a counted drop.
    ND comes before the drop of what conntrack calls invalid: it marks a redirect so (only NS, NA, RS, RA and
    MLD are let through untracked: the kernel's nf_conntrack_proto_icmpv6, noct_valid_new)."""
    yield _rule(chain, _is({"ct": {"key": "state"}}, ["established", "related"], op="in"), _ACCEPT)
    yield _rule(
        chain, _is(_pay("icmpv6", "type"), {"set": list(d.nd)}), _is(_pay("ip6", "hoplimit"), ANY_NEIGHBOUR), _ACCEPT
    )
    yield _rule(
        chain, _is(_pay("icmpv6", "type"), {"set": list(d.mld)}), _is(_pay("ip6", "hoplimit"), ON_LINK), _ACCEPT
    )
    yield _rule(chain, _is({"ct": {"key": "state"}}, ["invalid"], op="in"), {"drop": None})
    for nfproto, sport, dport in d.dhcp:
        yield _rule(
            chain,
            _is(_meta("nfproto"), nfproto),
            _is(_pay("udp", "sport"), sport),
            _is(_pay("udp", "dport"), dport),
            _ACCEPT,
        )
    for n, allow in enumerate(allows):
        yield from _allow(chain, d, n, allow)
    yield _rule(chain, {"counter": _exactly(chain)}, {"drop": None})


def _allow(chain: str, d: Direction, n: int, allow: Allow) -> Iterator[dict[str, Any]]:
    """One Allow's rules: one per address family of its peers (their set) and protocol of its ports."""
    peers: list[list[dict[str, Any]]] = [[]]  # no address match: any peer
    if allow.peers is not None:
        peers = []
        for family, kind, elem in zip(("ip", "ip6"), ("ipv4_addr", "ipv6_addr"), _elements(allow.peers), strict=True):
            if elem:
                name = f"{chain}_{n}_{family}"
                wide = {"flags": ["interval"]} if any(isinstance(e, dict) for e in elem) else {}  # hosts: a hash
                yield _add("set", name=name, type=kind, **wide, elem=elem)
                peers.append([_is(_pay(family, d.peer), f"@{name}")])
    ports: list[list[dict[str, Any]]] = [[]]  # every port of every protocol
    if allow.ports:
        ports = [
            [_is(_meta("l4proto"), proto), _is(_pay("th", "dport"), value)] for proto, value in _ports(allow.ports)
        ]
    for match in peers:  # no peers (an empty tuple): no rule, the Allow lets nothing through
        for also in ports:
            yield _rule(chain, *match, *also, _ACCEPT)


def _elements(peers: tuple[Net, ...]) -> tuple[list[Any], list[Any]]:
    """The IPv4 and the IPv6 elements of a set of peers. The same tuple of peers is shared by every pod a rule's
    policy selects: its elements are worked out once (the tuple is kept with them, so that its id names it while
    they are kept)."""
    got = _ELEMENTS.get(id(peers))
    if got is None or got[0] is not peers:
        v4 = _family([p for p in peers if isinstance(p, IPv4Network)], socket.AF_INET, 32)
        v6 = _family([p for p in peers if isinstance(p, IPv6Network)], socket.AF_INET6, 128)
        _keep(_ELEMENTS, "elements", len(v4) + len(v6), ELEMENTS_KEPT)
        got = _ELEMENTS[id(peers)] = (peers, (v4, v6))
    return got[1]


def _family(nets: list[Any], family: int, bits: int) -> list[Any]:
    """One address family's elements, in address order, none overlapping another (an interval set's may not):
    the prefixes (ipBlocks, few) merged, and each host address that none of them holds, written as itself."""
    wide = [(int(n.network_address), n) for n in collapse_addresses(n for n in nets if n.prefixlen < bits)]
    ends = [(start, start + n.num_addresses - 1) for start, n in wide]
    starts = [start for start, _ in ends]
    out: list[tuple[int, Any]] = [
        (start, {"prefix": {"addr": _text(start, family, bits), "len": n.prefixlen}}) for start, n in wide
    ]
    for host in sorted({int(n.network_address) for n in nets if n.prefixlen == bits}):
        i = bisect.bisect_right(starts, host) - 1
        if i < 0 or host > ends[i][1]:
            out.append((host, _text(host, family, bits)))
    return [element for _, element in sorted(out, key=lambda pair: pair[0])]


def _keep(kept: dict[Any, Any], what: str, size: int, bound: int) -> None:
    """Room for `size` more of `what` in `kept`: all of it dropped when it would hold more than `bound`."""
    if _HELD[what] + size > bound:
        kept.clear()
        _HELD[what] = 0
    _HELD[what] += size


def _text(address: int, family: int, bits: int) -> str:
    return socket.inet_ntop(family, address.to_bytes(bits // 8, "big"))


def _ports(ports: tuple[Ports, ...]) -> Iterator[tuple[str, Any]]:
    """(protocol, the port or set of ports) per protocol, ranges that overlap or touch merged (an interval set's
    elements may not overlap), sorted."""
    for proto in sorted({p.protocol for p in ports}):
        merged: list[list[int]] = []
        for p in sorted(p for p in ports if p.protocol == proto):
            if merged and p.first <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], p.last)
            else:
                merged.append([p.first, p.last])
        items = [a if a == b else {"range": [a, b]} for a, b in merged]
        yield proto, items[0] if len(items) == 1 else {"set": items}


_ACCEPT: dict[str, Any] = {"accept": None}


def _add(kind: str, **fields: Any) -> dict[str, Any]:
    return {"add": {kind: {"family": FAMILY, "table": TABLE, **fields}}}


def _rule(chain: str, *expr: dict[str, Any], comment: str = "") -> dict[str, Any]:
    return _add("rule", chain=chain, expr=list(expr), **({"comment": comment} if comment else {}))


def _is(left: dict[str, Any], right: Any, op: str = "==") -> dict[str, Any]:
    return {"match": {"op": op, "left": left, "right": right}}


def _meta(key: str) -> dict[str, Any]:
    return {"meta": {"key": key}}


def _pay(protocol: str, field: str) -> dict[str, Any]:
    return {"payload": {"protocol": protocol, "field": field}}


def _exactly(ifname: str) -> str:
    """An interface's name (or a chain's made of it) as nft reads it as that name only, where it is matched or
    referred to. nft reads a name ending in `*` as a wildcard (`n*` matched every interface from `n`: a pod naming
    one interface so sent its others' traffic to that one's chain), unless the `*` is escaped, and then drops
    every backslash of it; and a string beginning with `@` as a set. HostError for a name nft cannot say exactly
    (the pod's ADD fails, leaving nothing)."""
    if ifname.endswith("*") and "\\" not in ifname:
        return ifname[:-1] + "\\*"
    if ifname.endswith("*") or ifname.startswith("@"):
        raise HostError(f"interface {ifname!r} cannot be matched by nftables exactly: name it without a trailing "
                        "'*' or a leading '@'")  # fmt: skip
    return ifname


def _comment(iface: InterfaceRules) -> str:
    text = f"{iface.network}: {', '.join(iface.policies) or 'isolated'}"
    raw = text.encode()
    return text if len(raw) <= COMMENT_BYTES else raw[: COMMENT_BYTES - 3].decode(errors="ignore") + "..."


def apply(
    netns: str | int, rules: PodRules, *, timeout: float = 10.0, nft: str = NFT, hold: threading.Event | None = None
) -> None:
    """The pod's table as `rules` say, in one transaction, in the network namespace `netns` (a path or an fd):
    made, replaced whole, or (no rules) removed. HostError when nft is missing, refuses, or takes too long (the
    exec's timeout; the library's transaction is the kernel's, which answers or fails). `hold`: the library's
    context is let go of once it is set (or HELD seconds later), not at once (see _run)."""
    stdin = _DOCUMENTS.get(rules)
    if stdin is None:  # the pods a policy selects alike (a Deployment's replicas) have the same rules
        stdin = json.dumps(document(rules), separators=(",", ":")).encode()
        _keep(_DOCUMENTS, "documents", len(stdin), DOCUMENTS_KEPT)
        _DOCUMENTS[rules] = stdin
    lib = _library() if nft == NFT else None
    if lib is not None:
        said = inside(netns, lambda: _run(lib, stdin, hold), "write the policy table")
        if said is not None:
            raise HostError(f"nft refused the policy table of {_label(netns)}: {said}")
        return
    res = _nft(netns, ("-j", "-f", "-"), stdin, timeout, nft, "write the policy table")
    if res.returncode != 0:
        raise HostError(f"nft refused the policy table of {_label(netns)}: {_said(res)}")


@functools.cache
def _library() -> Any:
    """libnftables with the five calls used declared; None where it cannot be loaded (nft is run instead)."""
    try:
        lib = ctypes.CDLL(LIBRARY)
    except OSError:
        return None
    lib.nft_ctx_new.restype, lib.nft_ctx_new.argtypes = ctypes.c_void_p, [ctypes.c_uint32]
    lib.nft_ctx_free.argtypes = [ctypes.c_void_p]
    lib.nft_ctx_output_set_flags.argtypes = [ctypes.c_void_p, ctypes.c_uint]
    lib.nft_ctx_buffer_error.argtypes = [ctypes.c_void_p]
    lib.nft_ctx_get_error_buffer.restype, lib.nft_ctx_get_error_buffer.argtypes = ctypes.c_char_p, [ctypes.c_void_p]
    lib.nft_run_cmd_from_buffer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    return lib


def _run(lib: Any, document: bytes, hold: threading.Event | None = None) -> str | None:
    """One transaction through the library, from the calling thread's namespace (where the context's netlink
    socket is opened); what it refused with, or None. The context is freed on a thread of its own, once `hold`
    is set: closing its socket waits on the kernel for milliseconds after the transaction is in force, and an
    interface moved into that namespace meanwhile waits about as long (benchmarks.md: a plugin making the
    pod's interfaces while the table is written ahead)."""
    ctx = lib.nft_ctx_new(0)
    if not ctx:
        return "libnftables could not make a context"
    try:
        lib.nft_ctx_output_set_flags(ctx, JSON_OUTPUT)
        lib.nft_ctx_buffer_error(ctx)
        if lib.nft_run_cmd_from_buffer(ctx, document) == 0:
            return None
        lines = [ln.strip().removeprefix("internal:0:0-0: ") for ln in
                 (lib.nft_ctx_get_error_buffer(ctx) or b"").decode(errors="replace").splitlines()]  # fmt: skip
        return "; ".join([ln[:LINE_CHARS] for ln in lines if ln][:SHOWN_LINES]) or "an error it did not describe"
    finally:  # a bare thread: threading's would wait here until it has started
        _thread.start_new_thread(_free, (lib, ctx, hold))


def _free(lib: Any, ctx: Any, hold: threading.Event | None) -> None:
    if hold is not None:
        hold.wait(HELD)
    lib.nft_ctx_free(ctx)


def remove(netns: str | int, *, timeout: float = 10.0, nft: str = NFT) -> None:
    """The pod's table gone, if it has one."""
    apply(netns, PodRules(), timeout=timeout, nft=nft)


@dataclass(frozen=True, slots=True)
class TableState:
    """What a pod's table holds: rules per chain, elements per set, packets dropped per isolated chain (the
    chain's name: `in_net1`, `out_net1`)."""

    rules: dict[str, int]
    elements: dict[str, int]
    dropped: dict[str, int]


def read(netns: str | int, *, timeout: float = 10.0, nft: str = NFT) -> TableState | None:
    """What the pod's table holds now; None when it has none."""
    res = _nft(netns, ("-j", "list", "table", FAMILY, TABLE), b"", timeout, nft, "read the policy table")
    if res.returncode != 0:
        if b"No such file or directory" in res.stderr:
            return None
        raise HostError(f"nft could not list the policy table of {_label(netns)}: {_said(res)}")
    try:
        items = json.loads(res.stdout)["nftables"]
        state = TableState({}, {}, {})
        for item in items:
            if "chain" in item:
                state.rules.setdefault(str(item["chain"]["name"]), 0)
            elif "rule" in item:
                chain = str(item["rule"]["chain"])
                state.rules[chain] = state.rules.get(chain, 0) + 1
            elif "set" in item:
                state.elements[str(item["set"]["name"])] = len(item["set"].get("elem", ()))
            elif "counter" in item:
                state.dropped[str(item["counter"]["name"])] = int(item["counter"]["packets"])
    except (ValueError, KeyError, TypeError) as e:
        raise HostError(f"nft listed the policy table of {_label(netns)} in a form not understood: {e}") from None
    return state


def version(*, timeout: float = 10.0, nft: str = NFT) -> str:
    """What `nft --version` says: nft is there and runs (in the caller's namespace; it touches no ruleset)."""
    if not os.access(nft, os.X_OK):
        raise HostError(f"nft not found at {nft}: install the nftables package")
    try:
        res = real_exec([nft, "--version"], ENV, b"", timeout)
    except DelegateError as e:
        raise HostError(f"{nft} --version: {e.msg}") from None
    if res.returncode != 0:
        raise HostError(f"{nft} --version: {_said(res)}")
    return res.stdout.decode(errors="replace").strip()[:LINE_CHARS]


def _nft(netns: str | int, args: tuple[str, ...], stdin: bytes, timeout: float, nft: str, what: str) -> ExecResult:
    """nft run with args in the network namespace: spawned from a thread inside it, whose namespace the child
    inherits (clone(2) copies the calling thread's)."""
    if not os.access(nft, os.X_OK):
        raise HostError(f"nft not found at {nft}: install the nftables package")

    def work() -> ExecResult:
        try:
            return real_exec([nft, *args], ENV, stdin, timeout)
        except DelegateError as e:
            raise HostError(f"cannot {what} of {_label(netns)}: {nft}: {e.msg}") from None

    return inside(netns, work, what)


def _label(netns: str | int) -> str:
    return f"network namespace fd {netns}" if isinstance(netns, int) else netns


def _said(res: ExecResult) -> str:
    """nft's first lines on stderr, bounded (libnftables prefixes JSON input's errors with `internal:0:0-0: `)."""
    lines = [ln.strip().removeprefix("internal:0:0-0: ") for ln in res.stderr.decode(errors="replace").splitlines()]
    shown = [ln[:LINE_CHARS] for ln in lines if ln][:SHOWN_LINES]
    return "; ".join(shown) or f"exit status {res.returncode}, nothing on stderr"
