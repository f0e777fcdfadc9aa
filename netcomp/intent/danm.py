"""DANM's DanmNet, ClusterNetwork and TenantNetwork (danm.k8s.io/v1) onto the native Network model, with the checks
of DANM's admission webhook (pkg/admit/validators.go in nokia/danm), each a positioned error with DANM's words."""

from __future__ import annotations

import ipaddress
from typing import Any

from netcomp.errors import Diagnostic
from netcomp.intent.compat import Collector, mapping, metadata, unknown_top, validate
from netcomp.intent.intent import Intent
from netcomp.intent.source import Document, PathKey
from netcomp.intent.tenancy import Completion
from netcomp.names import DNS_LABEL_RE

KINDS = ("DanmNet", "ClusterNetwork", "TenantNetwork")
NAMESPACED = ("DanmNet", "TenantNetwork")  # for their own namespace's pods only; ClusterNetwork is cluster-wide
API_VERSIONS = ("danm.k8s.io/v1", "danm.io/v1")  # DANM's group before and after its 4.3 rename
DANM_DYNAMIC = ("ipvlan", "macvlan", "sriov")
DANM_MAX_NID = 11  # DANM MaxNidLength: room for its VLAN/VxLAN host interface names
DANM_MIN_V4_PREFIX = 8  # DANM MaxNetMaskLength
DANM_V6_POOL_PREFIX = 106  # DANM defaults allocation_pool_v6 to the first /106 of net6
DANM_DEFAULT_PREFIX = "eth"
BASE: PathKey = ("spec", "Options")

# DANM's options that say where addresses and links come from (the static backend ignores them all).
_IPAM_OPTIONS = ("host_device", "cidr", "net6", "allocation_pool", "allocation_pool_v6", "routes", "routes6",
                 "vlan", "vxlan", "device_pool")  # fmt: skip
_DANM_IGNORED = dict.fromkeys(
    ("alloc", "alloc6"),
    "DANM's allocation bitmask is runtime state kept by DANM's IPAM; netcomp keeps one claim per address",
)
_DANM_OPTIONS = {*_IPAM_OPTIONS, "container_prefix", "rt_tables", *_DANM_IGNORED}
DANM_FIELDMAP: dict[PathKey, PathKey] = {
    ("metadata",): ("metadata",),
    ("metadata", "name"): ("metadata", "name"),
    ("spec",): ("spec",),
    ("spec", "type"): ("spec", "NetworkType"),
    ("spec", "networkID"): ("spec", "NetworkID"),
    ("spec", "hostDevice"): ("spec", "Options", "host_device"),
    ("spec", "resourceName"): ("spec", "Options", "device_pool"),
    ("spec", "vlan"): ("spec", "Options", "vlan"),
    ("spec", "vxlan"): ("spec", "Options", "vxlan"),
    ("spec", "interfacePrefix"): ("spec", "Options", "container_prefix"),
    ("spec", "ipam"): ("spec", "Options", "cidr"),
}


def _ip(c: Collector, value: Any, loc: PathKey) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(str(value))
    except ValueError:
        c.error(f"{loc[-1]}: {value!r} is not a valid IP address", loc)
        return None


def _cidr(c: Collector, value: Any, loc: PathKey, version: int) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        net = ipaddress.ip_network(str(value), strict=False)
    except ValueError:
        c.error(f"Invalid CIDR: {value}", loc)
        return None
    if net.version != version:
        c.error(f"{loc[-1]}: {value} is not an IPv{version} CIDR", loc)
        return None
    return net


def _routes(c: Collector, routes: Any, loc: PathKey, net: Any) -> list[dict[str, str]]:
    if routes is None:
        return []
    if net is None:
        c.error("IP routes cannot be defined for a L2 network", loc, key=True)
        return []
    if not isinstance(routes, dict):
        c.error(f"{loc[-1]}: must be a mapping of destination CIDR to gateway", loc)
        return []
    out = []
    for dst, gw in routes.items():
        gwa = _ip(c, gw, (*loc, dst))
        if gwa is not None and gwa not in net:
            c.error(f"Specified GW address:{gw} is not part of CIDR:{net}", (*loc, dst))
        out.append({"dst": str(dst), "gw": str(gw)})
    return out


