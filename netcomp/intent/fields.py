"""What the intent models (model.py) are built of: the patterns a value must match (validation.py words each),
the field types made of them, strict parsing of CIDRs and addresses, `Strict` (the base of every model: an unknown
key is an error), and `BrokenAt` (docs/development.md, "Where an error points")."""

from __future__ import annotations

import ipaddress
from typing import Annotated, Any, TypeAlias

from pydantic import BaseModel, ConfigDict, StringConstraints, ValidationInfo

from netcomp import names
from netcomp.names import IFNAMSIZ

IPAddress: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network
IPInterface: TypeAlias = ipaddress.IPv4Interface | ipaddress.IPv6Interface

PREFIX_MAX = IFNAMSIZ - 2  # room for two index digits: prefix0 .. prefix99

DNS1123_LABEL = f"^{names.DNS_LABEL}$"
IFNAME = f"^{names.INTENT_IFNAME}$"
NETWORK_ID = r"^[-A-Za-z0-9_.]+$"  # a file-name stem: no '/', never '..' alone
PCI_ADDRESS = f"^{names.PCI_ADDRESS}$"
MAC = r"^([0-9a-fA-F]{2}:){5}[0-9a-fA-F]{2}$"
# A device resource: a Kubernetes extended resource name (vendor-domain/name), as device plugins register them.
RESOURCE_NAME = r"^[A-Za-z0-9_.\-]+(/[A-Za-z0-9_.\-]+)?$"

Name = Annotated[str, StringConstraints(pattern=DNS1123_LABEL, max_length=63)]
IfName = Annotated[str, StringConstraints(pattern=IFNAME, max_length=IFNAMSIZ)]
IfPrefix = Annotated[str, StringConstraints(pattern=IFNAME, min_length=1, max_length=PREFIX_MAX)]
Mac = Annotated[str, StringConstraints(pattern=MAC)]


class BrokenAt(ValueError):
    """A rule broken at `at`: a path under the place of the validator that raises it (a model validator's model,
    a field validator's field), `()` for that place itself (a key that is missing). `key`: point at the key (the
    key's presence is wrong: two that exclude each other) rather than at its value (the value is wrong). pydantic
    keeps the exception in its error's context, where validation.py finds it; anywhere else it is a ValueError."""

    def __init__(self, at: str | tuple[str | int, ...], message: str, *, key: bool = False) -> None:
        super().__init__(message)
        self.at: tuple[str | int, ...] = (at,) if isinstance(at, str) else at
        self.key = key


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=False)


def parse_cidr(value: Any) -> Any:
    """Parse a CIDR strictly: host bits set is a typo more often than not, so it is an error."""
    if isinstance(value, str):
        try:
            return ipaddress.ip_network(value, strict=True)
        except ValueError as e:
            if "has host bits set" in str(e):
                fixed = ipaddress.ip_network(value, strict=False)
                raise ValueError(f"{value} has host bits set; the network is {fixed}") from None
            raise ValueError(f"{value!r} is not a valid CIDR (like 10.0.0.0/24 or 2001:db8::/64)") from None
    return value


def parse_cidrs(value: Any) -> Any:
    return [parse_cidr(x) for x in value] if isinstance(value, list) else value


def check_in_subnet(cls: Any, value: Any, info: ValidationInfo) -> Any:
    """rangeStart/rangeEnd/gateway inside `subnet`, and the range not reversed (subnet is declared first)."""
    net = info.data.get("subnet")
    name = info.field_name
    if value is None or net is None:
        return value
    if value.version != net.version or value not in net:
        raise ValueError(f"{name} {value} is outside subnet {net}")
    start = info.data.get("rangeStart")
    if name == "rangeEnd" and start is not None and start > value:
        raise ValueError(f"rangeEnd {value} is before rangeStart {start}")
    return value


def parse_address(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return ipaddress.ip_address(value)
        except ValueError:
            raise ValueError(f"{value!r} is not a valid IP address") from None
    return value
