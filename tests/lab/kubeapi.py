"""A real Kubernetes API server for the tests: kube-apiserver built from Debian's own source package and Debian's
etcd (scripts/kube-test-bins.sh, cached outside the checkout), both on 127.0.0.1 with free ports, TLS with the
server's self-signed certificate, static tokens: `admin` (system:masters) for the tests, `netcomp-node` for the
daemon, bound to the packaged ClusterRole (packaging/kubernetes/rbac.yaml) so that its rules are tested too.
Everything is stopped and removed on exit, even on failure."""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.lab.checkout import ROOT
from tests.lab.poll import until
from tests.lab.processes import reap

BINS = Path(os.environ.get("NETCOMP_KUBE_BINS", "/var/cache/netcomp-test/kube")) / "bin"
ADMIN_TOKEN, NODE_TOKEN = "netcomp-test-admin-token", "netcomp-test-node-token"
READY_SECONDS = 90
NETS = ("netcomp.io", "v1", "networks")  # netcomp's Network objects: group, version, plural


@dataclass
class ApiServer:
    url: str
    ca: Path
    admin_kubeconfig: Path
    node_kubeconfig: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)  # etcd, kube-apiserver
    log: Any = None

    def stop_apiserver(self) -> None:
        """kube-apiserver goes away (etcd stays): what a node sees when the control plane is down."""
        p = self.procs[1]
        p.terminate()
        reap(p, 20)

    def start_apiserver(self) -> None:
        """kube-apiserver again, on the same port, with the same state (etcd kept it)."""
        self.procs[1] = subprocess.Popen(self.procs[1].args, stdout=self.log, stderr=subprocess.STDOUT)
        _until_ready(self.url, self.ca, self.procs[1:], self.log.name)

    def kubeconfig(self, path: Path, token: str, server: str | None = None) -> Path:
        cluster = {"server": server or self.url, "certificate-authority": str(self.ca)}
        return Path(write_kubeconfig(path, {"token": token}, cluster))


def write_kubeconfig(path: Path, user: dict[str, Any], cluster: dict[str, Any] | None = None) -> str:
    """A kubeconfig at `path` as kubectl writes one (one cluster, one user, the context naming both), readable by
    its owner only; `cluster` by default an API server at https://api.test:6443 whose certificate is not checked
    (for a client that never connects)."""
    cluster = cluster or {"server": "https://api.test:6443", "insecure-skip-tls-verify": True}
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "t", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": "u"}}],
        "current-context": "t",
    }
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)
    return str(path)


def distrust(kubeconfig: Path, work: Path) -> None:
    """Point the kubeconfig's cluster at a CA of its own making (in `work`), one that did not sign the API
    server's certificate: a client using it must refuse the server."""
    other = work / "other-ca.crt"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(work / "other-ca.key"),
         "-out", str(other), "-subj", "/CN=not-the-cluster", "-days", "1"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    doc = yaml.safe_load(kubeconfig.read_text())
    doc["clusters"][0]["cluster"]["certificate-authority"] = str(other)
    kubeconfig.write_text(yaml.safe_dump(doc))


def ensure_binaries() -> None:
    if not (BINS / "kube-apiserver").exists() or not (BINS / "etcd").exists():
        subprocess.run([str(ROOT / "scripts" / "kube-test-bins.sh"), str(BINS.parent)], check=True, timeout=1800)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _until_ready(url: str, ca: Path, procs: list[subprocess.Popen[bytes]], logs: str) -> None:
    """Until the API server at `url` answers /readyz (polled: an external process starting); RuntimeError if one
    of `procs` exits first."""

    def ready() -> bool:
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError(f"{p.args[0]} exited: see {logs}")
        return _ready(url, ca)

    until(ready, f"kube-apiserver not ready in {READY_SECONDS}s: see {logs}", READY_SECONDS, 0.2)


