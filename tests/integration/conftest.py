"""What the integration tests share: a daemon in process serving a lab of its own (daemonlab.py) per test that
asks for `dl`; a real kube-apiserver and etcd (kubeapi.py) per test module that asks for `api`, with the packaged
CRDs and ClusterRole installed; a real node on it (kubenode.py) per module that asks for `kubenode`."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.lab.daemonlab import DaemonLab, daemon_lab
from tests.lab.kubeapi import ApiServer, api_server
from tests.lab.kubenode import KubeNode, kube_node


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
def kubenode(
    api: ApiServer, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KubeNode]:
    """A real node (kubenode.py: kubelet, containerd, netcomp as its CNI, a device plugin) registered with the
    module's API server; one per module."""
    with kube_node(tmp_path_factory.mktemp(f"node-{request.module.__name__.rpartition('.')[2]}"), api) as node:
        yield node
