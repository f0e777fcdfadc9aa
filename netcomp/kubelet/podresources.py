"""Reads the devices the kubelet gave a pod, as Multus does (pkg/kubeletclient): the PodResources v1 API first
(`List`, matched on namespace and name), the device manager's checkpoint when that cannot answer (matched on the
pod's UID). grpc is imported on the first call, so a node with no device-plugin network never loads it."""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from netcomp import foreign
from netcomp.cni.spec import loads_foreign
from netcomp.errors import HostError
from netcomp.fsutil import read_bounded
from netcomp.kubelet.protomsg import messages
from netcomp.names import device_id_problem

# The field numbers are the wire format: k8s.io/kubelet/pkg/apis/podresources/v1/api.proto.
PODRESOURCES_V1 = {
    "ListPodResourcesRequest": [],
    "ListPodResourcesResponse": [("pod_resources", 1, "repeated PodResources")],
    "PodResources": [
        ("name", 1, "string"),
        ("namespace", 2, "string"),
        ("containers", 3, "repeated ContainerResources"),
    ],
    "ContainerResources": [("name", 1, "string"), ("devices", 2, "repeated ContainerDevices")],
    "ContainerDevices": [("resource_name", 1, "string"), ("device_ids", 2, "repeated string")],
}
LIST = "/v1.PodResourcesLister/List"
MAX_ANSWER = 16 << 20  # a List of every pod of a full node is far below this
MAX_CHECKPOINT = 16 << 20
# The device manager's own socket, made anew by each kubelet start in the checkpoint's dir (pkg/kubelet/cm/
# devicemanager: pluginapi.KubeletSocket, the checkpoint manager made on its dir).
DEVICE_MANAGER_SOCKET = "kubelet.sock"
NULL = type(None)


@dataclass(frozen=True)
class PodDevices:
    """The device IDs a pod's containers hold, per resource, sorted (so every ADD and restart hands them out
    alike); `bad`: per resource, what is wrong with an ID the kubelet gave (its devices are not handed out)."""

    devices: Mapping[str, tuple[str, ...]]
    source: str  # "PodResources" or "checkpoint"
    bad: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Checkpoint:
    """The device manager's checkpoint (pkg/kubelet/cm/devicemanager/checkpoint/checkpoint.go), its shape checked:
    (pod UID, resource, device IDs) entries, the resources registered, its mtime taken before it was read."""

    entries: tuple[tuple[str, str, tuple[str, ...]], ...]
    registered: frozenset[str]
    mtime_ns: int = 0


class NoCheckpoint(HostError):
    """There is no checkpoint file: a kubelet that never had a device plugin, or not this node's path."""


class NotKubelets(HostError):
    """The checkpoint file is not the kubelet's JSON: `why`, as parse_checkpoint says it."""

    def __init__(self, path: str, why: str, mtime_ns: int) -> None:
        super().__init__(f"the kubelet checkpoint {path} is not the kubelet's: {why}")
        self.why, self.mtime_ns = why, mtime_ns


