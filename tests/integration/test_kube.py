"""The Kubernetes path against a real kube-apiserver and etcd (tests/lab/kubeapi.py): the cluster's
Network objects compiled and followed (created, edited, broken, overridden by a node file, deleted), a pod's
network annotation attaching it through the shim with the real plugins and its network-status written back,
and an API server that does not answer; a kubeconfig whose credentials an exec plugin gives. The daemon runs as
the packaged ClusterRole allows, nothing more."""

from __future__ import annotations

import contextlib
import io
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from netcomp.cli.ask import _print_status
from netcomp.settings import KubeSettings
from tests.lab.daemonlab import DaemonLab, kube_lab, wait_for
from tests.lab.intents import intent
from tests.lab.kubeapi import NETS, NODE_TOKEN, ApiServer, distrust, free_port
from tests.lab.labpods import STATUS, pod_asking
from tests.lab.multus import NAD, NADS, nad

pytestmark = pytest.mark.root


def subnet(dl: DaemonLab, network: str) -> str | None:
    conf = dl.daemon.state.networks().get(network)
    return conf["plugins"][0]["ipam"]["ranges"][0][0]["subnet"] if conf else None


def test_network_objects_are_compiled_and_followed(api: ApiServer, admin: Any, tmp_path: Path) -> None:
    from kubernetes import client

    custom = client.CustomObjectsApi(admin)
    with kube_lab(tmp_path, api.node_kubeconfig) as dl:
        spec = {
            "type": "macvlan",
            "hostDevice": dl.lab.master,
            "interfacePrefix": "fab",
            "ipam": {"type": "host-local", "dataDir": f"{dl.base}/ipam", "subnet": "10.91.0.0/24"},
        }
        obj = {"apiVersion": "netcomp.io/v1", "kind": "Network", "metadata": {"name": "fabric"}, "spec": spec}
        custom.create_cluster_custom_object(*NETS, obj)
        try:
            wait_for(dl, lambda: subnet(dl, "fabric") == "10.91.0.0/24", "the new object compiled")
            ctr = dl.lab.container()
            assert dl.shim("ADD", ctr, args="NETCOMP_NETWORKS=fabric")[0] == 0
            assert dl.lab.addrs(ctr, "fab0")[0].startswith("10.91.0.")

            edit = {"spec": {"ipam": {**spec["ipam"], "subnet": "10.92.0.0/24"}}}
            custom.patch_cluster_custom_object(*NETS, "fabric", edit)
            wait_for(dl, lambda: subnet(dl, "fabric") == "10.92.0.0/24", "the edit compiled")

            # A broken edit: its position is in the node's copy of the object; the last good version stays.
            custom.patch_cluster_custom_object(*NETS, "fabric", {"spec": {"colour": "blue"}})
            wait_for(dl, lambda: dl.daemon.state.current.degraded, "the broken edit reported")
            status = dl.daemon.status()
            copy = str(dl.base / "cluster.d" / "fabric.yaml")
            assert any(d["file"] == copy and d["line"] and "colour" in d["message"] for d in status["diagnostics"])
            kept = {n["name"]: n["keptLastGood"] for n in status["networks"]}
            assert subnet(dl, "fabric") == "10.92.0.0/24" and kept["fabric"] is True
            assert status["kubernetes"]["synced"] and status["kubernetes"]["lastError"] is None
            out = io.StringIO()
            _print_status(status, out)
            assert "  cluster: synced, 1 Network objects\n" in out.getvalue()

            # A node's own file of the same name overrides the cluster's object on this node.
            local = spec | {"ipam": {**spec["ipam"], "subnet": "10.93.0.0/24"}}
            (dl.base / "networks.d" / "fabric.yaml").write_text(intent("fabric", json.dumps(local)))
            wait_for(dl, lambda: subnet(dl, "fabric") == "10.93.0.0/24", "the node's file taking precedence")
            (dl.base / "networks.d" / "fabric.yaml").unlink()

            custom.delete_cluster_custom_object(*NETS, "fabric")
            wait_for(dl, lambda: "fabric" not in dl.daemon.state.networks(), "the deleted object gone")
            assert not (dl.base / "cluster.d" / "fabric.yaml").exists()
            assert dl.shim("DEL", ctr)[0] == 0  # from the cache: the network is gone
            assert dl.lab.links(ctr) == ["lo"] and dl.leases() == []
        finally:
            with _absent():
                custom.delete_cluster_custom_object(*NETS, "fabric")


