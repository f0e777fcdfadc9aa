#!/usr/bin/env python3
"""Cluster-wide addresses: what claiming an address on the API server costs an ADD (root). Prints, for one node
and for three nodes ADDing at once (all against one local kube-apiserver, each node a daemon of its own in a lab
netns with the real plugins):

  ADD through the shim of a macvlan network with `ipam: {type: cluster}` (the daemon claims an AddressClaim, the
  static plugin applies it) / the same ADD with `ipam: {type: host-local}`, medians, interleaved   goal <= 1.3

Everything runs against a kube-apiserver and etcd this script starts on 127.0.0.1 (tests/integration/kubeapi.py)
and is removed at the end. Usage: sudo bench/ipam.py [--runs 30]
"""

from __future__ import annotations

import argparse
import contextlib
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
from tests.integration.daemonlab import DaemonLab, daemon_lab, intent  # noqa: E402
from tests.integration.kubeapi import api_server  # noqa: E402


def networks(base: Path, master: str, subnet: str) -> None:
    d = base / "networks.d"
    d.mkdir(parents=True, exist_ok=True)
    for name, ipam in (
        ("cl", f"{{type: cluster, subnet: {subnet}.0/22}}"),
        ("hl", f"{{type: host-local, dataDir: {base}/ipam, subnet: {subnet}.0/22}}"),
    ):
        (d / f"90-{name}.yaml").write_text(intent(name, f"{{type: macvlan, hostDevice: {master}, ipam: {ipam}}}"))


def one_round(dl: DaemonLab, network: str) -> float:
    ctr = dl.lab.container()
    t = time.perf_counter()
    rc, res = dl.shim("ADD", ctr, args=f"NETCOMP_NETWORKS={network}", ready_timeout=30)
    took = time.perf_counter() - t
    assert rc == 0, res
    assert dl.shim("DEL", ctr, ready_timeout=30)[0] == 0
    return took


def measure(labs: list[DaemonLab], runs: int) -> dict[str, float]:
    """Each node ADDs (and DELs) runs times per network, cluster and host-local interleaved; all nodes at once."""

    def node(dl: DaemonLab) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {"cl": [], "hl": []}
        one_round(dl, "cl"), one_round(dl, "hl")  # warm up
        for _ in range(runs):
            for net in ("cl", "hl"):
                out[net].append(one_round(dl, net))
        return out

    with ThreadPoolExecutor(len(labs)) as pool:
        per_node = list(pool.map(node, labs))
    cl = statistics.median([x for n in per_node for x in n["cl"]]) * 1000
    hl = statistics.median([x for n in per_node for x in n["hl"]]) * 1000
    return {"cluster_ms": round(cl, 1), "host_local_ms": round(hl, 1), "ratio": round(cl / hl, 2)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=30)
    a = p.parse_args()
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="netcomp-bench-ipam-") as d, api_server(Path(d) / "kube") as api:
        for count in (1, 3):
            with contextlib.ExitStack() as stack:
                labs = []
                for i in range(count):
                    base = Path(d) / f"n{count}-{i}"
                    base.mkdir()
                    kube = KubeSettings(kubeconfig=str(api.node_kubeconfig), timeout=10, networks=False)
                    extra = {"kubernetes": kube, "nodeName": f"node-{i}", "defaultNetwork": None,
                             "clusterIntentDir": str(base / "cluster.d")}  # fmt: skip
                    dl = stack.enter_context(daemon_lab(base, extra=extra))
                    networks(base, dl.lab.master, f"10.{120 + count}.{4 * i}")
                    dl.daemon.reload()
                    labs.append(dl)
                out[f"{count} node{'s' if count > 1 else ''}"] = measure(labs, a.runs)
    for k, v in out.items():
        print(f"{k:8s} ADD with cluster IPAM {v['cluster_ms']:6.1f} ms / with host-local {v['host_local_ms']:6.1f} ms"
              f" = {v['ratio']:.2f}   (goal <= 1.3)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