def _v4_range(c: Collector, opts: dict[str, Any]) -> tuple[Any, dict[str, Any] | None]:
    pool = opts.get("allocation_pool") or {}
    ploc = (*BASE, "allocation_pool")
    if opts.get("cidr") in (None, ""):
        if isinstance(pool, dict) and (pool.get("start") or pool.get("end")):
            c.error("Allocation pool cannot be defined without CIDR!", ploc, key=True)
        return None, None
    net = _cidr(c, opts["cidr"], (*BASE, "cidr"), 4)
    if net is None:
        return None, None
    if net.prefixlen < DANM_MIN_V4_PREFIX:
        c.error(f"Netmask of the IPv4 CIDR is bigger than the maximum allowed /{DANM_MIN_V4_PREFIX}", (*BASE, "cidr"))
        return None, None
    if not isinstance(pool, dict):
        c.error("allocation_pool: must be a mapping with start and end", ploc)
        return net, None
    return net, _range(c, pool, ploc, net, (net, (*BASE, "cidr")))


# DANM's words when an allocation pool (IPv4 or v6) breaks a rule: a bound outside the network, bounds reversed.
_POOL_ERRORS = {
    4: ("Allocation pool is outside of defined CIDR",
        "Allocation pool start:{start} is bigger than or equal to allocation pool end:{end}"),
    6: ("allocation_pool_v6 is outside of its cidr {net}",
        "allocation_pool_v6 start:{start} is bigger than or equal to end:{end}"),
}  # fmt: skip


def _range(
    c: Collector, pool: dict[str, Any], ploc: PathKey, subnet: Any, within: tuple[Any, PathKey]
) -> dict[str, Any] | None:
    """A range of `subnet` from a pool's start and end, inside `within` (a network, and where it is written) and in
    order; DANM's defaults are the network minus its first and last address. An error is at the bound that breaks
    the rule (at the network, when that bound is a default)."""
    net, net_loc = within
    outside, reverse = _POOL_ERRORS[net.version]
    given = {k: _ip(c, pool[k], (*ploc, k)) for k in ("start", "end") if pool.get(k)}
    if None in given.values():
        return None
    start = given.get("start") or net.network_address + 1
    end = given.get("end") or net.broadcast_address - 1
    for k, addr in (("start", start), ("end", end)):
        if addr not in net:
            c.error(outside.format(net=net), (*ploc, k) if k in given else net_loc)
            return None
    if int(end) <= int(start):
        c.error(reverse.format(start=start, end=end), (*ploc, "end" if "end" in given else "start"))
        return None
    return {"subnet": str(subnet), "rangeStart": str(start), "rangeEnd": str(end)}


def _v6_range(c: Collector, opts: dict[str, Any]) -> tuple[Any, dict[str, Any] | None]:
    pool = opts.get("allocation_pool_v6") or {}
    ploc = (*BASE, "allocation_pool_v6")
    if opts.get("net6") in (None, ""):
        if isinstance(pool, dict) and any(pool.get(k) for k in ("cidr", "start", "end")):
            c.error("allocation_pool_v6 cannot be defined without net6", ploc, key=True)
        return None, None
    net = _cidr(c, opts["net6"], (*BASE, "net6"), 6)
    if net is None:
        return None, None
    if not isinstance(pool, dict):
        c.error("allocation_pool_v6: must be a mapping with cidr, start and end", ploc)
        return net, None
    if pool.get("cidr"):
        pnet = _cidr(c, pool["cidr"], (*ploc, "cidr"), 6)
        if pnet is None:
            return net, None
        if not pnet.subnet_of(net):  # type: ignore[arg-type]
            c.error(f"allocation_pool_v6 cidr {pnet} is outside net6 {net}", (*ploc, "cidr"))
            return net, None
        pnet_loc = (*ploc, "cidr")
    else:
        plen = max(net.prefixlen, DANM_V6_POOL_PREFIX)
        pnet, pnet_loc = ipaddress.ip_network(f"{net.network_address}/{plen}"), (*BASE, "net6")
    return net, _range(c, pool, ploc, net, (pnet, pnet_loc))


