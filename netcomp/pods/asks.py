"""This module puts what a pod asks of one attachment (multus.Ask) where the network's plugins read it, as libcni
and Multus hand it over, and refuses what cannot be, before any plugin runs (prepare); after they ran, it checks
that the interface has what was asked (check) and says which default routes to move (routes). Each field, and
where it goes: docs/kubernetes.md, "The annotations"."""

from __future__ import annotations

import copy
import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

from netcomp.host.container import DEFAULT_DST, DefaultRoute, LinkState, PolicyRoutes
from netcomp.ipam.pool import IPNetwork, Pool
from netcomp.pods.multus import Ask
from netcomp.pods.naming import display_name
from netcomp.records.record import Attachment, Record

NETCOMP_ARGS = {"ips", "mac", "ip"}  # args.cni keys netcomp sets from the element's own fields


def declared(conflist: Mapping[str, Any]) -> set[str]:
    """The capabilities any plugin of the conflist declares."""
    out: set[str] = set()
    for p in conflist.get("plugins") or []:
        caps = p.get("capabilities") if isinstance(p, dict) else None
        if isinstance(caps, dict):
            out.update(k for k, v in caps.items() if v is True)
    return out


def subnets(network: str, conflist: Mapping[str, Any]) -> list[IPNetwork] | None:
    """The subnets a network gives addresses from, when its config says (a netcomp pool, host-local's subnet or
    ranges, whereabouts' range); None when it cannot be known here (dhcp, static, a plugin's own IPAM)."""
    pool = Pool.of(network, conflist)
    if pool is not None:
        return [r.subnet for rs in pool.sets for r in rs]
    for p in conflist.get("plugins") or []:
        ipam = p.get("ipam") if isinstance(p, dict) else None
        if not isinstance(ipam, dict):
            continue
        try:
            if ipam.get("type") == "host-local":
                if ipam.get("subnet"):
                    return [ipaddress.ip_network(str(ipam["subnet"]), strict=False)]
                ranges = ipam.get("ranges") or []
                return [ipaddress.ip_network(str(r["subnet"]), strict=False) for rs in ranges for r in rs] or None
            if ipam.get("type") == "whereabouts" and ipam.get("range"):
                return [ipaddress.ip_network(str(ipam["range"]), strict=False)]
        except (ValueError, KeyError, TypeError):
            return None
        return None
    return None


def prepare(a: Attachment, ask: Ask, held: Iterable[Attachment]) -> None:
    """Put what the pod asks into the attachment (its conflist, CNI_ARGS and runtimeConfig), or refuse it with a
    CNI error naming the pod, the annotation and the item. `held`: the attachments of other containers on the
    node (for addresses and MACs already taken)."""
    conf = copy.deepcopy(a.conflist)
    meta = conf.get("netcomp") or {}
    kind = meta.get("type")
    caps = declared(conf)
    runtime = dict(a.capability_args)
    cni_args: list[tuple[str, str]] = []
    name = display_name(a.network, conf)
    nets = subnets(a.network, conf)
    pool = Pool.of(a.network, conf)
    if ask.kind is not None:
        _danm(ask, conf, name, pool)
    if ask.ips:
        _put_ips(ask, conf, name, nets, runtime if pool is None else None, "ips" in caps)
    if ask.ips and pool is not None:
        _reservable(ask, pool, name)
    if ask.mac is not None:
        cni_args += _put_mac(ask, conf, name, runtime, "mac" in caps)
    if ask.cni_args:
        _put_cni_args(ask, conf, name)
    for key, value in ask.capabilities.items():
        if key not in caps:
            raise ask.error(
                f"{_field(key)}: none of network {name}'s plugins takes the {key!r} capability, so nothing "
                "would apply it",
                f"add a plugin that does (portmap, bandwidth, ...) with capabilities: {{{key}: true}}",
            )
        runtime[key] = value
    if ask.device_id is not None and kind != "sriov" and not meta.get("resourceName"):
        if "deviceID" not in caps:
            raise ask.error(
                f"deviceID: network {name} is not an SR-IOV network and none of its plugins takes the 'deviceID' "
                "capability"
            )
        runtime["deviceID"] = ask.device_id
    _not_held(a.network, ask, held, name, addresses=pool is None)
    a.conflist = conf
    a.capability_args = runtime
    if cni_args:
        pairs = [p for p in a.args.split(";") if p]
        if not any(p.partition("=")[0] == "IgnoreUnknown" for p in pairs):
            pairs.insert(0, "IgnoreUnknown=1")  # the other plugins of the chain must not refuse MAC
        a.args = ";".join([*pairs, *(f"{k}={v}" for k, v in cni_args)])


