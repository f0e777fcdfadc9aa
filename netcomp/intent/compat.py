"""DANM's DanmNet / ClusterNetwork / TenantNetwork and Multus's NetworkAttachmentDefinition, mapped onto the
native Network model.

Compat documents follow their origin's rules: the API server prunes unknown fields of these CRDs, so here an
unknown key is a warning that names what is ignored, not an error. DANM's admission webhook checks
(pkg/admit/validators.go in nokia/danm) are applied with DANM's semantics, each as a positioned error.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from netcomp.errors import Diagnostic
from netcomp.intent import Intent, pydantic_diagnostics
from netcomp.intent.model import Network
from netcomp.intent.source import Document, PathKey

DANM_DYNAMIC = ("ipvlan", "macvlan", "sriov")
DANM_MAX_NID = 11  # DANM MaxNidLength: room for its VLAN/VxLAN host interface names
DANM_MIN_V4_PREFIX = 8  # DANM MaxNetMaskLength
DANM_V6_POOL_PREFIX = 106  # DANM defaults allocation_pool_v6 to the first /106 of net6
DANM_DEFAULT_PREFIX = "eth"

_DANM_OPTIONS = {
    "host_device",
    "device_pool",
    "cidr",
    "allocation_pool",
    "net6",
    "allocation_pool_v6",
    "container_prefix",
    "rt_tables",
    "routes",
    "routes6",
    "vlan",
    "vxlan",
    "alloc",
    "alloc6",
}
_DANM_IGNORED = {
    "rt_tables": "netcomp installs routes in the main table; DANM's per-network policy tables are not supported",
    "alloc": "DANM's allocation bitmask is runtime state kept by DANM's IPAM; host-local keeps its own",
    "alloc6": "DANM's allocation bitmask is runtime state kept by DANM's IPAM; host-local keeps its own",
}
_K8S_META = {
    "name",
    "namespace",
    "labels",
    "annotations",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "ownerReferences",
    "finalizers",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generateName",
}

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


class _Collector:
    def __init__(self, doc: Document) -> None:
        self.doc = doc
        self.diags: list[Diagnostic] = []

    def error(self, msg: str, loc: Sequence[Any], key: bool = False) -> None:
        self.diags.append(self.doc.diagnostic(msg, loc, key=key))

    def warn(self, msg: str, loc: Sequence[Any], key: bool = True) -> None:
        self.diags.append(self.doc.diagnostic(msg, loc, key=key, severity="warning"))

    @property
    def failed(self) -> bool:
        return any(d.is_error for d in self.diags)


def _mapping(c: _Collector, data: Any, loc: PathKey, required: bool = True) -> dict[str, Any] | None:
    if data is None:
        if required:
            c.error(f"missing required key {loc[-1]!r}", loc[:-1])
        return None
    if not isinstance(data, dict):
        c.error(f"{'.'.join(map(str, loc))}: must be a mapping", loc)
        return None
    return data


def _metadata(c: _Collector, data: dict[str, Any]) -> dict[str, Any] | None:
    meta = _mapping(c, data.get("metadata"), ("metadata",))
    if meta is None:
        return None
    for k in meta:
        if k not in _K8S_META:
            c.warn(f"metadata.{k}: ignored (not Kubernetes object metadata)", ("metadata", k))
    return meta


def _unknown_top(c: _Collector, data: dict[str, Any]) -> None:
    for k in data:
        if k not in ("apiVersion", "kind", "metadata", "spec", "status"):
            c.warn(f"unknown key {k!r} ignored (the API server would prune it)", (k,))


def _validate(
    c: _Collector,
    native: dict[str, Any],
    fieldmap: dict[PathKey, PathKey],
    fmt: str,
    inline: dict[str, Any] | None = None,
) -> tuple[Intent | None, list[Diagnostic]]:
    doc = c.doc

    def translate(loc: Sequence[Any]) -> PathKey:
        # Drop pydantic's union tags (they are not keys of the converted data), then map to the source format.
        node: Any = native
        clean: list[Any] = []
        for part in loc:
            if (isinstance(node, dict) and part in node) or (
                isinstance(node, list) and isinstance(part, int) and part < len(node)
            ):
                node = node[part]
                clean.append(part)
        t = tuple(clean)
        for n in range(len(t), -1, -1):
            if t[:n] in fieldmap:
                return fieldmap[t[:n]]
        return ()

    try:
        net = Network.model_validate(native)
    except ValidationError as e:
        return None, [*c.diags, *pydantic_diagnostics(doc, e, translate)]
    if c.failed:
        return None, c.diags
    return Intent(net, doc, fmt, fieldmap, inline), c.diags


# ---------------------------------------------------------------------------------------------------- DANM


def _ip(c: _Collector, value: Any, loc: PathKey) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(str(value))
    except ValueError:
        c.error(f"{loc[-1]}: {value!r} is not a valid IP address", loc)
        return None


def _cidr(
    c: _Collector, value: Any, loc: PathKey, version: int
) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        net = ipaddress.ip_network(str(value), strict=False)
    except ValueError:
        c.error(f"Invalid CIDR: {value}", loc)
        return None
    if net.version != version:
        c.error(f"{loc[-1]}: {value} is not an IPv{version} CIDR", loc)
        return None
    return net


def _routes(c: _Collector, routes: Any, loc: PathKey, net: Any) -> list[dict[str, str]]:
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


def _v4_range(c: _Collector, opts: dict[str, Any], base: PathKey) -> tuple[Any, dict[str, Any] | None]:
    pool = opts.get("allocation_pool") or {}
    ploc = (*base, "allocation_pool")
    if opts.get("cidr") in (None, ""):
        if isinstance(pool, dict) and (pool.get("start") or pool.get("end")):
            c.error("Allocation pool cannot be defined without CIDR!", ploc, key=True)
        return None, None
    net = _cidr(c, opts["cidr"], (*base, "cidr"), 4)
    if net is None:
        return None, None
    if net.prefixlen < DANM_MIN_V4_PREFIX:
        c.error(
            f"Netmask of the IPv4 CIDR is bigger than the maximum allowed /{DANM_MIN_V4_PREFIX}",
            (*base, "cidr"),
        )
        return None, None
    if not isinstance(pool, dict):
        c.error("allocation_pool: must be a mapping with start and end", ploc)
        return net, None
    # DANM's defaults: the whole subnet minus network and broadcast address.
    start = _ip(c, pool["start"], (*ploc, "start")) if pool.get("start") else net.network_address + 1
    end = _ip(c, pool["end"], (*ploc, "end")) if pool.get("end") else net.broadcast_address - 1
    if start is None or end is None:
        return net, None
    if start not in net or end not in net:
        c.error("Allocation pool is outside of defined CIDR", ploc, key=True)
        return net, None
    if int(end) <= int(start):
        c.error(
            f"Allocation pool start:{start} is bigger than or equal to allocation pool end:{end}",
            ploc,
            key=True,
        )
        return net, None
    return net, {"subnet": str(net), "rangeStart": str(start), "rangeEnd": str(end)}


def _v6_range(c: _Collector, opts: dict[str, Any], base: PathKey) -> tuple[Any, dict[str, Any] | None]:
    pool = opts.get("allocation_pool_v6") or {}
    ploc = (*base, "allocation_pool_v6")
    if opts.get("net6") in (None, ""):
        if isinstance(pool, dict) and any(pool.get(k) for k in ("cidr", "start", "end")):
            c.error("allocation_pool_v6 cannot be defined without net6", ploc, key=True)
        return None, None
    net = _cidr(c, opts["net6"], (*base, "net6"), 6)
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
    else:
        plen = max(net.prefixlen, DANM_V6_POOL_PREFIX)
        pnet = ipaddress.ip_network(f"{net.network_address}/{plen}")
    start = _ip(c, pool["start"], (*ploc, "start")) if pool.get("start") else pnet.network_address + 1
    end = _ip(c, pool["end"], (*ploc, "end")) if pool.get("end") else pnet.broadcast_address - 1
    if start is None or end is None:
        return net, None
    if start not in pnet or end not in pnet:
        c.error("allocation_pool_v6 is outside of its cidr", ploc, key=True)
        return net, None
    if int(end) <= int(start):
        c.error(f"allocation_pool_v6 start:{start} is bigger than or equal to end:{end}", ploc, key=True)
        return net, None
    return net, {"subnet": str(net), "rangeStart": str(start), "rangeEnd": str(end)}


def danm(doc: Document) -> tuple[Intent | None, list[Diagnostic]]:
    """DanmNet, ClusterNetwork, TenantNetwork (danm.k8s.io/v1) -> Network."""
    c = _Collector(doc)
    data = doc.data
    kind = data["kind"]
    _unknown_top(c, data)
    meta = _metadata(c, data)
    spec = _mapping(c, data.get("spec"), ("spec",))
    if meta is None or spec is None:
        return None, c.diags
    for k in spec:
        if k not in ("NetworkID", "NetworkType", "Options", "AllowedTenants"):
            c.warn(f"spec.{k}: unknown key ignored (the API server would prune it)", ("spec", k))
    opts = _mapping(c, spec.get("Options"), ("spec", "Options"), required=False) or {}
    base: PathKey = ("spec", "Options")
    for k in opts:
        if k in _DANM_IGNORED:
            c.warn(f"Options.{k}: ignored: {_DANM_IGNORED[k]}", (*base, k))
        elif k not in _DANM_OPTIONS:
            c.warn(f"Options.{k}: unknown DANM option ignored", (*base, k))

    nid = spec.get("NetworkID")
    ntype = spec.get("NetworkType") or "ipvlan"
    if not nid:
        c.error("Spec.NetworkID mandatory parameter is missing!", ("spec",), key=True)
        return None, c.diags
    if not isinstance(nid, str) or not isinstance(ntype, str):
        c.error("NetworkID and NetworkType must be strings", ("spec",), key=True)
        return None, c.diags
    if "AllowedTenants" in spec and kind != "ClusterNetwork":
        c.error(
            "AllowedTenants attribute is only valid for the ClusterNetwork API!",
            ("spec", "AllowedTenants"),
            key=True,
        )
    elif "AllowedTenants" in spec:
        c.warn("AllowedTenants: ignored: a host-only node has no tenants", ("spec", "AllowedTenants"))
    vlan, vxlan = opts.get("vlan") or 0, opts.get("vxlan") or 0
    if vlan and vxlan:
        c.error("VLAN ID and VxLAN ID parameters are mutually exclusive", base, key=True)
    if kind == "TenantNetwork" and (vlan or vxlan):
        c.error(
            "Manually configuring Spec.Options.vlan, or Spec.Options.vxlan attributes is not allowed for "
            "TenantNetworks!",
            (*base, "vlan" if vlan else "vxlan"),
            key=True,
        )
    dynamic = ntype in DANM_DYNAMIC
    if dynamic and len(nid) > DANM_MAX_NID and (vlan or vxlan):
        c.error(
            f"Spec.NetworkID cannot be longer than {DANM_MAX_NID} characters (otherwise VLAN and VxLAN host "
            "interface creation might fail)!",
            ("spec", "NetworkID"),
        )
    host, pool = opts.get("host_device"), opts.get("device_pool")
    if ntype == "sriov":
        if not pool or host:
            c.error(
                "Spec.Options.device_pool must, and Spec.Options.host_device cannot be provided for SR-IOV networks!",
                base,
                key=True,
            )
    elif host and pool:
        c.error(
            "Spec.Options.device_pool and Spec.Options.host_device cannot be provided together!",
            base,
            key=True,
        )

    v4net, v4range = _v4_range(c, opts, base)
    v6net, v6range = _v6_range(c, opts, base)
    routes = _routes(c, opts.get("routes"), (*base, "routes"), v4net)
    routes += _routes(c, opts.get("routes6"), (*base, "routes6"), v6net)

    native_spec: dict[str, Any] = {"interfacePrefix": opts.get("container_prefix") or DANM_DEFAULT_PREFIX}
    if not dynamic:
        # DANM's static integration level: NetworkType names the plugin, NetworkID the CNI file.
        native_spec.update(type="static", networkID=nid)
        for k in (
            "host_device",
            "cidr",
            "net6",
            "allocation_pool",
            "allocation_pool_v6",
            "routes",
            "routes6",
            "vlan",
            "vxlan",
            "device_pool",
        ):
            if k in opts:
                c.warn(
                    f"Options.{k}: ignored for the static backend {ntype!r}: the CNI file {nid} decides",
                    (*base, k),
                )
    else:
        native_spec["type"] = ntype
        ranges = [r for r in (v4range, v6range) if r]
        if ranges:
            native_spec["ipam"] = {"type": "host-local", "ranges": ranges, "routes": routes}
        if ntype == "sriov":
            native_spec["resourceName"] = pool
            if vlan:
                native_spec["vlan"] = vlan
            if vxlan:
                c.warn(
                    "Options.vxlan: ignored for sriov (DANM connects only ipvlan and macvlan to VxLAN)",
                    (*base, "vxlan"),
                )
        else:
            if not host:
                c.error(f"Spec.Options.host_device is required for {ntype} networks", base, key=True)
            native_spec["hostDevice"] = host
            native_spec["mode"] = "l2" if ntype == "ipvlan" else "bridge"
            if vlan:
                native_spec["vlan"] = vlan
            if vxlan:
                native_spec["vxlan"] = {"vni": vxlan}
    native = {
        "apiVersion": "netcomp.io/v1",
        "kind": "Network",
        "metadata": {"name": meta.get("name")},
        "spec": native_spec,
    }
    if c.failed:
        return None, c.diags
    return _validate(c, native, DANM_FIELDMAP, f"danm.k8s.io/v1 {kind}")


# ---------------------------------------------------------------------------------------------------- Multus

NAD_FIELDMAP: dict[PathKey, PathKey] = {
    ("metadata",): ("metadata",),
    ("metadata", "name"): ("metadata", "name"),
    ("spec",): ("spec", "config"),
}


def nad(doc: Document) -> tuple[Intent | None, list[Diagnostic]]:
    """NetworkAttachmentDefinition (k8s.cni.cncf.io/v1): spec.config is inline CNI JSON, used as a static
    network whose name becomes metadata.name."""
    from netcomp.cni import spec as cnispec

    c = _Collector(doc)
    data = doc.data
    _unknown_top(c, data)
    meta = _metadata(c, data)
    spec = _mapping(c, data.get("spec"), ("spec",), required=False) or {}
    if meta is None:
        return None, c.diags
    for k in spec:
        if k != "config":
            c.warn(f"spec.{k}: unknown key ignored (the API server would prune it)", ("spec", k))
    annotations = meta.get("annotations") or {}
    if isinstance(annotations, dict) and "k8s.v1.cni.cncf.io/resourceName" in annotations:
        c.warn(
            "annotation k8s.v1.cni.cncf.io/resourceName: ignored: netcomp does not read device plugins; "
            "use a native sriov Network with resourceName",
            ("metadata", "annotations", "k8s.v1.cni.cncf.io/resourceName"),
        )
    raw = spec.get("config")
    if not raw:
        c.error(
            "spec.config is empty: netcomp needs the CNI configuration inline (Multus's lookup of a file by "
            "network name is not supported; use a static Network with networkID)",
            ("spec",),
            key=True,
        )
        return None, c.diags
    if not isinstance(raw, str):
        c.error("spec.config must be a string of CNI JSON", ("spec", "config"))
        return None, c.diags
    try:
        conflist = cnispec.to_conflist(cnispec.parse_json(raw.encode()))
    except cnispec.ConfigProblem as p:
        where = f" (line {p.line}, column {p.column} of the JSON)" if p.line else ""
        c.error(f"spec.config: {p.message}{where}", ("spec", "config"))
        return None, c.diags
    problems = cnispec.verify_conflist(conflist, check_name=False)
    for prob in problems:
        c.error(f"spec.config: {prob}", ("spec", "config"))
    name = meta.get("name")
    native = {
        "apiVersion": "netcomp.io/v1",
        "kind": "Network",
        "metadata": {"name": name},
        "spec": {"type": "static", "networkID": str(name)},
    }
    if c.failed:
        return None, c.diags
    return _validate(c, native, NAD_FIELDMAP, "k8s.cni.cncf.io/v1 NetworkAttachmentDefinition", conflist)