def parse(doc: Document, tenancy: Completion | None = None) -> tuple[Intent | None, list[Diagnostic]]:
    """DanmNet, ClusterNetwork, TenantNetwork (danm.k8s.io/v1, danm.io/v1) -> Network. `tenancy`: what the
    TenantConfig gives a TenantNetwork (intent/tenancy.py), put in after the checks of what the tenant wrote."""
    c = Collector(doc)
    data = doc.data
    kind = data["kind"]
    unknown_top(c, data)
    meta = metadata(c, data)
    spec = mapping(c, data.get("spec"), ("spec",))
    if meta is None or spec is None:
        return None, c.diags
    opts = _options(c, spec)
    nid, ntype = spec.get("NetworkID"), spec.get("NetworkType") or "ipvlan"
    if tenancy is not None and tenancy.network_id:
        nid = tenancy.network_id  # the TenantConfig's networkIds override
    if not nid:
        c.error("Spec.NetworkID mandatory parameter is missing!", ("spec",), key=True)
        return None, c.diags
    if not isinstance(nid, str) or not isinstance(ntype, str):
        c.error("NetworkID and NetworkType must be strings", ("spec",), key=True)
        return None, c.diags
    _webhook_rules(c, kind, spec, opts, nid, ntype)
    if tenancy is not None:
        opts = {**opts, **_given(tenancy)}
    v4net, v4range = _v4_range(c, opts)
    v6net, v6range = _v6_range(c, opts)
    routes = _routes(c, opts.get("routes"), (*BASE, "routes"), v4net)
    routes += _routes(c, opts.get("routes6"), (*BASE, "routes6"), v6net)
    if ntype in DANM_DYNAMIC:
        ranges = [r for r in (v4range, v6range) if r]
        native_spec = _dynamic(
            c, opts, ntype, {"type": "cluster", "ranges": ranges, "routes": routes} if ranges else None
        )
    else:
        native_spec = _static(c, opts, nid, ntype)
    native_spec["interfacePrefix"] = opts.get("container_prefix") or DANM_DEFAULT_PREFIX
    native = {"apiVersion": "netcomp.io/v1", "kind": "Network", "metadata": {"name": meta.get("name")}}
    native["spec"] = native_spec
    extra: dict[str, Any] = {"danmKind": kind}
    if tenancy is not None:
        extra["tenantConfig"] = {"name": tenancy.config, **_given(tenancy), "networkID": nid}
    table = _route_table(c, opts)
    if table:
        extra["routeTable"] = table  # where a pod's proutes go (the main table takes the network's routes)
    tenants = _allowed_tenants(c, kind, spec)
    if tenants:
        extra["allowedTenants"] = tenants
    namespace = meta.get("namespace") if kind in NAMESPACED else None
    if namespace is not None and (not isinstance(namespace, str) or not DNS_LABEL_RE.fullmatch(namespace)):
        c.error("metadata.namespace must be a namespace's name (a DNS-1123 label)", ("metadata", "namespace"))
    if c.failed:
        return None, c.diags
    return validate(c, native, DANM_FIELDMAP, f"{data['apiVersion']} {kind}", None, namespace, extra)


def _given(t: Completion) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if t.host_device:
        out["host_device"] = t.host_device
    if t.vni_type and t.vni is not None:
        out[t.vni_type] = t.vni
    return out


# The kernel's own routing tables (linux/rtnetlink.h: RT_TABLE_DEFAULT, RT_TABLE_MAIN, RT_TABLE_LOCAL).
RESERVED_TABLES = {253: "default", 254: "main", 255: "local"}
MAX_TABLE = 2**32 - 1  # a table id is 32 bits (RTA_TABLE, FRA_TABLE); `ip route ... table 300` is one


def _route_table(c: Collector, opts: dict[str, Any]) -> int | None:
    """Options.rt_tables: the policy routing table of the network's proutes (DANM's CRD says INTEGER; 0 is
    none, as in DANM). Any table the kernel takes for a policy route but its own three."""
    table = opts.get("rt_tables")
    if table is None:
        return None
    where = (*BASE, "rt_tables")
    if not isinstance(table, int) or isinstance(table, bool) or not 0 <= table <= MAX_TABLE:
        c.error(f"rt_tables: {table!r} is not a routing table (1 to {MAX_TABLE}; 0 for none)", where)
        return None
    if table in RESERVED_TABLES:
        c.error(
            f"rt_tables: {table} is the kernel's {RESERVED_TABLES[table]} table, which a network's policy routes "
            "cannot take (reserved: 253 default, 254 main, 255 local)",
            where,
        )
        return None
    return table or None


def _allowed_tenants(c: Collector, kind: str, spec: dict[str, Any]) -> list[str]:
    """ClusterNetwork's AllowedTenants: the namespaces whose pods may use it (absent or empty: every one)."""
    tenants = spec.get("AllowedTenants")
    if kind != "ClusterNetwork" or tenants is None:
        return []
    if not isinstance(tenants, list):
        c.error("AllowedTenants must be a list of namespaces", ("spec", "AllowedTenants"))
        return []
    for i, t in enumerate(tenants):
        if not isinstance(t, str) or not DNS_LABEL_RE.fullmatch(t):
            c.error(f"AllowedTenants[{i}]: {t!r} is not a namespace's name", ("spec", "AllowedTenants", i))
    return [t for t in tenants if isinstance(t, str)]


