"""What the pod writer sends the API server: a pod's network-status only when it differs from what the pod has."""

from __future__ import annotations

import json
import threading
from typing import Any

from netcomp.cluster.podwatch import PodWatch
from netcomp.metrics import Metrics
from netcomp.pods.multus import NETWORK_STATUS
from netcomp.pods.naming import PodRef
from netcomp.settings import KubeSettings

STATUS = [{"name": "default/mgmt", "interface": "eth0", "ips": ["10.1.0.2"], "default": True}]


class Core:
    def __init__(self) -> None:
        self.patches: list[tuple[str, dict[str, Any]]] = []

    def patch_namespaced_pod(self, name: str, namespace: str, body: dict[str, Any], **_: Any) -> None:
        self.patches.append((name, body))


def pod(name: str, uid: str, status: str | None) -> dict[str, Any]:
    notes = {NETWORK_STATUS: status} if status is not None else {}
    return {"metadata": {"namespace": "ns", "name": name, "uid": uid, "annotations": notes}}


def test_a_status_the_pod_has_already_is_not_written_again() -> None:
    core, stop = Core(), threading.Event()
    watch = PodWatch(core, KubeSettings(podNetworks=False, events=False), "n1", Metrics(), str)
    has = json.dumps(STATUS, indent=2)
    watch.listed(
        [pod("same", "u1", has), pod("other", "u2", has.replace("10.1.0.2", "10.1.0.3")), pod("new", "u3", None)]
    )
    watch.start(stop)
    try:
        watch.report(PodRef("ns", "same", "u1"), STATUS)  # what it has: nothing to write
        watch.report(PodRef("ns", "other", "u2"), STATUS)  # another address
        watch.report(PodRef("ns", "new", ""), STATUS)  # none yet; its uid from the watch
        watch.report(PodRef("ns", "gone", ""), STATUS)  # not delivered by the watch (yet): written
        assert watch.flush(10)
        watch.seen("MODIFIED", pod("same", "u9", has))  # made again under its name: its own status is written
        watch.report(PodRef("ns", "same", "u1"), STATUS)
        assert watch.flush(10)
    finally:
        stop.set()
    assert sorted(name for name, _ in core.patches) == ["gone", "new", "other", "same"]
    meta = dict(core.patches)["new"]["metadata"]
    assert meta == {"annotations": {NETWORK_STATUS: has}, "uid": "u3"}
    assert dict(core.patches)["same"]["metadata"]["uid"] == "u1"  # the precondition keeps it off the new pod