class Kubelet:
    """`socket`: the PodResources socket; `checkpoint`: the device manager's checkpoint file; `timeout`: seconds
    one List may take."""

    def __init__(self, socket: str, checkpoint: str, timeout: float) -> None:
        self.socket = socket
        self.checkpoint = checkpoint
        self.timeout = timeout
        self._lock = threading.Lock()
        self._channel: Any = None
        self._list: Any = None
        self._msgs: dict[str, Any] = {}

    def pod_devices(self, namespace: str, name: str, uid: str) -> PodDevices:
        """What the kubelet gave pod namespace/name (uid: for the checkpoint, "" when unknown). HostError when
        neither record can say (the API down or hung, and no checkpoint that can answer for the pod)."""
        try:
            return self._from_api(namespace, name)
        except HostError as api_error:
            why = str(api_error)
        try:
            ckpt = self._checkpoint()
        except HostError as e:
            raise HostError(f"{why}; {e}") from None
        if not uid:
            raise HostError(f"{why}; the request names no pod UID (K8S_POD_UID) to look for in {self.checkpoint}")
        held = [(r, ids) for u, r, ids in ckpt.entries if u == uid]
        if not held and (stale := self._not_current(ckpt)):
            raise HostError(f"{why}; the checkpoint {self.checkpoint} does not know pod uid {uid}, and {stale}")
        return _collect(held, "checkpoint")

    def _not_current(self, ckpt: Checkpoint) -> str:
        """Why the checkpoint may not list every device the running kubelet gave ("" when it does). The kubelet
        writes it, whole, whenever it gives a pod devices, before it asks for the sandbox whose ADD this is
        (devicemanager's allocateContainerResources ends in writeCheckpoint). Not known to be current: a file with
        no device manager socket beside it (newManagerImpl keeps both in one dir), or one last written before that
        socket was made (by a kubelet before the running one, which may not have read it)."""
        sock = os.path.join(os.path.dirname(self.checkpoint), DEVICE_MANAGER_SOCKET)
        try:
            st = os.stat(sock)
        except OSError:
            return f"no kubelet device manager socket {sock} is beside it: it may not be the running kubelet's"
        if not stat.S_ISSOCK(st.st_mode):
            return f"{sock} beside it is not the kubelet's socket: it may not be the running kubelet's"
        if st.st_ctime_ns > ckpt.mtime_ns:
            return (
                f"it was last written before the kubelet made its device manager socket {sock}: it may not say "
                "what the kubelet running now gave"
            )
        return ""

    def _from_api(self, namespace: str, name: str) -> PodDevices:
        if not os.path.exists(self.socket):
            raise HostError(f"the kubelet's PodResources socket {self.socket} does not exist")
        call, msgs = self._connect()
        import grpc

        try:
            answer = call(msgs["ListPodResourcesRequest"](), timeout=self.timeout)
        except grpc.RpcError as e:
            code = e.code() if hasattr(e, "code") else None
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                why = f"did not answer in {self.timeout:g} s"
            else:
                why = f"{code.name if code else ''} {e.details() if hasattr(e, 'details') else e}".strip()
            raise HostError(f"the kubelet's PodResources API ({self.socket}): {why}") from None
        pods = [pod for pod in answer.pod_resources if pod.namespace == namespace and pod.name == name]
        if not pods:
            # Not admitted yet as far as this answer goes: the checkpoint is written at admission.
            raise HostError(f"the kubelet's PodResources API does not list pod {namespace}/{name}")
        held = [(d.resource_name, d.device_ids) for pod in pods for c in pod.containers for d in c.devices]
        return _collect(held, "PodResources")

    def _connect(self) -> tuple[Any, dict[str, Any]]:
        with self._lock:
            if self._list is None:
                # grpc's core logs to stderr at INFO (every connection's end): only its errors belong in the journal.
                os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
                import grpc

                self._msgs = messages("v1", PODRESOURCES_V1, "netcomp/podresources/v1.proto")
                self._channel = grpc.insecure_channel(
                    f"unix://{self.socket}", options=[("grpc.max_receive_message_length", MAX_ANSWER)]
                )
                self._list = self._channel.unary_unary(
                    LIST,
                    request_serializer=lambda m: m.SerializeToString(),
                    response_deserializer=self._msgs["ListPodResourcesResponse"].FromString,
                )
            return self._list, self._msgs

    def registered(self) -> set[str]:
        """The resources device plugins registered with the kubelet, as its checkpoint says (none when it cannot)."""
        try:
            return set(self._checkpoint().registered)
        except HostError:
            return set()

    def _checkpoint(self) -> Checkpoint:
        """read_checkpoint, for the daemon: a file that is not the kubelet's is also ignored as foreign input."""
        try:
            return self.read_checkpoint()
        except NotKubelets as e:
            foreign.ignore("checkpoint", self.checkpoint, e.why, version=str(e.mtime_ns))
            raise

    def read_checkpoint(self) -> Checkpoint:
        """The checkpoint, its shape checked. HostError when it is missing (NoCheckpoint), unreadable, or not
        the kubelet's JSON (NotKubelets: a wrong shape, nesting too deep)."""
        try:
            mtime_ns = os.stat(self.checkpoint).st_mtime_ns  # before the read: what is read is at least as new
            data = read_bounded(self.checkpoint, MAX_CHECKPOINT)
        except FileNotFoundError:
            raise NoCheckpoint(f"no kubelet checkpoint {self.checkpoint}") from None
        except OSError as e:
            raise HostError(f"cannot read the kubelet checkpoint {self.checkpoint}: {e.strerror}") from None
        try:
            entries, registered = parse_checkpoint(data)
        except ValueError as e:
            raise NotKubelets(self.checkpoint, str(e), mtime_ns) from None
        return Checkpoint(entries, registered, mtime_ns)

    def close(self) -> None:
        with self._lock:
            if self._channel is not None:
                self._channel.close()
            self._channel = self._list = None


