"""A stand-in for the kubelet's PodResources v1 API on a unix socket, for tests that need answers the real kubelet
cannot be made to give on demand (a pod with chosen devices, an API that never answers). It is not the kubelet:
the real one answers in tests/integration/test_kubelet_node.py. Its field numbers are checked against the
upstream proto by tests/unit/test_devices.py's wire test, not by this server agreeing with the client."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")  # before grpc is loaded: its core's INFO lines are noise here
import grpc

from netcomp.kubelet.podresources import PODRESOURCES_V1
from netcomp.kubelet.protomsg import messages

MSGS = messages("v1", PODRESOURCES_V1, "tests/podresources/v1.proto")

# (namespace, name) -> {container: [(resource, [device ids]), ...]}
Pods = Mapping[tuple[str, str], Mapping[str, Sequence[tuple[str, Sequence[str]]]]]


@dataclass
class PodResourcesServer:
    pods: dict[tuple[str, str], dict[str, list[tuple[str, list[str]]]]] = field(default_factory=dict)
    hang: bool = False  # List never answers (until released)
    calls: int = 0
    _release: threading.Event = field(default_factory=threading.Event)

    def list(self, request: Any, context: Any) -> Any:
        self.calls += 1
        if self.hang:
            self._release.wait(30)
        out = MSGS["ListPodResourcesResponse"]()
        for (ns, name), containers in self.pods.items():
            pod = out.pod_resources.add(name=name, namespace=ns)
            for cname, devices in containers.items():
                c = pod.containers.add(name=cname)
                for resource, ids in devices:
                    c.devices.add(resource_name=resource, device_ids=list(ids))
        return out


@contextmanager
def podresources(path: str, state: PodResourcesServer | None = None) -> Iterator[PodResourcesServer]:
    """Serve the PodResources API on unix socket `path` while the block runs."""
    state = state or PodResourcesServer()
    server = grpc.server(ThreadPoolExecutor(4))
    handler = grpc.method_handlers_generic_handler(
        "v1.PodResourcesLister",
        {
            "List": grpc.unary_unary_rpc_method_handler(
                state.list,
                request_deserializer=MSGS["ListPodResourcesRequest"].FromString,
                response_serializer=lambda m: m.SerializeToString(),
            )
        },
    )
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"unix:{path}")
    server.start()
    try:
        yield state
    finally:
        state._release.set()
        server.stop(None)
