"""The cluster side's work for each pod, with fakes of the API server: a pod's network-status written only when it
differs from what the pod has; an attachment's record read for EndpointSlices only once a Service may want it."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import orjson

from netcomp.cluster.podwatch import PodWatch
from netcomp.cluster.services import ServiceSlices
from netcomp.metrics import Metrics
from netcomp.pods.multus import NETWORK_STATUS
from netcomp.pods.naming import PodRef
from netcomp.records.files import Records
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


class Listing:
    """What the Services' and the slices' followers list (`services`), and the calls the reconciler makes."""

    def __init__(self) -> None:
        self.services: list[dict[str, Any]] = []

    def _list(self, items: list[dict[str, Any]]) -> Any:
        return type("R", (), {"data": orjson.dumps({"metadata": {"resourceVersion": "1"}, "items": items})})()

    def list_service_for_all_namespaces(self, **_: Any) -> Any:
        return self._list(self.services)

    def list_cluster_custom_object(self, *_: Any, **__: Any) -> Any:
        return self._list([])

    def get_api_resources(self, *_: Any, **__: Any) -> None:
        return None


class Counted(Records):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.loads = self.scans = 0

    def load(self, container_id: str, ifname: str) -> Any:
        self.loads += 1
        return super().load(container_id, ifname)

    def scan(self) -> Any:
        self.scans += 1
        return super().scan()


def test_a_record_is_read_for_endpointslices_only_once_a_service_may_want_it(tmp_path: Path) -> None:
    api, cache, stop = Listing(), Counted(tmp_path), threading.Event()
    kube, metrics = KubeSettings(), Metrics()
    ss = ServiceSlices(api, api, kube, "n1", metrics, PodWatch(api, kube, "n1", metrics, str), cache)
    ss.follows["slices"]._relist()
    ss.follows["Services"]._relist()
    ss._pods_seen("LISTED", [])
    threading.Thread(target=ss._loop, args=(stop,), daemon=True).start()
    try:
        assert ss.wait_written(10) and cache.scans == 1  # every record, once at the start
        for changed in cache.listeners:  # an ADD's record written, then its DEL's removed
            changed("c1", "eth0")
            changed("c1", "eth0")
        assert ss.wait_written(10)
        assert (cache.loads, cache.scans) == (0, 1)  # no Service: no slice can hold it
        api.services = [{"metadata": {"namespace": "vnf", "name": "lb", "uid": "s1", "annotations": {
            "netcomp.io/network": "ext", "netcomp.io/selector": "app=lb"}}, "spec": {"clusterIP": "None"}}]  # fmt: skip
        ss.follows["Services"]._relist()
        assert ss.wait_written(10)
        assert cache.scans == 2  # what changed meanwhile is read now: every record again
        for changed in cache.listeners:
            changed("c2", "eth0")
        assert ss.wait_written(10) and (cache.loads, cache.scans) == (1, 2)  # and from now on each as it changes
    finally:
        stop.set()


def test_a_request_goes_out_in_one_write_without_nagles_delay() -> None:
    """Headers and body in one write (one TLS record, one segment), on a socket with TCP_NODELAY."""
    import socket

    from netcomp.kube.apiclient import _Connection

    class Recorded:
        def __init__(self, sock: socket.socket) -> None:
            self.sock, self.sent = sock, list[bytes]()

        def sendall(self, data: bytes) -> None:
            self.sent.append(bytes(data))
            self.sock.sendall(data)

        def close(self) -> None:
            self.sock.close()

    with socket.create_server(("127.0.0.1", 0)) as server:
        conn = _Connection("127.0.0.1", server.getsockname()[1], timeout=5)
        conn.connect()
        try:
            assert conn.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            rec = conn.sock = Recorded(conn.sock)
            conn.request("PATCH", "/x", b'{"a": 1}', {"Content-Type": "application/json"})
        finally:
            conn.close()
    assert len(rec.sent) == 1 and rec.sent[0].startswith(b"PATCH /x ") and rec.sent[0].endswith(b'\r\n\r\n{"a": 1}')