def _collect(held: Iterable[tuple[str, Sequence[str]]], source: str) -> PodDevices:
    """(resource, IDs) pairs of a pod's containers as PodDevices: merged per resource, sorted; a resource with
    an ID that is not a device ID (a path, a newline, an over-long string) is marked bad."""
    by: dict[str, set[str]] = {}
    bad: dict[str, str] = {}
    for resource, ids in held:
        by.setdefault(resource, set()).update(ids)
        for dev in ids:
            if resource not in bad and (why := device_id_problem(dev)):
                bad[resource] = why
    return PodDevices({r: tuple(sorted(ids)) for r, ids in by.items()}, source, bad)


def parse_checkpoint(data: bytes) -> tuple[tuple[tuple[str, str, tuple[str, ...]], ...], frozenset[str]]:
    """A checkpoint's bytes as (entries, registered resources): see Checkpoint. ValueError, naming the place,
    for anything that is not its JSON: nesting too deep, a wrong type where a field is read."""
    doc = _checked(loads_foreign(data), dict, "the document", "an object")
    body = _checked(doc.get("Data"), dict, "Data", "an object")
    raw = _checked(body.get("PodDeviceEntries"), (list, NULL), "Data.PodDeviceEntries", "a list")
    entries = tuple(_entry(e, f"Data.PodDeviceEntries[{i}]") for i, e in enumerate(raw or []))
    reg = _checked(body.get("RegisteredDevices"), (dict, NULL), "Data.RegisteredDevices", "an object")
    return entries, frozenset(reg or {})


def _entry(e: Any, where: str) -> tuple[str, str, tuple[str, ...]]:
    _checked(e, dict, where, "an object")
    for key in ("PodUID", "ResourceName"):
        _checked(e.get(key), str, f"{where}.{key}", "a string")
    return e["PodUID"], e["ResourceName"], _ids(e.get("DeviceIDs"), f"{where}.DeviceIDs")


def _ids(value: Any, where: str) -> tuple[str, ...]:
    """An entry's DeviceIDs: a list before kubelet 1.20, a map of NUMA node to list since (null: none)."""
    _checked(value, (dict, list, NULL), where, "a list or an object")
    lists = value.items() if isinstance(value, dict) else [("", value)]
    out: list[str] = []
    for numa, ids in lists:
        at = f"{where}[{numa!r}]" if numa else where
        for i, dev in enumerate(_checked(ids, (list, NULL), at, "a list") or []):
            _checked(dev, str, f"{at}[{i}]", "a string")
        out += ids or []
    return tuple(out)


def _checked(value: Any, types: type | tuple[type, ...], where: str, what: str) -> Any:
    """The value, when it is one of `types`; else ValueError naming where it is and its kind, never what it holds."""
    if not isinstance(value, types):
        names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", NULL: "null"}
        raise ValueError(f"{where} is {names.get(type(value), 'a number')}, not {what}")
    return value