def _put_ips(
    ask: Ask,
    conf: dict[str, Any],
    name: str,
    nets: list[IPNetwork] | None,
    runtime: dict[str, Any] | None,
    capability: bool,
) -> None:
    """The addresses asked for, checked against the network's subnets; unless netcomp's pool gives them
    (`runtime` None), passed on as the `ips` capability, or else in the IPAM's CNI_ARGS."""
    for ip, prefixed in zip(ask.ips, ask.prefixed, strict=True):
        if nets is None:
            continue
        if not any(ip.ip in n for n in nets if n.version == ip.version):
            raise ask.error(
                f"ips: {ip.ip} is outside network {name} ({', '.join(map(str, nets))})", "no plugin was run"
            )
        if prefixed and ip.network not in nets:
            raise ask.error(
                f"ips: {ip} has another prefix than network {name}'s subnet ({', '.join(map(str, nets))})",
                "no plugin was run",
            )
    if runtime is None:
        return
    written = [str(ip) if p else str(ip.ip) for ip, p in zip(ask.ips, ask.prefixed, strict=True)]
    if capability:
        runtime["ips"] = written
    else:
        _into_ipam_args(conf, ask, name, {"ips": written})


def _reservable(ask: Ask, pool: Pool, name: str) -> None:
    """The pool's own rule for an exact claim (Pool.reservable), told before anything is claimed or detached."""
    for ip in ask.ips:
        why = pool.reservable(ip.ip)
        if why is not None:
            raise ask.error(f"ips: {ip.ip} cannot be claimed on network {name}: {why}", "no plugin was run")


def _put_mac(
    ask: Ask, conf: dict[str, Any], name: str, runtime: dict[str, Any], capability: bool
) -> list[tuple[str, str]]:
    """The MAC asked for, where the plugins take it: sriov's key, the `mac` capability, else CNI_ARGS (returned)."""
    assert ask.mac is not None
    kind = (conf.get("netcomp") or {}).get("type")
    if kind == "ipvlan":
        raise ask.error(
            f"mac: network {name} is ipvlan, whose interfaces have their master's MAC; a pod cannot choose one",
            "use a macvlan network for a MAC of its own",
        )
    if kind == "sriov":
        for p in conf.get("plugins") or []:
            if p.get("type") == "sriov":
                p["mac"] = ask.mac
    elif capability:
        runtime["mac"] = ask.mac
    else:
        return [("MAC", ask.mac)]
    return []


def _put_cni_args(ask: Ask, conf: dict[str, Any], name: str) -> None:
    """The element's cni-args into every plugin's args.cni, but never a key netcomp gives itself."""
    assert ask.cni_args is not None
    mine = sorted(k for k in ask.cni_args if str(k).lower() in NETCOMP_ARGS)
    if mine:
        # Plugins match keys without regard to case (Go's JSON): an `ips` here would replace the addresses
        # netcomp claimed, past every check.
        raise ask.error(
            f"cni-args: {', '.join(map(repr, mine))} is netcomp's to give: ask with the element's ips and mac"
        )
    for p in conf.get("plugins") or []:
        _merge_cni_args(p, ask.cni_args, ask, f"cni-args: network {name}")


