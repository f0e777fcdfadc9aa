"""Pods on the test node (kubenode.py), as a user makes them: objects bound to the node by `spec.nodeName` (no
scheduler runs), busybox waiting for SIGTERM, posted to the API server; Running when the kubelet says so; their
network as netcomp reports it (network-status) and as the pod's network namespace has it (the sandbox's pause
process, found through containerd's CRI); deleted as kubectl deletes: stopped (their CNI DEL done) within
seconds, gone from the API server, containerd and the kubelet when the kubelet's status sync and container GC
come to them (up to a minute later)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from tests.lab.kubenode import KubeNode
from tests.lab.labpods import STATUS
from tests.lab.nodeimages import BUSYBOX_IMAGE
from tests.lab.poll import until

NAMESPACE = "default"
GONE_SECONDS = 120  # the kubelet removes a deleted pod's containers and sandbox by its container GC, once a minute
# Exits at SIGTERM, so a delete takes no grace period to its end (sleep as PID 1 would ignore SIGTERM).
COMMAND = ["/bin/sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"]


def manifest(
    node: KubeNode,
    name: str,
    *,
    annotations: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never", "command": COMMAND}
    if limits:
        container["resources"] = {"limits": limits}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}, "labels": labels or {}},
        "spec": {
            "nodeName": node.name,
            "containers": [container],
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
        },
    }


def core(node: KubeNode) -> Any:
    from kubernetes import client

    return client.CoreV1Api(node.admin)


def create(node: KubeNode, *manifests: dict[str, Any]) -> None:
    api = core(node)
    for m in manifests:
        api.create_namespaced_pod(NAMESPACE, m)


def wait_running(node: KubeNode, names: Iterable[str], timeout: float = 120) -> dict[str, Any]:
    """The pods (V1Pod), once each is Running, with the time.perf_counter() at which this process saw it: name ->
    (pod, when). A pod that fails, or does not run in time, fails with what the node logged."""
    from kubernetes import watch

    pending, got = set(names), {}
    w = watch.Watch()
    for event in w.stream(core(node).list_namespaced_pod, NAMESPACE, timeout_seconds=int(timeout)):
        pod = event["object"]
        name = pod.metadata.name
        if name not in pending:
            continue
        if pod.status.phase == "Running":
            got[name] = (pod, time.perf_counter())
            pending.discard(name)
        elif pod.status.phase == "Failed":
            w.stop()
            raise AssertionError(f"pod {name} failed: {pod.status}\n{node.logs()}")
        if not pending:
            w.stop()
    if pending:
        raise AssertionError(f"not Running within {timeout}s: {sorted(pending)}\n{_events(node)}\n{node.logs()}")
    return got


def running(node: KubeNode, *manifests: dict[str, Any]) -> dict[str, Any]:
    """The pods posted, then each V1Pod once Running."""
    create(node, *manifests)
    return {n: p for n, (p, _) in wait_running(node, [m["metadata"]["name"] for m in manifests]).items()}


@contextlib.contextmanager
def posted(node: KubeNode, *manifests: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The pods posted and Running (name -> V1Pod); on the way out, whatever happened, deleted (delete())."""
    from kubernetes import client

    try:
        yield running(node, *manifests)
    finally:
        pods = []
        for m in manifests:
            with contextlib.suppress(client.ApiException):
                pods.append(core(node).read_namespaced_pod(m["metadata"]["name"], NAMESPACE))
        delete(node, pods)


def delete(node: KubeNode, pods: Iterable[Any]) -> None:
    """Delete as kubectl does (the pod's grace period); returns once the kubelet has stopped every sandbox of
    them and containerd has removed its network namespace, which it does after the CNI DEL succeeded
    (pkg/cri/server/sandbox_stop.go: teardownPodNetwork, then NetNS.Remove). The API object and the stopped
    sandbox go later, when the kubelet's status sync and container GC come to them (gone() waits for that)."""
    pods = list(pods)
    netns = {p.metadata.name: [s.netns for s in node.cri.sandboxes(p.metadata.uid)] for p in pods}
    api = core(node)
    for p in pods:
        api.delete_namespaced_pod(p.metadata.name, NAMESPACE)
    _until(node, lambda: [f"the netns of {n}" for n, paths in netns.items() if any(Path(x).exists() for x in paths)])


def gone(node: KubeNode, pods: Iterable[Any]) -> None:
    """Until the API server, containerd's CRI and the kubelet's pod dirs have nothing of the (deleted) pods: the
    kubelet removes a pod's object once its containers are removed, and its sandbox by its container GC (once a
    minute)."""
    pods = list(pods)
    _until(node, lambda: _left(node, pods))


def _until(node: KubeNode, left: Any) -> None:
    """The kubelet and containerd finishing a delete: until `left()` names nothing."""
    until(lambda: not left(), lambda: f"after {GONE_SECONDS}s still there: {left()}\n{node.logs()}", GONE_SECONDS, 0.2)


def _ready(node: KubeNode, pod: Any) -> bool:
    return any(s.ready for s in node.cri.sandboxes(pod.metadata.uid))


def _left(node: KubeNode, pods: list[Any]) -> list[str]:
    from kubernetes import client

    api = core(node)
    out = []
    for p in pods:
        name, uid = p.metadata.name, p.metadata.uid
        try:
            if api.read_namespaced_pod(name, NAMESPACE).metadata.uid == uid:
                out.append(f"pod {name} in the API")
        except client.ApiException as e:
            if e.status != 404:
                raise
        if node.cri.sandbox_ids(**{"io.kubernetes.pod.uid": uid}):
            out.append(f"the sandbox of {name} in containerd")
        if (node.kubelet_root / "pods" / uid).exists():
            out.append(f"the kubelet's dir of {name}")
    return out


def _events(node: KubeNode) -> str:
    items = core(node).list_namespaced_event(NAMESPACE).items
    return "\n".join(f"{e.involved_object.name}: {e.reason}: {e.message}" for e in items[-20:])


def network_status(pod: Any) -> list[dict[str, Any]]:
    """What netcomp wrote on the pod; [] when nothing did."""
    raw = (pod.metadata.annotations or {}).get(STATUS)
    return json.loads(raw) if raw else []


def with_status(node: KubeNode, pod: Any, timeout: float = 30) -> Any:
    """The pod again, once it carries network-status (written after the ADD's answer, so it may follow Running
    by a moment)."""

    def read() -> Any:
        got = core(node).read_namespaced_pod(pod.metadata.name, NAMESPACE)
        return got if network_status(got) else None

    return until(read, f"no network-status on pod {pod.metadata.name} within {timeout}s", timeout)


def interfaces(node: KubeNode, pod: Any) -> dict[str, dict[str, Any]]:
    """The pod's interfaces as its network namespace has them (the pause process's, found through the CRI):
    name -> {"mac": ..., "ips": [address, ...]} (loopback left out)."""
    (sandbox,) = [s for s in node.cri.sandboxes(pod.metadata.uid) if s.ready]
    out = subprocess.run(
        ["nsenter", "-t", str(sandbox.pid), "-n", "ip", "-j", "addr", "show"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    return {
        link["ifname"]: {
            "mac": link.get("address"),
            "ips": [a["local"] for a in link.get("addr_info", []) if a.get("scope") == "global"],
        }
        for link in json.loads(out)
        if link["ifname"] != "lo"
    }
