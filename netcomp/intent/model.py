"""The native intent model (`netcomp.io/v1` `Network`); the JSON Schema generated from it is the contract.
Backends are a discriminated union on `spec.type`, IPAM on `spec.ipam.type`. Rules of one intent are validators
here (a rule across fields raises `BrokenAt` naming the key that breaks it); rules across intents are rules.py's."""

from __future__ import annotations

import ipaddress
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, ValidationInfo, field_validator, model_validator

from netcomp.intent.fields import (
    NETWORK_ID,
    PCI_ADDRESS,
    PREFIX_MAX,
    RESOURCE_NAME,
    BrokenAt,
    IfName,
    IfPrefix,
    IPAddress,
    IPInterface,
    IPNetwork,
    Mac,
    Name,
    Strict,
    check_in_subnet,
    parse_address,
    parse_cidr,
    parse_cidrs,
)


class Route(Strict):
    """A route installed in the container. `gw` defaults to the gateway of the matching address family."""

    dst: IPNetwork
    gw: IPAddress | None = None

    _dst = field_validator("dst", mode="before")(parse_cidr)
    _gw = field_validator("gw", mode="before")(parse_address)

    @model_validator(mode="after")
    def _same_family(self) -> Route:
        if self.gw is not None and self.gw.version != self.dst.version:
            raise BrokenAt("gw", f"IPv{self.gw.version} gw {self.gw} for the IPv{self.dst.version} dst {self.dst}")
        return self


class IPRange(Strict):
    """One subnet to allocate from. rangeStart/rangeEnd narrow the pool; gateway defaults to the first host."""

    subnet: IPNetwork
    rangeStart: IPAddress | None = None
    rangeEnd: IPAddress | None = None
    gateway: IPAddress | None = None
    exclude: list[IPNetwork] = Field(default_factory=list, description="whereabouts and cluster only")

    _subnet = field_validator("subnet", mode="before")(parse_cidr)
    _addrs = field_validator("rangeStart", "rangeEnd", "gateway", mode="before")(parse_address)
    _excl = field_validator("exclude", mode="before")(parse_cidrs)

    @field_validator("subnet")
    @classmethod
    def _room(cls, net: IPNetwork) -> IPNetwork:
        if net.num_addresses < 2:
            raise ValueError(f"subnet {net} has no room for hosts")
        return net

    # Field validators (not one model validator) so that each error points at the field that is wrong.
    _in_subnet = field_validator("rangeStart", "rangeEnd", "gateway")(check_in_subnet)

    @field_validator("exclude")
    @classmethod
    def _excl_inside(cls, v: list[IPNetwork], info: ValidationInfo) -> list[IPNetwork]:
        net = info.data.get("subnet")
        for i, ex in enumerate(v):
            if net is not None and (ex.version != net.version or not ex.subnet_of(net)):
                raise BrokenAt((i,), f"exclude {ex} is outside subnet {net}")
        return v

    @property
    def effective_gateway(self) -> IPAddress:
        """host-local's own default when no gateway is given: the subnet's first address after the network."""
        return self.gateway if self.gateway is not None else self.subnet.network_address + 1


class _RangedIPAM(Strict):
    """Shorthand `subnet`/`rangeStart`/`rangeEnd`/`gateway` for one range, or `ranges` for several (dual stack)."""

    subnet: IPNetwork | None = None
    rangeStart: IPAddress | None = None
    rangeEnd: IPAddress | None = None
    gateway: IPAddress | None = None
    ranges: list[IPRange] = Field(default_factory=list)
    routes: list[Route] = Field(default_factory=list)

    _subnet = field_validator("subnet", mode="before")(parse_cidr)
    _addrs = field_validator("rangeStart", "rangeEnd", "gateway", mode="before")(parse_address)
    _in_subnet = field_validator("rangeStart", "rangeEnd", "gateway")(check_in_subnet)

    @model_validator(mode="after")
    def _shape(self) -> Any:
        given = [f for f in ("subnet", "rangeStart", "rangeEnd", "gateway") if getattr(self, f) is not None]
        if given and self.ranges:
            raise BrokenAt(
                "ranges", "give either subnet (with rangeStart/rangeEnd/gateway) or ranges, not both", key=True
            )
        if given and self.subnet is None:
            raise BrokenAt(given[0], f"{given[0]} needs a subnet", key=True)
        if not given and not self.ranges:
            raise BrokenAt((), "needs a subnet (or ranges)")
        rs = self.all_ranges()
        for i, route in enumerate(self.routes):
            if route.gw is None and not any(r.subnet.version == route.dst.version for r in rs):
                v = route.dst.version
                raise BrokenAt(("routes", i, "dst"), f"dst {route.dst} has no gw, and no IPv{v} subnet gives one")
        return self

    def all_ranges(self) -> list[IPRange]:
        """The range sets as ranges: the subnet form as one range (with `exclude` where the type has one)."""
        if self.subnet is None:
            return list(self.ranges)
        exclude = getattr(self, "exclude", [])
        return [
            IPRange(
                subnet=self.subnet,
                rangeStart=self.rangeStart,
                rangeEnd=self.rangeEnd,
                gateway=self.gateway,
                exclude=exclude,
            )
        ]


