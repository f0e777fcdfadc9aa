"""The node's gRPC APIs the tests speak, from the test side: the CRI v1alpha2 RuntimeService of containerd (what
kubelet 1.20 speaks: a sandbox's state, pid and namespaces; stopping and removing one at teardown) and the
kubelet's PodResources v1 List. Messages are declared with netcomp.kubelet.protomsg from the upstream .proto files'
field numbers (k8s.io/cri-api/pkg/apis/runtime/v1alpha2/api.proto, k8s.io/kubelet/pkg/apis/podresources/v1/
api.proto); enums travel as int32 (the same varint on the wire). Only the messages and fields used here."""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from netcomp.kubelet import protomsg

SANDBOX_READY, SANDBOX_NOTREADY = 0, 1

_CRI = {
    "PodSandboxMetadata": [("name", 1, "string"), ("uid", 2, "string"), ("namespace", 3, "string")],
    "PodSandboxStateValue": [("state", 1, "int32")],
    "PodSandboxFilter": [
        ("id", 1, "string"),
        ("state", 2, "PodSandboxStateValue"),
        ("label_selector", 3, "map<string, string>"),
    ],
    "ListPodSandboxRequest": [("filter", 1, "PodSandboxFilter")],
    "PodSandbox": [
        ("id", 1, "string"),
        ("metadata", 2, "PodSandboxMetadata"),
        ("state", 3, "int32"),
        ("labels", 5, "map<string, string>"),
    ],
    "ListPodSandboxResponse": [("items", 1, "repeated PodSandbox")],
    "PodSandboxStatusRequest": [("pod_sandbox_id", 1, "string"), ("verbose", 2, "bool")],
    "PodSandboxNetworkStatus": [("ip", 1, "string")],
    "PodSandboxStatus": [
        ("id", 1, "string"),
        ("metadata", 2, "PodSandboxMetadata"),
        ("state", 3, "int32"),
        ("network", 5, "PodSandboxNetworkStatus"),
    ],
    "PodSandboxStatusResponse": [("status", 1, "PodSandboxStatus"), ("info", 2, "map<string, string>")],
    "StopPodSandboxRequest": [("pod_sandbox_id", 1, "string")],
    "StopPodSandboxResponse": [],
    "RemovePodSandboxRequest": [("pod_sandbox_id", 1, "string")],
    "RemovePodSandboxResponse": [],
    "StatusRequest": [("verbose", 1, "bool")],
    "StatusResponse": [("info", 2, "map<string, string>")],
}

_PODRESOURCES = {
    "ListPodResourcesRequest": [],
    "ContainerDevices": [("resource_name", 1, "string"), ("device_ids", 2, "repeated string")],
    "ContainerResources": [("name", 1, "string"), ("devices", 2, "repeated ContainerDevices")],
    "PodResources": [
        ("name", 1, "string"),
        ("namespace", 2, "string"),
        ("containers", 3, "repeated ContainerResources"),
    ],
    "ListPodResourcesResponse": [("pod_resources", 1, "repeated PodResources")],
}


@functools.cache
def _cri() -> dict[str, Any]:
    return protomsg.messages("runtime.v1alpha2", _CRI)


@functools.cache
def _podresources() -> dict[str, Any]:
    return protomsg.messages("v1", _PODRESOURCES)


def _call(channel: Any, service: str, method: str, request: Any, response: Any, timeout: float) -> Any:
    call = channel.unary_unary(
        f"/{service}/{method}",
        request_serializer=type(request).SerializeToString,
        response_deserializer=response.FromString,
    )
    return call(request, timeout=timeout)


@contextlib.contextmanager
def channel(socket: str) -> Iterator[Any]:
    import grpc

    ch = grpc.insecure_channel(f"unix://{socket}")
    try:
        yield ch
    finally:
        ch.close()


@dataclass(frozen=True)
class Sandbox:
    """A pod sandbox as containerd's CRI reports it."""

    id: str
    pod: str
    namespace: str
    uid: str
    ready: bool
    ip: str
    pid: int  # the pause process, 0 when stopped
    netns: str  # its network namespace's path in the node's mount namespace ("" when it has none)