def _options(c: Collector, spec: dict[str, Any]) -> dict[str, Any]:
    """spec.Options, with a warning for each key of spec and of Options that netcomp does not use."""
    for k in spec:
        if k not in ("NetworkID", "NetworkType", "Options", "AllowedTenants"):
            c.warn(f"spec.{k}: unknown key ignored (the API server would prune it)", ("spec", k))
    opts = mapping(c, spec.get("Options"), BASE, required=False) or {}
    for k in opts:
        if k in _DANM_IGNORED:
            c.warn(f"Options.{k}: ignored: {_DANM_IGNORED[k]}", (*BASE, k))
        elif k not in _DANM_OPTIONS:
            c.warn(f"Options.{k}: unknown DANM option ignored", (*BASE, k))
    return opts


def _webhook_rules(c: Collector, kind: str, spec: dict[str, Any], opts: dict[str, Any], nid: str, ntype: str) -> None:
    """The checks of DANM's admission webhook that span fields, each at the key that breaks it."""
    if "AllowedTenants" in spec and kind != "ClusterNetwork":
        c.error(
            "AllowedTenants attribute is only valid for the ClusterNetwork API!", ("spec", "AllowedTenants"), key=True
        )
    vlan, vxlan = opts.get("vlan") or 0, opts.get("vxlan") or 0
    if vlan and vxlan:
        c.error("VLAN ID and VxLAN ID parameters are mutually exclusive", (*BASE, "vxlan"), key=True)
    if kind == "TenantNetwork" and (vlan or vxlan):
        c.error(
            "Manually configuring Spec.Options.vlan, or Spec.Options.vxlan attributes is not allowed for "
            "TenantNetworks!",
            (*BASE, "vlan" if vlan else "vxlan"),
            key=True,
        )
    if ntype in DANM_DYNAMIC and len(nid) > DANM_MAX_NID and (vlan or vxlan):
        c.error(
            f"Spec.NetworkID cannot be longer than {DANM_MAX_NID} characters (otherwise VLAN and VxLAN host "
            "interface creation might fail)!",
            ("spec", "NetworkID"),
        )
    host, pool = opts.get("host_device"), opts.get("device_pool")
    if ntype == "sriov" and (not pool or host):
        c.error(
            "Spec.Options.device_pool must, and Spec.Options.host_device cannot be provided for SR-IOV networks!",
            (*BASE, "host_device") if host else BASE,  # a host_device is there to remove; else device_pool is missing
            key=True,
        )
    elif ntype != "sriov" and host and pool:
        c.error(
            "Spec.Options.device_pool and Spec.Options.host_device cannot be provided together!",
            (*BASE, "device_pool"),
            key=True,
        )


def _static(c: Collector, opts: dict[str, Any], nid: str, ntype: str) -> dict[str, Any]:
    """DANM's static integration level: NetworkType names the plugin, NetworkID the CNI file."""
    for k in _IPAM_OPTIONS:
        if k in opts:
            c.warn(f"Options.{k}: ignored for the static backend {ntype!r}: the CNI file {nid} decides", (*BASE, k))
    return {"type": "static", "networkID": nid}


def _dynamic(c: Collector, opts: dict[str, Any], ntype: str, ipam: dict[str, Any] | None) -> dict[str, Any]:
    """ipvlan, macvlan, sriov: DANM's options onto the native spec, addresses from `ipam`: netcomp's cluster-wide
    allocation, as DANM's own IPAM allocated from the network's pool for every node."""
    out: dict[str, Any] = {"type": ntype}
    if ipam is not None:
        out["ipam"] = ipam
    vlan, vxlan, host = opts.get("vlan") or 0, opts.get("vxlan") or 0, opts.get("host_device")
    if ntype == "sriov":
        out["resourceName"] = opts.get("device_pool")
        if vlan:
            out["vlan"] = vlan
        if vxlan:
            c.warn(
                "Options.vxlan: ignored for sriov (DANM connects only ipvlan and macvlan to VxLAN)", (*BASE, "vxlan")
            )
        return out
    if not host:
        c.error(f"Spec.Options.host_device is required for {ntype} networks", BASE, key=True)
    out["hostDevice"] = host
    out["mode"] = "l2" if ntype == "ipvlan" else "bridge"
    if vlan:
        out["vlan"] = vlan
    if vxlan:
        out["vxlan"] = {"vni": vxlan}
    return out
