"""The devices the kubelet gave a pod, as its device manager recorded them: the PodResources v1 API first
(k8s.io/kubelet/pkg/apis/podresources/v1, `List`, matched on the pod's namespace and name), the device
manager's checkpoint file when that API cannot answer (matched on the pod's UID), as Multus reads them
(pkg/kubeletclient). grpc is imported on the first call: a node whose networks name no device-plugin resource
never loads it."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from netcomp.errors import HostError
from netcomp.fsutil import read_bounded
from netcomp.host.protomsg import messages

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


@dataclass(frozen=True)
class PodDevices:
    """The device IDs a pod's containers hold, per resource, sorted (the kubelet keeps them as a set: sorted,
    every ADD and every restart hands them out alike); `source` says which record they came from."""

    devices: Mapping[str, tuple[str, ...]]
    source: str  # "PodResources" or "checkpoint"
    found: bool = True  # whether that record knows the pod at all


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
        neither record can say (the API down or hung, and no checkpoint that knows the pod)."""
        try:
            return self._from_api(namespace, name)
        except HostError as api_error:
            why = str(api_error)
        try:
            got = self._from_checkpoint(uid)
        except HostError as e:
            raise HostError(f"{why}; {e}") from None
        if not got.found:
            raise HostError(f"{why}; the checkpoint {self.checkpoint} does not know pod uid {uid or '?'}")
        return got

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
        by: dict[str, list[str]] = {}
        found = False
        for pod in answer.pod_resources:
            if pod.namespace != namespace or pod.name != name:
                continue
            found = True
            for c in pod.containers:
                for d in c.devices:
                    by.setdefault(d.resource_name, []).extend(d.device_ids)
        if not found:
            # Not admitted yet as far as this answer goes: the checkpoint is written at admission.
            raise HostError(f"the kubelet's PodResources API does not list pod {namespace}/{name}")
        return PodDevices({r: tuple(sorted(set(ids))) for r, ids in by.items()}, "PodResources")

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

    def _from_checkpoint(self, uid: str) -> PodDevices:
        doc = self._read_checkpoint()
        entries = (doc.get("Data") or {}).get("PodDeviceEntries") or []
        by: dict[str, list[str]] = {}
        found = False
        for e in entries if isinstance(entries, list) else []:
            if not isinstance(e, dict) or not uid or e.get("PodUID") != uid:
                continue
            found = True
            resource = e.get("ResourceName")
            if isinstance(resource, str):
                by.setdefault(resource, []).extend(_ids(e.get("DeviceIDs")))
        return PodDevices({r: tuple(sorted(set(ids))) for r, ids in by.items()}, "checkpoint", found)

    def registered(self) -> set[str]:
        """The resources device plugins registered with the kubelet, as its checkpoint says (empty when there is
        none: a node without device plugins)."""
        try:
            doc = self._read_checkpoint()
        except HostError:
            return set()
        reg = (doc.get("Data") or {}).get("RegisteredDevices")
        return {str(k) for k in reg} if isinstance(reg, dict) else set()

    def _read_checkpoint(self) -> dict[str, Any]:
        try:
            data = read_bounded(self.checkpoint, MAX_CHECKPOINT)
        except FileNotFoundError:
            raise HostError(f"no kubelet checkpoint {self.checkpoint}") from None
        except OSError as e:
            raise HostError(f"cannot read the kubelet checkpoint {self.checkpoint}: {e.strerror}") from None
        try:
            doc = json.loads(data)
        except ValueError as e:
            raise HostError(f"the kubelet checkpoint {self.checkpoint} is not JSON: {e}") from None
        if not isinstance(doc, dict):
            raise HostError(f"the kubelet checkpoint {self.checkpoint} is not a JSON object")
        return doc

    def close(self) -> None:
        with self._lock:
            if self._channel is not None:
                self._channel.close()
            self._channel = self._list = None


def _ids(value: Any) -> list[str]:
    """A checkpoint entry's DeviceIDs: a list before kubelet 1.20, a map of NUMA node to list since."""
    if isinstance(value, list):
        return [str(v) for v in value]
    if isinstance(value, dict):
        return [str(v) for ids in value.values() if isinstance(ids, list) for v in ids]
    return []