def _ready(url: str, ca: Path) -> bool:
    if not ca.exists():
        return False
    ctx = ssl.create_default_context(cafile=str(ca))
    req = urllib.request.Request(f"{url}/readyz", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=2) as r:
            return bool(r.status == 200)
    except (OSError, ssl.SSLError):
        return False


@contextlib.contextmanager
def api_server(work: Path) -> Iterator[ApiServer]:
    ensure_binaries()
    etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
    certs = work / "certs"
    certs.mkdir(parents=True)
    (work / "tokens.csv").write_text(
        f'{ADMIN_TOKEN},admin,admin,"system:masters"\n{NODE_TOKEN},netcomp-node,netcomp-node,\n'
    )
    subprocess.run(["openssl", "genrsa", "-out", str(work / "sa.key"), "2048"], check=True, capture_output=True)
    subprocess.run(
        ["openssl", "rsa", "-in", str(work / "sa.key"), "-pubout", "-out", str(work / "sa.pub")],
        check=True,
        capture_output=True,
    )
    procs: list[subprocess.Popen[bytes]] = []
    logs = [open(work / "etcd.log", "wb"), open(work / "apiserver.log", "wb")]  # noqa: SIM115
    try:
        procs.append(
            subprocess.Popen(
                [
                    str(BINS / "etcd"),
                    "--name=t",
                    f"--data-dir={work / 'etcd'}",
                    f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
                    f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
                    f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                    f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                    f"--initial-cluster=t=http://127.0.0.1:{peer_port}",
                ],
                stdout=logs[0],
                stderr=subprocess.STDOUT,
            )
        )
        procs.append(
            subprocess.Popen(
                [
                    str(BINS / "kube-apiserver"),
                    f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                    "--bind-address=127.0.0.1",
                    "--advertise-address=127.0.0.1",
                    f"--secure-port={api_port}",
                    "--insecure-port=0",
                    f"--cert-dir={certs}",
                    f"--token-auth-file={work / 'tokens.csv'}",
                    f"--service-account-key-file={work / 'sa.pub'}",
                    f"--service-account-signing-key-file={work / 'sa.key'}",
                    "--service-account-issuer=https://netcomp.test",
                    "--disable-admission-plugins=ServiceAccount",
                    "--authorization-mode=RBAC",
                    "--enable-priority-and-fairness=false",
                    "--service-cluster-ip-range=10.250.0.0/24",
                ],
                stdout=logs[1],
                stderr=subprocess.STDOUT,
            )
        )
        url, ca = f"https://127.0.0.1:{api_port}", certs / "apiserver.crt"
        _until_ready(url, ca, procs, f"{work}/*.log")
        api = ApiServer(url, ca, work / "admin.kubeconfig", work / "node.kubeconfig", procs, logs[1])
        api.kubeconfig(api.admin_kubeconfig, ADMIN_TOKEN)
        api.kubeconfig(api.node_kubeconfig, NODE_TOKEN)
        _install_manifests(api)
        yield api
    finally:
        # One at a time, the API server first: stopping, it still writes to etcd (its endpoints), and without
        # etcd it retries until it is killed. It exits within a second or two, unless a client keeps a request
        # of it open (a test's leftover watch): then it is killed after a few seconds, its state being thrown
        # away anyway.
        for p, grace in zip(reversed(procs), (5, 20), strict=False):
            p.terminate()
            reap(p, grace)
        for f in logs:
            f.close()


