"""What a runtime sends, parsed once: the CNI verb, the container, its netns and interface, the network config,
and what it asks for (the networks in CNI_ARGS and the runtime's args, the pod kubelet names), validated as the
CNI spec's "Parameters" section says, with the CNI error code of each way it can be wrong. The log line, the
planner and the pod lookup all use this one object."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from netcomp.cni.codes import E_DECODE, E_INCOMPATIBLE, E_INVALID_ENV
from netcomp.cni.spec import DEFAULT_VERSION, SUPPORTED_VERSIONS
from netcomp.errors import DelegateError
from netcomp.host.nsenter import check_path
from netcomp.names import is_cni_name
from netcomp.pods import naming

VERBS = ("ADD", "DEL", "CHECK", "GC", "STATUS", "VERSION")
MAX_ID = 1024


def check_container_id(cid: str, what: str = "container id") -> str:
    if len(cid) > MAX_ID or not is_cni_name(cid):  # the CNI spec's rule for a container ID
        raise DelegateError(E_INVALID_ENV, f"invalid {what} {cid[:80]!r}")
    return cid


@dataclass(frozen=True, slots=True)
class Request:
    command: str
    container_id: str
    netns: str
    ifname: str
    args: str  # CNI_ARGS as the runtime gave them
    config: dict[str, Any]
    wants: tuple[naming.Want, ...] = ()  # networks asked for in CNI_ARGS and the runtime's args (ADD)
    rest_args: str = ""  # CNI_ARGS for the delegates: ours taken out (host-local refuses unknown keys)
    pod: naming.PodRef | None = None  # kubelet's K8S_POD_NAMESPACE / K8S_POD_NAME
    digest: str = ""  # of everything an ADD asks: a repeated ADD is answered from the record

    @property
    def cni_version(self) -> str:
        v = self.config.get("cniVersion", DEFAULT_VERSION)
        return v if isinstance(v, str) else DEFAULT_VERSION


def parse_request(env: Mapping[str, str], config: Any, raw: bytes = b"") -> Request:
    """Validate what the runtime sent (CNI spec, "Parameters"); raise a DelegateError with the right code.
    `raw`: the config's bytes as sent, for the digest of an ADD."""
    if not isinstance(config, dict):
        raise DelegateError(E_DECODE, "network configuration is not a JSON object")
    command = env.get("CNI_COMMAND", "")
    if command not in VERBS:
        raise DelegateError(
            E_INVALID_ENV, f"unknown CNI_COMMAND {command[:40]!r}", f"expected one of {', '.join(VERBS)}"
        )
    version = config.get("cniVersion", DEFAULT_VERSION)
    if version not in SUPPORTED_VERSIONS:
        raise DelegateError(
            E_INCOMPATIBLE,
            f"incompatible CNI versions: config is {version!r:.40}",
            f"supported: {', '.join(SUPPORTED_VERSIONS)}",
        )
    cid = env.get("CNI_CONTAINERID", "")
    netns = env.get("CNI_NETNS", "")
    ifname = env.get("CNI_IFNAME", "")
    args = env.get("CNI_ARGS", "")
    if command not in ("ADD", "DEL", "CHECK"):
        return Request(command, cid, netns, ifname, args, config)
    check_container_id(cid, "CNI_CONTAINERID")
    naming.check_ifname(ifname)
    if netns:
        check_path(netns)
    elif command != "DEL":
        raise DelegateError(E_INVALID_ENV, "CNI_NETNS is required")
    pod = naming.pod_ref(args)
    if command != "ADD":
        # DEL and CHECK act on what ADD recorded: what they ask for is not parsed (a DEL must never fail on
        # CNI_ARGS that made its ADD fail).
        return Request(command, cid, netns, ifname, args, config, pod=pod)
    wants, rest = naming.split_cni_args(args)
    wants += naming.from_runtime_args(config)
    h = hashlib.sha256()
    for part in (netns, ifname, args):
        h.update(part.encode("utf-8", "surrogateescape") + b"\0")
    h.update(raw)
    return Request(command, cid, netns, ifname, args, config, tuple(wants), rest, pod, h.hexdigest())