class Cri:
    """containerd's CRI v1alpha2 RuntimeService on its socket."""

    SERVICE = "runtime.v1alpha2.RuntimeService"

    def __init__(self, socket: str, timeout: float = 30) -> None:
        self.socket = socket
        self.timeout = timeout

    def _rpc(self, method: str, request: Any, response: str) -> Any:
        m = _cri()
        with channel(self.socket) as ch:
            return _call(ch, self.SERVICE, method, request, m[response], self.timeout)

    def sandbox_ids(self, **labels: str) -> list[str]:
        m = _cri()
        req = m["ListPodSandboxRequest"](filter=m["PodSandboxFilter"](label_selector=labels))
        return [s.id for s in self._rpc("ListPodSandbox", req, "ListPodSandboxResponse").items]

    def sandboxes(self, pod_uid: str | None = None) -> list[Sandbox]:
        """Every sandbox (of one pod, by the uid label the kubelet gives each), with its pid and netns."""
        ids = self.sandbox_ids(**({"io.kubernetes.pod.uid": pod_uid} if pod_uid else {}))
        return [self.status(i) for i in ids]

    def status(self, sandbox_id: str) -> Sandbox:
        m = _cri()
        req = m["PodSandboxStatusRequest"](pod_sandbox_id=sandbox_id, verbose=True)
        resp = self._rpc("PodSandboxStatus", req, "PodSandboxStatusResponse")
        st = resp.status
        info = json.loads(resp.info.get("info", "{}"))
        netns = ""
        for ns in ((info.get("runtimeSpec") or {}).get("linux") or {}).get("namespaces") or []:
            if ns.get("type") == "network":
                netns = ns.get("path", "")
        return Sandbox(
            st.id,
            st.metadata.name,
            st.metadata.namespace,
            st.metadata.uid,
            st.state == SANDBOX_READY,
            st.network.ip,
            int(info.get("pid") or 0),
            netns,
        )

    def cni_network(self) -> str:
        """The name of the CNI network containerd gives pods now (its `cniconfig` status: the network on eth0,
        after its own loopback), "" while it has none."""
        m = _cri()
        info = self._rpc("Status", m["StatusRequest"](verbose=True), "StatusResponse").info
        conf = json.loads(info.get("cniconfig") or "{}")
        names = [n["Config"]["Name"] for n in conf.get("Networks") or [] if n.get("IFName") != "lo"]
        return names[0] if names else ""

    def remove(self, sandbox_id: str) -> None:
        """RemovePodSandbox: what the kubelet's container GC does to a stopped sandbox. The kubelet may remove a
        container of it meanwhile (containerd then answers NOT_FOUND for that container): tried again."""
        import grpc

        for attempt in range(3):
            try:
                self.stop_and_remove(sandbox_id, stop=False)
                return
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.NOT_FOUND or attempt == 2:
                    raise

    def stop_and_remove(self, sandbox_id: str, *, stop: bool = True) -> None:
        m = _cri()
        for verb in ("Stop", "Remove") if stop else ("Remove",):
            req = m[f"{verb}PodSandboxRequest"](pod_sandbox_id=sandbox_id)
            self._rpc(f"{verb}PodSandbox", req, f"{verb}PodSandboxResponse")


def pod_devices(socket: str, timeout: float = 10) -> dict[tuple[str, str], dict[str, dict[str, list[str]]]]:
    """The kubelet's PodResources v1 List: (namespace, pod) -> container -> resource -> device IDs (pods and
    containers without a device left out)."""
    m = _podresources()
    with channel(socket) as ch:
        resp = _call(
            ch, "v1.PodResourcesLister", "List", m["ListPodResourcesRequest"](), m["ListPodResourcesResponse"], timeout
        )
    out: dict[tuple[str, str], dict[str, dict[str, list[str]]]] = {}
    for pod in resp.pod_resources:
        for c in pod.containers:
            for d in c.devices:
                slot = out.setdefault((pod.namespace, pod.name), {}).setdefault(c.name, {})
                slot.setdefault(d.resource_name, []).extend(d.device_ids)
    return out