def _install_manifests(api: ApiServer) -> None:
    """The packaged CRDs and ClusterRole, the role bound to the daemon's test user; waits until the CRD serves."""
    from kubernetes import client, config, utils

    c = config.new_client_from_config(config_file=str(api.admin_kubeconfig))
    for name in ("crd.yaml", "multi-networkpolicy-crd.yaml", "rbac.yaml"):
        utils.create_from_yaml(c, str(ROOT / "packaging" / "kubernetes" / name))
    client.RbacAuthorizationV1Api(c).create_cluster_role_binding(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "netcomp-node-test"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "netcomp-node"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "netcomp-node"}],
        }
    )
    ext = client.ApiextensionsV1Api(c)
    ext.create_custom_resource_definition(NAD_CRD)
    for crd in DANM_CRDS:
        ext.create_custom_resource_definition(crd)
    names = ["networks.netcomp.io", "addressblocks.netcomp.io", "network-attachment-definitions.k8s.cni.cncf.io"]
    names += ["multi-networkpolicies.k8s.cni.cncf.io"]
    names += [crd["metadata"]["name"] for crd in DANM_CRDS]

    def established(name: str) -> bool:
        conditions = ext.read_custom_resource_definition(name).status.conditions or []
        return any(c.type == "Established" and c.status == "True" for c in conditions)

    def left() -> list[str]:
        return [n for n in names if not established(n)]

    until(lambda: not left(), lambda: f"CRDs not established in 30s: {left()}", 30)


# Multus's kind, as Multus's own manifest defines it (the schema trimmed to what it declares).
NAD_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "network-attachment-definitions.k8s.cni.cncf.io"},
    "spec": {
        "group": "k8s.cni.cncf.io",
        "scope": "Namespaced",
        "names": {
            "plural": "network-attachment-definitions",
            "singular": "network-attachment-definition",
            "kind": "NetworkAttachmentDefinition",
            "shortNames": ["net-attach-def"],
        },
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "apiVersion": {"type": "string"},
                            "kind": {"type": "string"},
                            "metadata": {"type": "object"},
                            "spec": {"type": "object", "properties": {"config": {"type": "string"}}},
                        },
                    }
                },
            }
        ],
    },
}


def _danm_crd(plural: str, kind: str, scope: str) -> dict[str, Any]:
    """DANM's kinds as DANM's own manifests name them (danm.k8s.io/v1); the schema keeps every field, as DANM's
    production CRDs declare them (TenantConfig's fields are at the top, beside metadata)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        # A *.k8s.io group is protected: a CRD of one must say whether the Kubernetes API review approved it.
        "metadata": {
            "name": f"{plural}.danm.k8s.io",
            "annotations": {"api-approved.kubernetes.io": "unapproved, DANM's own group"},
        },
        "spec": {
            "group": "danm.k8s.io",
            "scope": scope,
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                }
            ],
        },
    }


DANM_CRDS = [
    _danm_crd("danmnets", "DanmNet", "Namespaced"),
    _danm_crd("tenantnetworks", "TenantNetwork", "Namespaced"),
    _danm_crd("clusternetworks", "ClusterNetwork", "Cluster"),
    _danm_crd("tenantconfigs", "TenantConfig", "Cluster"),
]


@contextlib.contextmanager
def reachable_from(netns: str, port: int) -> Iterator[int]:
    """127.0.0.1:port of this (the host's) namespace, reachable from inside the named netns at 127.0.0.1:<the
    port yielded>: a listener made inside it (a socket belongs to the namespace it was made in: a helper thread
    enters the netns only to make it), each connection carried to the host's loopback by threads here. For a
    daemon run as a process in a lab netns that must reach the test's API server; only loopback carries it."""
    import socket as sk
    import threading

    from netcomp.host.nsenter import _setns, open_netns

    box: dict[str, Any] = {}

    def make() -> None:
        fd, _ = open_netns(f"/var/run/netns/{netns}")
        try:
            _setns(fd)
            s = sk.socket(sk.AF_INET, sk.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            s.listen(64)
            box["listener"] = s
        finally:
            os.close(fd)  # this thread ends here, in the netns: it serves nothing

    t = threading.Thread(target=make)
    t.start()
    t.join()
    listener: sk.socket = box["listener"]
    stop = threading.Event()

    def pump(src: sk.socket, dst: sk.socket) -> None:
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(sk.SHUT_RDWR)

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            try:
                up = sk.create_connection(("127.0.0.1", port), timeout=10)
                up.settimeout(None)
            except OSError:
                conn.close()
                continue
            for a, b in ((conn, up), (up, conn)):
                threading.Thread(target=pump, args=(a, b), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        stop.set()
        listener.close()