def test_pod_annotation_attaches_and_network_status_is_written(api: ApiServer, admin: Any, tmp_path: Path) -> None:
    from kubernetes import client, watch

    core = client.CoreV1Api(admin)
    core.create_namespaced_pod("default", pod_asking("p1", "storage@st9, default/backup"))
    try:
        with kube_lab(tmp_path, api.node_kubeconfig) as dl:
            ctr = dl.lab.container()
            args = f"IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=p1;K8S_POD_INFRA_CONTAINER_ID={ctr}"
            rc, res = dl.shim("ADD", ctr, args=args)
            assert rc == 0, res
            # Multus's names: an element without an interface is net<its position>, the default network being 0.
            assert sorted(dl.lab.links(ctr)) == ["eth0", "lo", "net2", "st9"]
            got = None
            for event in watch.Watch().stream(
                core.list_namespaced_pod, "default", field_selector="metadata.name=p1", timeout_seconds=60
            ):
                got = (event["object"].metadata.annotations or {}).get(STATUS)
                if got:
                    break
            assert got, "network-status was not written"
            status = json.loads(got)
            assert [(s["name"], s["interface"], s.get("default", False)) for s in status] == [
                ("mgmt", "eth0", True),
                ("storage", "st9", False),
                ("backup", "net2", False),
            ]
            for s in status:
                assert [f"{a}/24" for a in s["ips"]] == dl.lab.addrs(ctr, s["interface"]) and len(s["mac"]) == 17
            assert dl.shim("DEL", ctr, args=args)[0] == 0
            assert dl.lab.links(ctr) == ["lo"] and dl.leases() == []
    finally:
        core.delete_namespaced_pod("p1", "default", grace_period_seconds=0)


def test_multus_attachment_definitions_serve_pods_unchanged(api: ApiServer, admin: Any, tmp_path: Path) -> None:
    """A cluster moving over from Multus: its NetworkAttachmentDefinitions and its pods' annotations as they are."""
    from kubernetes import client

    core, custom = client.CoreV1Api(admin), client.CustomObjectsApi(admin)
    with kube_lab(tmp_path, api.node_kubeconfig, networkAttachmentDefinitions=True) as dl:
        config = {
            "cniVersion": "0.3.1",
            "name": "nad-br",
            "type": "bridge",
            "bridge": "ncnad0",
            "ipam": {"type": "host-local", "subnet": "10.95.0.0/24", "dataDir": f"{dl.base}/ipam"},
        }
        custom.create_namespaced_custom_object(*NAD, "default", NADS, nad("default", "nad-br", config))
        core.create_namespaced_pod("default", pod_asking("p2", "default/nad-br"))
        try:
            wait_for(dl, lambda: "default.nad-br" in dl.daemon.state.networks(), "the definition compiled")
            assert (dl.base / "cluster.d" / "default.nad-br.nad.yaml").exists()
            assert dl.daemon.status()["kubernetes"]["attachmentDefinitions"] == 1
            ctr = dl.lab.container()
            args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=p2"
            assert dl.shim("ADD", ctr, args=args)[0] == 0
            assert dl.lab.addrs(ctr, "net1")[0].startswith("10.95.0.")
            assert dl.shim("DEL", ctr, args=args)[0] == 0
            custom.delete_namespaced_custom_object(*NAD, "default", NADS, "nad-br")
            wait_for(dl, lambda: "default.nad-br" not in dl.daemon.state.networks(), "the deleted definition gone")
        finally:
            core.delete_namespaced_pod("p2", "default", grace_period_seconds=0)
            with _absent():
                custom.delete_namespaced_custom_object(*NAD, "default", NADS, "nad-br")


def test_an_api_server_that_does_not_answer(api: ApiServer, tmp_path: Path) -> None:
    port = free_port()
    dead = api.kubeconfig(tmp_path / "dead.kubeconfig", NODE_TOKEN, server=f"https://127.0.0.1:{port}")
    with kube_lab(tmp_path / "node", dead, timeout=1) as dl:
        ctr = dl.lab.container()
        rc, err = dl.shim("ADD", ctr, args="IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=p9")
        assert rc == 1 and err["code"] == 11
        # In an operator's words, naming the server: no library internals.
        assert err["msg"] == (
            f"cannot read pod default/p9 from the Kubernetes API server: the API server at https://127.0.0.1:{port} "
            "refused the connection: is it running, and is the kubeconfig's address right?"
        )
        assert "no plugin was run" in err["details"]
        assert dl.lab.links(ctr) == ["lo"] and dl.cache_files() == []
        assert dl.shim("ADD", ctr)[0] == 0  # a container that is not a pod is not held up by the cluster
        assert dl.shim("DEL", ctr)[0] == 0
        status = dl.daemon.status()["kubernetes"]
        assert not status["synced"] and status["lastError"]
        out = io.StringIO()
        _print_status(dl.daemon.status(), out)
        assert "  cluster: NOT SYNCED, 0 Network objects, last error: " in out.getvalue()
        assert "cluster NOT SYNCED" in dl.daemon.status_line()
        assert b'netcomp_kubernetes_errors_total{op="read"}' in dl.daemon.metrics.render()


@pytest.mark.parametrize("fault", ["untrusted", "token"])
def test_api_server_refusals_are_said_in_an_operators_words(api: ApiServer, tmp_path: Path, fault: str) -> None:
    """A CA that did not sign the server's certificate; a token the server does not know: the CNI error says which,
    naming the server or the kubeconfig."""
    cfg = api.kubeconfig(tmp_path / "k.kubeconfig", NODE_TOKEN if fault == "untrusted" else "no-such-token")
    if fault == "untrusted":
        distrust(cfg, tmp_path)
    with kube_lab(tmp_path / "node", cfg, timeout=5) as dl:
        ctr = dl.lab.container()
        rc, err = dl.shim("ADD", ctr, args="IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=p9")
        assert rc == 1 and err["code"] == 11
        if fault == "untrusted":
            assert f"TLS: the certificate of the API server at {api.url} is not trusted" in err["msg"], err
        else:
            assert (
                f"401 Unauthorized: the API server does not accept the credentials of kubeconfig {cfg}" in (err["msg"])
            ), err
        assert "urllib3" not in err["msg"] and "MaxRetryError" not in err["msg"]


