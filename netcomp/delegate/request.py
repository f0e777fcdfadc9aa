"""This module decodes and parses every request the daemon's CNI endpoints take, once, from the bytes on the
wire: a runtime's (`/cni`: the wire format of Multus's thick plugin, env and base64 config, checked as the CNI
spec's "Parameters" section says), a hot-plug (`/delegate`) and an explanation's subject (`/explain`). Each way a
request can be wrong raises a DelegateError with its CNI error code. The log line, the planner and the pod
lookup all use the one object it returns; nothing downstream reads the body again."""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from netcomp.cni.codes import E_DECODE, E_INCOMPATIBLE, E_INVALID_CONFIG, E_INVALID_ENV
from netcomp.cni.spec import DEFAULT_VERSION, SUPPORTED_VERSIONS, loads, parse_version
from netcomp.errors import DelegateError, printable
from netcomp.host.nsenter import check_path
from netcomp.names import is_cni_name
from netcomp.pods import naming

VERBS = ("ADD", "DEL", "CHECK", "GC", "STATUS", "VERSION")
# The verbs a spec version added: a config older than that is refused with code 1, as libcni's skel does.
SINCE = {"CHECK": "0.4.0", "GC": "1.1.0", "STATUS": "1.1.0"}
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
    def network(self) -> str:
        """The runtime's network, the config's `name` ("" when it has none)."""
        name = self.config.get("name")
        return name if isinstance(name, str) else ""

    @property
    def cni_version(self) -> str:
        v = self.config.get("cniVersion", DEFAULT_VERSION)
        return v if isinstance(v, str) else DEFAULT_VERSION


@dataclass(frozen=True, slots=True)
class Reply:
    """What a request did: its CNI result ({} for the verbs that have none) and the networks it was about (those
    an ADD attached, those a DEL's or CHECK's record named), for its log line."""

    result: dict[str, Any]
    networks: tuple[str, ...] = ()


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
    since = SINCE.get(command)
    if since is not None and parse_version(version) < parse_version(since):
        raise DelegateError(
            E_INCOMPATIBLE, f"config version {version} does not allow {command}", f"{command} is CNI {since}"
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


def _json(data: bytes, what: str = "request") -> Any:
    try:
        return loads(data)
    except ValueError as e:
        raise DelegateError(E_DECODE, f"{what} is not JSON: {e}") from None


def decode(body: bytes) -> tuple[dict[str, str], Any, bytes]:
    """The env, the parsed network config and the config's bytes as sent, of a `/cni` request:
    `{"env": {...}, "config": "<base64 of the runtime's stdin>"}` (Go marshals Multus's `Config []byte` as
    base64)."""
    doc = _json(body)
    if not isinstance(doc, dict) or not isinstance(doc.get("env"), dict) or "config" not in doc:
        raise DelegateError(E_DECODE, 'request must be an object with "env" and "config"')
    env = doc["env"]
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise DelegateError(E_INVALID_ENV, "env values must be strings")
    raw = doc["config"]
    if not isinstance(raw, str):
        raise DelegateError(E_DECODE, "config must be a base64 string")
    try:
        data = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise DelegateError(E_DECODE, "config is not valid base64") from None
    return env, _json(data, "network configuration"), data


@dataclass(frozen=True, slots=True)
class Hotplug:
    """A `/delegate` request: `{"command": "ADD"|"DEL", "containerID", "netns", "network", "ifname"?,
    "runtimeIfname"?, "podNamespace"?, "podName"?, "podUID"?}` (what `netcomp attach|detach` sends; the pod for
    a network of a device plugin's resource)."""

    command: str
    container_id: str
    netns: str
    network: str
    ifname: str | None
    runtime_ifname: str
    pod: naming.PodRef | None = None

    def __str__(self) -> str:
        """The request in a log line: every value a peer chose escaped and cut short."""
        return f"{self.command} container={printable(self.container_id, 200)} network={printable(self.network, 200)}"


def parse_hotplug(body: bytes) -> Hotplug:
    doc = _json(body)
    if not isinstance(doc, dict):
        raise DelegateError(E_DECODE, "request must be a JSON object")
    command = doc.get("command", "ADD")
    if command not in ("ADD", "DEL"):
        raise DelegateError(E_INVALID_ENV, f"command must be ADD or DEL, not {str(command)[:40]!r}")
    values: dict[str, str | None] = {}
    for key, required in (("containerID", True), ("network", True), ("netns", False), ("ifname", False)):
        v = doc.get(key)
        if v is not None and not isinstance(v, str):
            raise DelegateError(E_INVALID_CONFIG, f"{key} must be a string")
        if required and not v:
            raise DelegateError(E_INVALID_CONFIG, "containerID and network are required")
        values[key] = v or None
    runtime_ifname = doc.get("runtimeIfname") or "eth0"
    if not isinstance(runtime_ifname, str):
        raise DelegateError(E_INVALID_CONFIG, "runtimeIfname must be a string")
    if command == "ADD" and not values["netns"]:
        raise DelegateError(E_INVALID_ENV, "netns is required to attach")
    ns, name, uid = (doc.get(k) or "" for k in ("podNamespace", "podName", "podUID"))
    if not all(isinstance(v, str) for v in (ns, name, uid)) or bool(ns) != bool(name):
        raise DelegateError(E_INVALID_CONFIG, "podNamespace and podName must be given together, as strings")
    pod = naming.PodRef(ns, name, uid) if ns else None
    cid, netns, network = values["containerID"] or "", values["netns"] or "", values["network"] or ""
    return Hotplug(command, cid, netns, network, values["ifname"], runtime_ifname, pod)


@dataclass(frozen=True, slots=True)
class Subject:
    """What to explain (`/explain`): a pod (namespace/name), a container by ID, or a runtime's CNI_ARGS (with
    the interface the runtime would give, CNI_IFNAME)."""

    pod: naming.PodRef | None = None
    container: str | None = None
    cni_args: str | None = None
    ifname: str = "eth0"


def parse_subject(body: bytes) -> Subject:
    """`{"pod": "namespace/name"}`, `{"container": ID}` or `{"cniArgs": "...", "ifname"?}` (what `netcomp
    explain` sends)."""
    doc = _json(body)
    keys = ("pod", "container", "cniArgs", "ifname")
    if not isinstance(doc, dict) or not all(isinstance(doc.get(k, ""), str) for k in keys):
        raise DelegateError(E_DECODE, "request must be a JSON object of strings")
    if len([k for k in ("pod", "container", "cniArgs") if k in doc]) != 1:
        raise DelegateError(E_INVALID_CONFIG, "give exactly one of pod, container and cniArgs")
    ns, _, name = str(doc.get("pod") or "").partition("/")
    if "pod" in doc and not (ns and name):
        raise DelegateError(E_INVALID_CONFIG, f"pod must be namespace/name, not {str(doc['pod'])[:80]!r}")
    pod = naming.PodRef(ns, name) if "pod" in doc else None
    return Subject(pod, doc.get("container"), doc.get("cniArgs"), doc.get("ifname") or "eth0")