class HostLocalIPAM(_RangedIPAM):
    """CNI host-local: addresses from ranges, leases on the node's disk."""

    type: Literal["host-local"]
    dataDir: str | None = Field(default=None, pattern=r"^/")


class WhereaboutsIPAM(_RangedIPAM):
    """whereabouts: cluster-wide allocation; `exclude` is passed through per range."""

    type: Literal["whereabouts"]


class ClusterIPAM(_RangedIPAM):
    """netcomp's own allocation, unique across every node that serves the network: the daemon gives each address
    before the delegates run (from blocks of the pool its node holds on the Kubernetes API when the node has a
    cluster, from a node-local store otherwise) and hands it to them as the static plugin's config. `exclude`:
    CIDRs never handed out (in the subnet form; each of `ranges` has its own)."""

    type: Literal["cluster"]
    exclude: list[IPNetwork] = Field(default_factory=list, description="CIDRs never handed out (with subnet)")
    blockSize: int | None = Field(
        default=None,
        ge=1,
        le=4096,
        description="Addresses per block a node holds (a power of two; default: about a sixteenth of the range, "
        "4 to 64); 1: one AddressClaim per address, made and deleted on the API server by each ADD and DEL",
    )

    @field_validator("blockSize")
    @classmethod
    def _power_of_two(cls, v: int | None) -> int | None:
        if v is not None and v & (v - 1):
            raise ValueError(f"blockSize {v} is not a power of two (1, 2, 4, ... 4096)")
        return v

    _excl = field_validator("exclude", mode="before")(parse_cidrs)

    @field_validator("exclude")
    @classmethod
    def _excl_inside(cls, v: list[IPNetwork], info: ValidationInfo) -> list[IPNetwork]:
        net = info.data.get("subnet")
        if v and net is None:
            raise ValueError("exclude needs a subnet (with ranges, give each range its own exclude)")
        for ex in v:
            if net is not None and (ex.version != net.version or not ex.subnet_of(net)):
                raise ValueError(f"exclude {ex} is outside subnet {net}")
        return v


class StaticAddress(Strict):
    address: IPInterface
    gateway: IPAddress | None = None

    @field_validator("address", mode="before")
    @classmethod
    def _iface(cls, v: Any) -> Any:
        if isinstance(v, str):
            if "/" not in v:
                raise ValueError(f"{v!r} needs a prefix length, like 10.1.0.5/24")
            try:
                return ipaddress.ip_interface(v)
            except ValueError:
                raise ValueError(f"{v!r} is not a valid address with prefix length") from None
        return v

    _gw = field_validator("gateway", mode="before")(parse_address)

    @field_validator("gateway")
    @classmethod
    def _inside(cls, v: IPAddress | None, info: ValidationInfo) -> IPAddress | None:
        addr = info.data.get("address")
        if v is not None and addr is not None and (v.version != addr.version or v not in addr.network):
            raise ValueError(f"gateway {v} is outside {addr.network}, the network of address {addr}")
        return v


class StaticIPAM(Strict):
    """CNI static: fixed addresses (one container per network, or per-container via CNI_ARGS IP=)."""

    type: Literal["static"]
    addresses: list[StaticAddress] = Field(default_factory=list)
    routes: list[Route] = Field(default_factory=list)

    @model_validator(mode="after")
    def _gws(self) -> StaticIPAM:
        for i, route in enumerate(self.routes):
            if route.gw is None and not any(
                a.gateway is not None and a.gateway.version == route.dst.version for a in self.addresses
            ):
                v = route.dst.version
                raise BrokenAt(("routes", i, "dst"), f"dst {route.dst} has no gw, and no IPv{v} address has a gateway")
        return self


class DHCPIPAM(Strict):
    """CNI dhcp: needs the dhcp daemon (`dhcp daemon`) running on the node."""

    type: Literal["dhcp"]


class NoIPAM(Strict):
    """No addresses: a pure L2 attachment."""

    type: Literal["none"]


IPAM = Annotated[
    HostLocalIPAM | ClusterIPAM | WhereaboutsIPAM | StaticIPAM | DHCPIPAM | NoIPAM, Field(discriminator="type")
]


class VXLAN(Strict):
    """A VXLAN tunnel the daemon creates on the host (named vx<vni>) over hostDevice; the container link's
    master becomes that tunnel."""

    vni: int = Field(ge=1, le=16777215)
    port: int = Field(default=4789, ge=1, le=65535)
    group: IPAddress | None = None
    remote: IPAddress | None = None

    _addrs = field_validator("group", "remote", mode="before")(parse_address)

    @model_validator(mode="after")
    def _one(self) -> VXLAN:
        if self.group is not None and self.remote is not None:
            raise BrokenAt("remote", "give group (multicast) or remote (unicast), not both", key=True)
        if self.group is not None and not self.group.is_multicast:
            raise BrokenAt("group", f"group {self.group} is not a multicast address (for unicast, give remote)")
        return self