def _danm(ask: Ask, conf: Mapping[str, Any], name: str, pool: Pool | None) -> None:
    """DANM's rules for a connection: an address asked of a network with no CIDR (an L2 one) is refused, as
    DANM's IPAM refuses it (a static backend's own IPAM decides: only an exact address reaches it); proutes need
    the network's rt_tables."""
    meta = conf.get("netcomp") or {}
    if ask.families and pool is None and meta.get("type") != "static":
        raise ask.error(
            f"ip: network {name} has no cidr or net6 (an L2 network): no address can be allocated on it",
            "ask for ip: none, or give the network a cidr",
        )
    if pool is not None and ask.families:
        have = {rs[0].subnet.version for rs in pool.sets if rs}
        missing = sorted(set(ask.families) - have)
        if missing:
            v = missing[0]
            raise ask.error(
                f"{'ip' if v == 4 else 'ip6'}: network {name} has no {'cidr' if v == 4 else 'net6'}: no IPv{v} "
                "address can be allocated on it"
            )
    if ask.proutes and not meta.get("routeTable"):
        raise ask.error(
            f"proutes: network {name} has no rt_tables, the table a pod's proutes go to", "give it Options.rt_tables"
        )


def _field(capability: str) -> str:
    return {"infinibandGUID": "infiniband-guid"}.get(capability, capability)


def _merge_cni_args(plugin: dict[str, Any], values: Mapping[str, Any], ask: Ask, where: str) -> None:
    args = plugin.setdefault("args", {})
    if not isinstance(args, dict) or not isinstance(args.setdefault("cni", {}), dict):
        raise ask.error(f"{where}'s plugin {plugin.get('type')} has args that are not an object")
    args["cni"].update(values)


def _into_ipam_args(conf: dict[str, Any], ask: Ask, name: str, values: dict[str, Any]) -> None:
    for p in conf.get("plugins") or []:
        if isinstance(p.get("ipam"), dict):
            _merge_cni_args(p, values, ask, f"ips: network {name}")
            return
    raise ask.error(
        f"ips: network {name} has no IPAM section and none of its plugins takes the 'ips' capability, so nothing "
        "would give the addresses"
    )


def _not_held(network: str, ask: Ask, held: Iterable[Attachment], name: str, *, addresses: bool) -> None:
    """An address or MAC the pod asks for that another container holds on this network (from the node's
    records). `addresses` False: a netcomp pool's, whose claims the allocator checks cluster-wide instead."""
    wanted = {ip.ip for ip in ask.ips} if addresses else set()
    if not wanted and ask.mac is None:
        return
    for other in held:
        if other.network != network or other.result is None:
            continue
        for ip in other.result.get("ips") or []:
            try:
                addr = ipaddress.ip_interface(str(ip.get("address"))).ip
            except ValueError:
                continue
            if addr in wanted:
                raise ask.error(f"ips: {addr} on network {name} is held by another container on this node")
        if ask.mac is not None:
            for iface in other.result.get("interfaces") or []:
                if iface.get("sandbox") and str(iface.get("mac", "")).lower() == ask.mac:
                    raise ask.error(f"mac {ask.mac} on network {name} is held by another container on this node")


def check_gateways(a: Attachment, ask: Ask) -> None:
    """Before any plugin: a default-route gateway outside the network's known subnets."""
    nets = subnets(a.network, a.conflist)
    for gw in ask.gateways or ():
        if nets is not None and not any(gw in n for n in nets if n.version == gw.version):
            raise ask.error(
                f"default-route: gateway {gw} is outside network {display_name(a.network, a.conflist)} "
                f"({', '.join(map(str, nets))})",
                "no plugin was run",
            )


