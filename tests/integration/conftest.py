"""What the integration tests share: a real kube-apiserver and etcd (kubeapi.py) per test module that asks for
`api`, with the packaged CRDs and ClusterRole installed."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.integration.kubeapi import ApiServer, api_server


@pytest.fixture(scope="module")
def api(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """One API server for the module (its tests share it; each module its own)."""
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces, the API server's binaries)")
    with api_server(tmp_path_factory.mktemp(f"kube-{request.module.__name__.rpartition('.')[2]}")) as a:
        yield a
