#!/usr/bin/env python3
"""Cluster-wide addresses: what giving an address from a block costs an ADD (root). Each node is a daemon of its own
in a lab netns with the real plugins, against one local kube-apiserver; the cluster network's pool is shared by
the nodes of a row, each node's host-local network has a subnet of its own. Rows, each printed with its goal:

  (a) ADD through the shim, a macvlan network with `ipam: {type: cluster}` (an address from a block the node
      holds, the static plugin applies it) / the same ADD with `ipam: {type: host-local}`, medians of ADDs
      interleaved (each followed by its DEL), one node                                                   <= 1.02
  (b) the same, three nodes at once                                                                      <= 1.02
  (c) a burst of 64 concurrent ADDs per node on three nodes at once: every address unique across the nodes, no
      "connection pool is full" in any log, and the p99 of the ADDs' latency with cluster IPAM / with host-local
      (the same burst on the host-local network)                                                         <= 1.1

Before measuring, each node ADDs and DELs a few containers on both networks (it holds a block by then: the
steady state). Everything runs against a kube-apiserver and etcd this script starts on 127.0.0.1
(tests/lab/kubeapi.py) and is removed at the end. Usage: sudo bench/ipam.py [--runs 30] [--burst 64]
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from netcomp.settings import KubeSettings  # noqa: E402
from tests.lab.daemonlab import DaemonLab, daemon_lab, intent  # noqa: E402
from tests.lab.kubeapi import api_server  # noqa: E402

GOALS = {"a": 1.02, "b": 1.02, "c": 1.1}


class Caught(logging.Handler):
    """Every log line of the daemons (in this process), to look for the API client's complaints."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def networks(base: Path, master: str, shared: str, own: str) -> None:
    d = base / "networks.d"
    d.mkdir(parents=True, exist_ok=True)
    for name, ipam in (
        ("cl", f"{{type: cluster, subnet: {shared}}}"),
        ("hl", f"{{type: host-local, dataDir: {base}/ipam, subnet: {own}}}"),
    ):
        (d / f"90-{name}.yaml").write_text(intent(name, f"{{type: macvlan, hostDevice: {master}, ipam: {ipam}}}"))


def add(dl: DaemonLab, network: str) -> tuple[float, str, list[str]]:
    ctr = dl.lab.container()
    t = time.perf_counter()
    rc, res = dl.shim("ADD", ctr, args=f"NETCOMP_NETWORKS={network}", ready_timeout=30)
    took = time.perf_counter() - t
    assert rc == 0, res
    return took, ctr, [ip["address"].split("/")[0] for ip in res["ips"]]


def delete(dl: DaemonLab, ctr: str) -> None:
    assert dl.shim("DEL", ctr, ready_timeout=30)[0] == 0


def one_round(dl: DaemonLab, network: str) -> float:
    took, ctr, _ = add(dl, network)
    delete(dl, ctr)
    return took


def medians(labs: list[DaemonLab], runs: int) -> dict[str, float]:
    """Each node ADDs (and DELs) runs times per network, cluster and host-local interleaved; all nodes at once."""

    def node(dl: DaemonLab) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {"cl": [], "hl": []}
        for _ in range(runs):
            for net in ("cl", "hl"):
                out[net].append(one_round(dl, net))
        return out

    with ThreadPoolExecutor(len(labs)) as pool:
        per_node = list(pool.map(node, labs))
    cl = statistics.median([x for n in per_node for x in n["cl"]]) * 1000
    hl = statistics.median([x for n in per_node for x in n["hl"]]) * 1000
    return {"cluster_ms": round(cl, 1), "host_local_ms": round(hl, 1), "ratio": round(cl / hl, 3)}


def burst(labs: list[DaemonLab], network: str, n: int) -> tuple[list[float], list[str]]:
    """n concurrent ADDs per node, all nodes at once; their latencies and addresses; then every container DELed."""
    jobs = [dl for dl in labs for _ in range(n)]
    with ThreadPoolExecutor(len(jobs)) as pool:
        done = list(pool.map(lambda dl: (dl, *add(dl, network)), jobs))
        list(pool.map(lambda x: delete(x[0], x[2]), done))
    return [x[1] for x in done], [a for x in done for a in x[3]]


def p99(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=100)[98] * 1000


def row_c(labs: list[DaemonLab], n: int, caught: Caught) -> dict[str, Any]:
    cl_times, cl_addrs = burst(labs, "cl", n)
    hl_times, _ = burst(labs, "hl", n)
    complaints = [line for line in caught.lines if "pool is full" in line.lower()]
    return {
        "adds": len(cl_times),
        "unique": len(set(cl_addrs)) == len(cl_addrs) == len(cl_times),
        "pool_full_lines": len(complaints),
        "cluster_p99_ms": round(p99(cl_times), 1),
        "host_local_p99_ms": round(p99(hl_times), 1),
        "cluster_median_ms": round(statistics.median(cl_times) * 1000, 1),
        "host_local_median_ms": round(statistics.median(hl_times) * 1000, 1),
        "ratio": round(p99(cl_times) / p99(hl_times), 3),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--burst", type=int, default=64)
    a = p.parse_args()
    caught = Caught()
    logging.getLogger().addHandler(caught)
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="netcomp-bench-ipam-") as d, api_server(Path(d) / "kube") as api:
        for count in (1, 3):
            with contextlib.ExitStack() as stack:
                labs = []
                for i in range(count):
                    base = Path(d) / f"n{count}-{i}"
                    base.mkdir()
                    kube = KubeSettings(kubeconfig=str(api.node_kubeconfig), timeout=10, networks=False)
                    extra = {"kubernetes": kube, "nodeName": f"node-{count}-{i}", "defaultNetwork": None,
                             "clusterIntentDir": str(base / "cluster.d")}  # fmt: skip
                    dl = stack.enter_context(daemon_lab(base, extra=extra))
                    networks(base, dl.lab.master, f"10.{120 + count}.0.0/20", f"10.{130 + count}.{4 * i}.0/22")
                    dl.daemon.reload()
                    labs.append(dl)
                with ThreadPoolExecutor(count) as pool:  # warm up: every node holds a block
                    list(pool.map(lambda dl: [one_round(dl, net) for net in ("cl", "hl") for _ in range(3)], labs))
                out["a" if count == 1 else "b"] = medians(labs, a.runs)
                if count == 3:
                    out["c"] = row_c(labs, a.burst, caught)
    labels = {"a": "1 node, ADD median", "b": "3 nodes at once, ADD median", "c": f"{a.burst} ADDs x 3 nodes, p99"}
    for k, v in out.items():
        extra = ""
        if k == "c":
            extra = f"  ({v['adds']} ADDs, unique: {v['unique']}, 'pool is full' lines: {v['pool_full_lines']})"
            cl, hl = v["cluster_p99_ms"], v["host_local_p99_ms"]
        else:
            cl, hl = v["cluster_ms"], v["host_local_ms"]
        met = "met" if v["ratio"] <= GOALS[k] and (k != "c" or (v["unique"] and not v["pool_full_lines"])) else "MISSED"
        print(f"({k}) {labels[k]:28s} cluster IPAM {cl:7.1f} ms / host-local {hl:7.1f} ms = {v['ratio']:.3f}"
              f"   goal <= {GOALS[k]}: {met}{extra}")  # fmt: skip
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
