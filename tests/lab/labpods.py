"""Pods a test makes in the API server and attaches itself, with a daemon lab (daemonlab.py) as their node: no
kubelet runs them, the test plays the runtime (the pod's CNI_ARGS, its sandbox's ADD and DEL through the lab's
shim). Also the annotations Multus defines on a pod, what netcomp wrote back on it (network-status, events), and
`netcomp explain` asking the lab's daemon about it."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterator
from typing import Any

import yaml

from netcomp.cli.main import main
from tests.lab.daemonlab import DaemonLab

NETWORKS = "k8s.v1.cni.cncf.io/networks"
DEFAULT = "v1.multus-cni.io/default-network"
STATUS = "k8s.v1.cni.cncf.io/network-status"


def pod_asking(name: str, networks: str) -> dict[str, Any]:
    """A pod object asking for networks (no kubelet runs it: the test attaches its "sandbox" itself)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": {NETWORKS: networks}},
        "spec": {"containers": [{"name": "c", "image": "registry.invalid/none"}]},
    }


@contextlib.contextmanager
def pod(
    admin: Any,
    node: DaemonLab | str,
    name: str,
    ns: str = "team-a",
    labels: dict[str, str] | None = None,
    ports: dict[str, int] | None = None,
    **annotations: str,
) -> Iterator[dict[str, Any]]:
    """A pod bound to the node (a daemon lab, or a node's name; no kubelet runs it: the test attaches its sandbox
    itself), deleted after; `ports`: its container's named TCP ports (name -> number)."""
    from kubernetes import client

    core = client.CoreV1Api(admin)
    container: dict[str, Any] = {"name": "c", "image": "registry.invalid/none"}
    if ports:
        container["ports"] = [{"name": k, "containerPort": v} for k, v in ports.items()]
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": dict(annotations), "labels": labels or {}},
        "spec": {"nodeName": node if isinstance(node, str) else node.settings.nodeName, "containers": [container]},
    }
    created = core.create_namespaced_pod(ns, body)
    try:
        yield {"ns": ns, "name": name, "uid": created.metadata.uid}
    finally:
        core.delete_namespaced_pod(name, ns, grace_period_seconds=0)


def annotated(value: Any, default: str | None = None) -> dict[str, str]:
    """The pod's annotations asking for `value` (Multus's list, as text or as JSON) and the `default` network."""
    out = {NETWORKS: value if isinstance(value, str) else json.dumps(value)}
    if default is not None:
        out[DEFAULT] = default
    return out


def cni_args(p: dict[str, Any], ctr: str) -> str:
    """What kubelet's runtimes pass (containerd and CRI-O both give the pod's uid)."""
    return (
        f"IgnoreUnknown=1;K8S_POD_NAMESPACE={p['ns']};K8S_POD_NAME={p['name']};K8S_POD_INFRA_CONTAINER_ID={ctr};"
        f"K8S_POD_UID={p['uid']}"
    )


def attach(dl: DaemonLab, p: dict[str, Any]) -> tuple[str, int, Any]:
    """The pod's sandbox: a new container netns, ADDed; (container, exit status, the shim's answer)."""
    ctr = dl.lab.container()
    rc, res = dl.shim("ADD", ctr, args=cni_args(p, ctr))
    return ctr, rc, res


def nothing_left(dl: DaemonLab, ctr: str) -> None:
    assert dl.lab.links(ctr) == ["lo"]
    assert dl.leases() == []
    assert dl.cache_files() == []


def detach(dl: DaemonLab, ctr: str, p: dict[str, Any]) -> None:
    """The sandbox's DEL, which leaves nothing of it."""
    rc, res = dl.shim("DEL", ctr, args=cni_args(p, ctr))
    assert rc == 0, res
    nothing_left(dl, ctr)


def edit(admin: Any, dl: DaemonLab, p: dict[str, Any], value: str) -> None:
    """Patch the pod's networks annotation and wait until the daemon's watch saw it and the sync ran."""
    from kubernetes import client

    assert dl.daemon.podsync is not None and dl.daemon.cluster is not None
    before = dl.daemon.podsync.synced
    client.CoreV1Api(admin).patch_namespaced_pod(p["name"], p["ns"], {"metadata": {"annotations": {NETWORKS: value}}})
    assert dl.daemon.podsync.wait_synced(before, 60), "the edit was not synced"


def links(dl: DaemonLab, ctr: str) -> list[str]:
    """The sandbox's links but lo, sorted."""
    return sorted(x for x in dl.lab.links(ctr) if x != "lo")


def status_of(admin: Any, dl: DaemonLab, p: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod's network-status, once the node's writes are out; [] when it has none."""
    from kubernetes import client

    assert dl.daemon.cluster is not None and dl.daemon.cluster.pods.flush(30)
    got = client.CoreV1Api(admin).read_namespaced_pod(p["name"], p["ns"]).metadata.annotations or {}
    return json.loads(got[STATUS]) if STATUS in got else []


def events_of(admin: Any, dl: DaemonLab, p: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(type, reason, message) of the events the node wrote on this pod (not on an earlier one of its name)."""
    from kubernetes import client

    assert dl.daemon.cluster is not None and dl.daemon.cluster.pods.flush(30)
    items = client.CoreV1Api(admin).list_namespaced_event(p["ns"], field_selector=f"involvedObject.name={p['name']}")
    out = []
    for e in items.items:
        if e.involved_object.uid == p["uid"]:  # not an earlier pod's of the same name
            assert e.source.component == "netcomp" and e.reporting_instance == dl.settings.nodeName
            out.append((e.type, e.reason, e.message))
    return out


def explain(dl: DaemonLab, *args: str, text: bool = False) -> tuple[int, Any]:
    """`netcomp explain` (the command, in this process) asking the lab's daemon: (exit status, its document, or
    its text with text=True)."""
    cli = dl.base / "cli.yaml"
    if not cli.exists():
        cli.write_text(yaml.safe_dump({"socket": dl.sock}))
    out, err = io.StringIO(), io.StringIO()
    rc = main(["explain", *args, "--config", str(cli), *([] if text else ["-o", "json"])], out, err)
    assert err.getvalue() == ""
    return rc, out.getvalue() if text else json.loads(out.getvalue())