def check(a: Attachment, ask: Ask, state: LinkState | None) -> None:
    """After the plugins: the interface has the MAC and the addresses asked for, else DelegateError 7 (rolled back)."""
    name = display_name(a.network, a.conflist)
    if state is None:
        raise ask.error(f"network {name}'s plugins left no interface {a.ifname} in the container")
    if ask.mac is not None and state.mac != ask.mac:
        raise ask.error(
            f"mac: network {name}'s plugins gave {a.ifname} the MAC {state.mac}, not {ask.mac}",
            "its plugins read neither the 'mac' capability nor MAC in CNI_ARGS: add tuning with "
            "capabilities: {mac: true}",
        )
    have = {ipaddress.ip_interface(x).ip for x in state.addresses}
    for ip in ask.ips:
        if ip.ip not in have:
            raise ask.error(
                f"ips: network {name}'s plugins did not give {a.ifname} the address {ip.ip}",
                "its IPAM reads neither the 'ips' capability nor args.cni.ips (host-local and static do)",
            )


def policy_routes(a: Attachment, ask: Ask, state: LinkState | None) -> list[PolicyRoutes]:
    """DANM's proutes of a connection: per address family, a rule from the interface's address (with its prefix
    length) to the network's rt_tables, and the routes in it."""
    table = int((a.conflist.get("netcomp") or {})["routeTable"])  # prepare() refused a network without one
    out = []
    for version in (4, 6):
        routes = tuple((str(d), str(g)) for d, g in ask.proutes if d.version == version)
        if not routes:
            continue
        source = next(
            (x for x in (state.addresses if state else ()) if ipaddress.ip_interface(x).version == version), None
        )
        if source is None:
            raise ask.error(
                f"proutes{'6' if version == 6 else ''}: {a.ifname} has no IPv{version} address to route from"
            )
        out.append(PolicyRoutes(a.ifname, table, source, routes))
    return out


def routes(atts: list[tuple[Attachment, Ask | None]]) -> list[DefaultRoute]:
    """The default routes a pod's default-route items ask for, one per address family: a gateway given makes
    that interface the family's default; an empty list keeps the families of the network's own default routes
    (from its result). DelegateError when that network has none."""
    out: list[DefaultRoute] = []
    for a, ask in atts:
        if ask is None or ask.gateways is None:
            continue
        if ask.gateways:
            out += [DefaultRoute(gw.version, a.ifname, str(gw)) for gw in ask.gateways]
            continue
        families = {v for v, _ in _defaults_of(a)}
        if not families:
            raise ask.error(
                f"default-route []: network {display_name(a.network, a.conflist)} gave no default route of its "
                "own to keep (name a gateway)"
            )
        out += [DefaultRoute(v, a.ifname, None) for v in sorted(families)]
    return out


def _default_family(route: Mapping[str, Any]) -> int | None:
    """The address family of a result's default route; None for any other route (or one that is not a route)."""
    try:
        dst = ipaddress.ip_network(str(route.get("dst")), strict=False)
    except ValueError:
        return None
    return dst.version if dst.prefixlen == 0 else None


def _defaults_of(a: Attachment) -> list[tuple[int, str | None]]:
    given = (a.result or {}).get("routes") or []
    return [(v, r.get("gw")) for r in given if (v := _default_family(r)) is not None]


def record_routes(atts: list[Attachment], moved: list[DefaultRoute]) -> None:
    """The results as the container now is: a family's default route only in the result of the attachment that
    holds it (with its gateway, when one was given)."""
    for want in moved:
        for a in atts:
            if a.result is None:
                continue
            keeps_own = a.ifname == want.ifname and want.gateway is None
            keep = [r for r in a.result.get("routes") or [] if keeps_own or _default_family(r) != want.family]
            if a.ifname == want.ifname and want.gateway is not None:
                keep.append({"dst": DEFAULT_DST[want.family], "gw": want.gateway})
            a.result = {**a.result, "routes": keep}


def gateways_of(a: Attachment) -> list[str]:
    """The default gateways an attachment's result holds (network-status's `gateway`)."""
    return [gw for _, gw in _defaults_of(a) if gw]


def held_by_others(entries: Iterable[Record], container_id: str) -> list[Attachment]:
    return [a for e in entries if e.container_id != container_id for a in e.attachments]
