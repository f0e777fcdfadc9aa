"""What the integration tests share: a daemon in process serving a lab of its own (daemonlab.py) per test that
asks for `dl`; a real kube-apiserver and etcd (kubeapi.py) per test module that asks for `api`, with the packaged
CRDs and ClusterRole installed, and its admin's clients; the IPAMClaim CRD served on it (claimlab.py); a real node
on it (kubenode.py) per module that asks for `kubenode`; the cluster of the Multus tests and its node (multus.py),
the cluster of the Service tests (services.py); and both ways the daemon looks for a network namespace."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from netcomp.host import netns as nsutil
from tests.lab.claimlab import serve_claim_crd
from tests.lab.daemonlab import DaemonLab, daemon_lab
from tests.lab.kubeapi import ApiServer, api_server
from tests.lab.kubenode import KubeNode, kube_node
from tests.lab.multus import multus_lab
from tests.lab.services import make_service_networks


@pytest.fixture
def dl(tmp_path: Path) -> Iterator[DaemonLab]:
    """The daemon in process, serving its own lab with the real plugins through the real shim."""
    with daemon_lab(tmp_path) as d:
        yield d


@pytest.fixture(scope="module")
def api(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """One API server for the module (its tests share it; each module its own)."""
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces, the API server's binaries)")
    with api_server(tmp_path_factory.mktemp(f"kube-{request.module.__name__.rpartition('.')[2]}")) as a:
        yield a


@pytest.fixture(scope="module")
def admin(api: ApiServer) -> Any:
    """The module's API server as its admin (system:masters) sees it, with the namespaces the tests' tenants'
    pods live in: team-a and team-b."""
    from kubernetes import client, config

    c = config.new_client_from_config(config_file=str(api.admin_kubeconfig))
    for ns in ("team-a", "team-b"):
        client.CoreV1Api(c).create_namespace({"metadata": {"name": ns}})
    return c


@pytest.fixture(scope="module")
def custom(admin: Any) -> Any:
    from kubernetes import client

    return client.CustomObjectsApi(admin)


@pytest.fixture(scope="module")
def core(admin: Any) -> Any:
    from kubernetes import client

    return client.CoreV1Api(admin)


@pytest.fixture(scope="module")
def claim_crd(admin: Any) -> None:
    """The packaged IPAMClaim CRD, served (claimlab.py)."""
    serve_claim_crd(admin)


@pytest.fixture(scope="module")
def kubenode(
    api: ApiServer, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KubeNode]:
    """A real node (kubenode.py: kubelet, containerd, netcomp as its CNI, a device plugin) registered with the
    module's API server; one per module."""
    with kube_node(tmp_path_factory.mktemp(f"node-{request.module.__name__.rpartition('.')[2]}"), api) as node:
        yield node


@pytest.fixture(scope="module")
def multus_node(api: ApiServer, admin: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonLab]:
    """One node for the module, serving the Multus tests' definitions from the cluster (multus.py)."""
    with multus_lab(api, admin, tmp_path_factory.mktemp("node")) as dl:
        yield dl


@pytest.fixture(scope="module")
def service_networks(admin: Any) -> None:
    """The Service tests' namespace, Nodes and networks, made once per module (services.py)."""
    make_service_networks(admin)


@pytest.fixture(params=["handle", "proc"])
def search(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways a namespace is looked for: by file handle (Linux 6.18), and the /proc search of older kernels
    (every process in it, those whose namespaces the daemon may not read too: this machine's PID 1 is one,
    whatever the capabilities). With "proc", this process's netns module searches /proc; a child is told by
    the name."""
    if request.param == "proc":
        monkeypatch.setattr(nsutil, "_handles", lambda: False)
    elif not nsutil._handles():  # the kernel's own answer, where it has one
        pytest.skip("this kernel opens no namespace by file handle")
    return str(request.param)
