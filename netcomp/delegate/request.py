"""What a runtime sends: the CNI verb, the container, its netns and interface, CNI_ARGS and the network config,
validated as the CNI spec's "Parameters" section says, with the CNI error code of each way it can be wrong."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from netcomp.cni.invoke import E_INVALID_ENV
from netcomp.cni.spec import SUPPORTED_VERSIONS
from netcomp.delegate import select
from netcomp.errors import DelegateError

VERBS = ("ADD", "DEL", "CHECK", "GC", "STATUS", "VERSION")
E_UNKNOWN_CONTAINER, E_IO, E_DECODE, E_NOT_AVAILABLE = 3, 5, 6, 50
# CNI spec: "Must start with an alphanumeric character, optionally followed by any combination of one or more
# alphanumeric characters, underscore, dot or hyphen."
CONTAINER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
MAX_ID = 1024


@dataclass(frozen=True, slots=True)
class Request:
    command: str
    container_id: str
    netns: str
    ifname: str
    args: str
    config: dict[str, Any]

    @property
    def cni_version(self) -> str:
        v = self.config.get("cniVersion", "1.0.0")
        return v if isinstance(v, str) else "1.0.0"


def parse_request(env: Mapping[str, str], config: Any) -> Request:
    """Validate what the runtime sent (CNI spec, "Parameters"); raise a DelegateError with the right code."""
    if not isinstance(config, dict):
        raise DelegateError(E_DECODE, "network configuration is not a JSON object")
    command = env.get("CNI_COMMAND", "")
    if command not in VERBS:
        raise DelegateError(E_INVALID_ENV, f"unknown CNI_COMMAND {command!r}", f"expected one of {', '.join(VERBS)}")
    version = config.get("cniVersion", "1.0.0")
    if version not in SUPPORTED_VERSIONS:
        raise DelegateError(
            1, f"incompatible CNI versions: config is {version!r}", f"supported: {', '.join(SUPPORTED_VERSIONS)}"
        )
    cid = env.get("CNI_CONTAINERID", "")
    netns = env.get("CNI_NETNS", "")
    ifname = env.get("CNI_IFNAME", "")
    if command in ("ADD", "DEL", "CHECK"):
        if not cid or len(cid) > MAX_ID or not CONTAINER_ID.match(cid):
            raise DelegateError(E_INVALID_ENV, f"invalid CNI_CONTAINERID {cid[:80]!r}")
        select.check_ifname(ifname)
        if command != "DEL" and not netns:
            raise DelegateError(E_INVALID_ENV, "CNI_NETNS is required")
    return Request(command, cid, netns, ifname, env.get("CNI_ARGS", ""), config)
