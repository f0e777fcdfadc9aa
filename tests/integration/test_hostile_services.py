"""Services a hostile tenant writes, against a real kube-apiserver (kubeapi.py) and a node serving its own lab: a
DANM selector nested 5,000 deep (it raised RecursionError and stopped Service following on every node) and a
netcomp selector of 60,000 spaces (it held the GIL for seconds at every edit) exist before a good Service is
made; the good one still gets its EndpointSlice, the bad ones are refused with their reasons in `status`, and
counted once each in netcomp_foreign_ignored_total. Everything else about the slices:
tests/integration/test_service_slices.py."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from netcomp.kube import labels
from tests.lab.daemonlab import DaemonLab
from tests.lab.kubeapi import ApiServer
from tests.lab.labpods import NETWORKS
from tests.lab.services import NS, attach_to, delete_service, make_pod, service, service_node, wait_view

pytestmark = pytest.mark.root


@pytest.fixture(scope="module")
def node_a(api: ApiServer, service_networks: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonLab]:
    with service_node(api, tmp_path_factory.mktemp("hostile") / "a", "node-a") as a:
        yield a


def test_a_hostile_service_costs_only_itself(core: Any, custom: Any, admin: Any, node_a: DaemonLab) -> None:
    deep = '{"a":' * 5_000 + '"b"' + "}" * 5_000
    bad = {
        "deep": {"danm.k8s.io/selector": deep, "danm.k8s.io/network": "internal"},
        "spaces": {"netcomp.io/network": "ext", "netcomp.io/selector": "app=web" + " " * 60_000 + "x"},
        "set": {"netcomp.io/network": "ext", "netcomp.io/selector": "app in (" + "a " * 4_000 + ")"},
    }
    with contextlib.ExitStack() as undo:
        for name, notes in bad.items():
            service(core, name, notes, [{"port": 80}])
            undo.callback(delete_service, core, name)
        notes = {"netcomp.io/selector": "app=web", "netcomp.io/network": "ext"}
        service(core, "web", notes, [{"name": "http", "port": 80}])
        undo.callback(delete_service, core, "web")
        p = make_pod(core, node_a, "web-1", {"app": "web"}, {NETWORKS: "ext"})
        _, ip = attach_to(admin, node_a, p, "ext")
        wait_view(custom, "web", {"node-a": [("web-1", ip, False)]})
        cluster = node_a.daemon.cluster
        assert cluster is not None and cluster.slices is not None
        status = cluster.slices.status()
        refused = status["refused"]
        assert refused[f"{NS}/deep"].startswith("danm.k8s.io/selector: not JSON (nested")
        assert refused[f"{NS}/spaces"] == (
            f"netcomp.io/selector: 60008 characters: a selector is at most {labels.MAX_LENGTH}"
        )
        assert refused[f"{NS}/set"].startswith("netcomp.io/selector: 'app in (")
        assert status["lastError"] is None and status["services"] == 1
        metrics = node_a.daemon.metrics.render().decode()
        assert 'netcomp_foreign_ignored_total{kind="Service"} 3' in metrics, metrics