class _absent:
    """Ignore 404 (already deleted) in cleanup."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: object, tb: object) -> bool:
        return getattr(exc, "status", None) == 404


def test_a_node_catches_up_when_the_api_server_comes_back(api: ApiServer, admin: Any, tmp_path: Path) -> None:
    """The daemon starts while nothing answers at its API address; an object is created meanwhile; then the API
    server becomes reachable there (a TCP relay to it, so the real server never stops for the other tests)."""
    from kubernetes import client

    port = free_port()
    kubeconfig = api.kubeconfig(tmp_path / "late.kubeconfig", NODE_TOKEN, server=f"https://127.0.0.1:{port}")
    custom = client.CustomObjectsApi(admin)
    with kube_lab(tmp_path / "node", kubeconfig, timeout=1) as dl:
        assert not dl.daemon.status()["kubernetes"]["synced"]
        spec = {"type": "static", "networkID": "lab-bridge"}
        custom.create_cluster_custom_object(*NETS, {"apiVersion": "netcomp.io/v1", "kind": "Network",
                                                   "metadata": {"name": "late"}, "spec": spec})  # fmt: skip
        try:
            with relay(port, int(api.url.rsplit(":", 1)[1])):
                wait_for(dl, lambda: "late" in dl.daemon.state.networks(), "the object listed once reachable")
                status = dl.daemon.status()["kubernetes"]
                assert status["synced"] and status["lastError"] is None
        finally:
            custom.delete_cluster_custom_object(*NETS, "late")


@contextlib.contextmanager
def relay(port: int, target: int) -> Iterator[None]:
    """A TCP relay from 127.0.0.1:port to 127.0.0.1:target, for as long as the block runs."""
    srv = socket.create_server(("127.0.0.1", port))
    stop = threading.Event()

    def pump(a: socket.socket, b: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while chunk := a.recv(65536):
                b.sendall(chunk)
        with contextlib.suppress(OSError):
            b.shutdown(socket.SHUT_WR)

    def serve() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            up = socket.create_connection(("127.0.0.1", target))
            for a, b in ((conn, up), (up, conn)):
                threading.Thread(target=pump, args=(a, b), daemon=True).start()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join()
        srv.close()


def test_a_kubeconfig_whose_credentials_an_exec_plugin_gives(api: ApiServer, tmp_path: Path) -> None:
    """kubectl's exec credential plugin (client.authentication.k8s.io; here a script printing the node's token)
    is run by the kubernetes library only, so the client's calls go through it: a call, an error status, a watch,
    and doctor's apiserver and node checks, all as with a plain token."""
    import yaml

    from netcomp.doctor.apiserver import cluster
    from netcomp.kube.apiclient import Api, LibraryTransport
    from netcomp.kube.apierrors import ApiException
    from netcomp.settings import Settings

    plugin = tmp_path / "credential-plugin"
    cred = {"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential",
            "status": {"token": NODE_TOKEN}}  # fmt: skip
    plugin.write_text(f"#!/bin/sh\necho '{json.dumps(cred)}'\n")
    plugin.chmod(0o755)
    cfg = api.kubeconfig(tmp_path / "exec.kubeconfig", "unused")
    doc = yaml.safe_load(cfg.read_text())
    doc["users"][0]["user"] = {"exec": {"apiVersion": cred["apiVersion"], "command": str(plugin)}}
    cfg.write_text(yaml.safe_dump(doc))
    client = Api(str(cfg))
    assert isinstance(client.transport, LibraryTransport)
    assert client.call("GET", "/version", timeout=10).json()["gitVersion"]
    with pytest.raises(ApiException) as missing:
        client.call("GET", "/api/v1/nodes/no-such-node", timeout=10)
    assert missing.value.status == 404
    events = client.watch("/api/v1/nodes", {"timeoutSeconds": 1}, timeout=10)
    assert all(e["type"] in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK") for e in events)
    checks = {c.name: c for c in cluster(Settings(kubernetes=KubeSettings(kubeconfig=str(cfg)), nodeName="nope"), None)}
    assert checks["apiserver"].status == "ok", checks["apiserver"]
    assert checks["node"].status == "fail" and checks["node"].found == "no Node named 'nope' (nodeName)"
    port = free_port()  # and a server that is not there is said in the same words as with a token
    doc["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
    cfg.write_text(yaml.safe_dump(doc))
    [down, *_] = cluster(Settings(kubernetes=KubeSettings(kubeconfig=str(cfg), timeout=5), nodeName="nope"), None)
    assert down.found == (
        f"the API server at https://127.0.0.1:{port} refused the connection: is it running, and is the kubeconfig's "
        "address right?"
    )