class _SpecBase(Strict):
    interfacePrefix: IfPrefix | None = Field(
        default=None,
        description=f"Container interface names: <prefix><index>; at most {PREFIX_MAX} characters",
    )


class _LinkSpec(_SpecBase):
    hostDevice: IfName = Field(description="The host interface the container links hang off (the master)")
    vlan: int | None = Field(default=None, ge=1, le=4094, description="802.1Q id: master becomes <dev>.<vlan>")
    vxlan: VXLAN | None = None
    mtu: int | None = Field(default=None, ge=68, le=65535)
    ipam: IPAM | None = None

    @model_validator(mode="after")
    def _vids(self) -> Any:
        if self.vlan is not None and self.vxlan is not None:
            raise BrokenAt("vxlan", "vlan and vxlan are mutually exclusive", key=True)
        return self


class MacvlanSpec(_LinkSpec):
    type: Literal["macvlan"]
    mode: Literal["bridge", "private", "vepa", "passthru"] = "bridge"
    mac: Mac | None = Field(default=None, description="Fixed MAC (only sensible for one container)")


class IpvlanSpec(_LinkSpec):
    type: Literal["ipvlan"]
    mode: Literal["l2", "l3", "l3s"] = "l2"


class SriovSpec(_SpecBase):
    type: Literal["sriov"]
    resourceName: str | None = Field(
        default=None,
        pattern=RESOURCE_NAME,
        max_length=253,
        description="The VFs' resource: a device plugin's (the kubelet gives the pod its VF) or one of the node's "
        "sriovPools (the daemon picks a free VF at attach time)",
    )
    pciAddress: str | None = Field(default=None, pattern=PCI_ADDRESS, description="One fixed VF (deviceID)")
    vlan: int | None = Field(default=None, ge=0, le=4095)
    vlanQoS: int | None = Field(default=None, ge=0, le=7)
    spoofchk: bool | None = None
    trust: bool | None = None
    linkState: Literal["auto", "enable", "disable"] | None = None
    minTxRate: int | None = Field(default=None, ge=0, description="Mbps")
    maxTxRate: int | None = Field(default=None, ge=0, description="Mbps")
    mac: Mac | None = None
    mtu: int | None = Field(default=None, ge=68, le=65535)
    ipam: IPAM | None = None

    @model_validator(mode="after")
    def _device(self) -> SriovSpec:
        if self.resourceName is not None and self.pciAddress is not None:
            raise BrokenAt(
                "pciAddress", "give either resourceName (a VF pool) or pciAddress (one VF), not both", key=True
            )
        if self.resourceName is None and self.pciAddress is None:
            raise BrokenAt((), "give exactly one of resourceName (a VF pool) or pciAddress (one VF)")
        if self.vlanQoS is not None and not self.vlan:
            raise BrokenAt("vlanQoS", "vlanQoS needs a non-zero vlan", key=True)
        if self.minTxRate and self.maxTxRate and self.minTxRate > self.maxTxRate:
            raise BrokenAt("maxTxRate", f"maxTxRate {self.maxTxRate} is below minTxRate {self.minTxRate}")
        return self


class StaticSpec(_SpecBase):
    type: Literal["static"]
    networkID: str = Field(
        pattern=NETWORK_ID,
        max_length=255,
        description="Stem of a CNI file in the static dirs: <id>.conflist, .conf or .json",
    )
    resourceName: str | None = Field(
        default=None,
        pattern=RESOURCE_NAME,
        max_length=253,
        description="A device plugin's resource the network's plugins take a device of (host-device, sriov): the "
        "pod's device goes to the first plugin as deviceID and pciBusID, as Multus hands it over",
    )

    @field_validator("networkID")
    @classmethod
    def _no_dots(cls, v: str) -> str:
        if v in (".", ".."):
            raise ValueError("networkID cannot be '.' or '..'")
        return v


Spec = Annotated[MacvlanSpec | IpvlanSpec | SriovSpec | StaticSpec, Field(discriminator="type")]


class Metadata(Strict):
    name: Name
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    # What the API server adds to an object: accepted and ignored, so that an object read back from a cluster
    # (`kubectl get networks.netcomp.io NAME -o yaml`) validates as it is.
    uid: str | None = Field(default=None, description="Set by the API server; ignored")
    resourceVersion: str | None = Field(default=None, description="Set by the API server; ignored")
    generation: int | None = Field(default=None, description="Set by the API server; ignored")
    creationTimestamp: datetime | str | None = Field(default=None, description="Set by the API server; ignored")
    managedFields: list[Any] | None = Field(default=None, description="Set by the API server; ignored")


class Network(Strict):
    """A network intent: one network a container can join, compiled to one CNI conflist."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        json_schema_extra={
            "title": "netcomp Network intent",
            "$id": "https://netcomp.io/schemas/network.schema.json",
        },
    )

    apiVersion: Literal["netcomp.io/v1"]
    kind: Literal["Network"]
    metadata: Metadata
    spec: Spec

    @property
    def name(self) -> str:
        return self.metadata.name
