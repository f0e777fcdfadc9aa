"""A node against an API server that answers 410 Gone to every list and watch (tests/lab/goneapi.py), through the
daemon's own HTTP client: each follower (Network objects, pods, the Node, Services, EndpointSlices) lists a few
times in a window, not thousands (a fake clock drives the window), and `status` says why and that it backs off;
then a whole daemon, in real time, says so in GET /status and `netcomp status`."""

from __future__ import annotations

import io
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from netcomp.cli.ask import _print_status
from netcomp.cluster.intents import Cluster
from netcomp.metrics import Metrics
from netcomp.records.files import Records
from netcomp.settings import KubeSettings
from tests.lab.daemonlab import kube_lab
from tests.lab.goneapi import FakeTime, GoneApi, gone_api
from tests.lab.poll import until


@pytest.fixture
def gone() -> Iterator[GoneApi]:
    with gone_api() as api:
        yield api


def test_each_follower_lists_a_few_times_in_ten_seconds(gone: GoneApi, tmp_path: Path) -> None:
    kube = KubeSettings(kubeconfig=str(gone.kubeconfig(tmp_path / "kubeconfig")), timeout=5, services=True)
    cluster = Cluster(kube, tmp_path / "cluster.d", Metrics(), "n1", Records(tmp_path / "cache"))
    assert cluster.slices is not None
    ss = cluster.slices
    runs: dict[str, tuple[Any, Callable[[threading.Event], None], Callable[[], str | None], str]] = {
        "Networks": (cluster.followers[0].backoff, cluster.followers[0].follow, lambda: cluster.status()["lastError"],
                     "/apis/netcomp.io/v1/networks"),
        "pods": (cluster.pods.backoff, cluster.pods.follow, cluster.pods.status_error, "/api/v1/pods"),
        "Node": (cluster.node.backoff, cluster.node.follow, cluster.node.status_error, "/api/v1/nodes"),
        "Services": (ss.backoffs["Services"], ss.follows["Services"].follow, lambda: ss.status()["lastError"],
                     "/api/v1/services"),
        "slices": (ss.backoffs["slices"], ss.follows["slices"].follow, ss.follows["slices"].status_error,
                   "/apis/discovery.k8s.io/v1"),
    }  # fmt: skip
    for what, (backoff, run, error, path) in runs.items():
        stop = threading.Event()
        t = FakeTime(stop, window=10)
        said: list[str | None] = []

        def wait(s: threading.Event, seconds: float, t: FakeTime = t, error: Any = error, said: Any = said) -> None:
            said.append(error())
            t.wait(s, seconds)

        backoff.clock, backoff.wait, backoff.rand = t.clock, wait, lambda: 0.5
        run(stop)
        assert 2 <= gone.count(path) <= 5, (what, gone.counts)  # 2,420 in 10 s before
        assert said[0] is not None and "410 Gone: too old resource version: 5 (9) (answered to a list)" in said[0]
        assert said[0].endswith("(failed once; backing off, trying again in 1 s)"), said[0]
    assert sum(gone.counts.values()) <= 25 and not any(p.endswith("?watch") for p in gone.counts)


@pytest.mark.root
def test_a_daemon_says_it_backs_off(gone: GoneApi, tmp_path: Path) -> None:
    """In real time: the daemon's status says the 410 and the back-off, and how many times in a row the Services'
    follower failed: it asked no more often than that (listing again at once: hundreds of times a second)."""
    (tmp_path / "node").mkdir()
    kubeconfig = gone.kubeconfig(tmp_path / "kubeconfig")
    with kube_lab(tmp_path / "node", kubeconfig, timeout=5, services=True) as dl:

        def status() -> dict[str, Any]:
            got: dict[str, Any] = dl.daemon.status()
            return got

        def slices_error() -> str:
            return str(((status()["kubernetes"] or {}).get("endpointSlices") or {}).get("lastError") or "")

        said = until(lambda: re.search(r"failed (\d+) times in a row", slices_error()), slices_error)
        failures = int(said[1])
        assert gone.count("/api/v1/services") <= failures + 1, (failures, gone.counts)
        kube = status()["kubernetes"]
        assert "410 Gone" in kube["lastError"] and "backing off, trying again in" in kube["lastError"]
        out = io.StringIO()
        _print_status(status(), out)
        text = out.getvalue()
        assert "  cluster: NOT SYNCED, 0 Network objects, last error: cannot follow Network objects: 410 Gone" in text
        assert "NOT SYNCED, last error: cannot follow" in text.split("EndpointSlices:")[1]
