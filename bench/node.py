#!/usr/bin/env python3
"""Pod start on a real node, side by side (root). The test node (tests/integration/kubenode.py: the kubelet and
containerd in namespaces of their own, registered with a kube-apiserver this script starts on 127.0.0.1) runs
plain pods on one bridge+host-local network two ways in one run: through netcomp (containerd's conf_dir holds the
conflist netcomp's daemon wrote, so containerd execs the shim and the daemon runs the bridge conflist as the
node's default network, writing network-status after) and with containerd running the same bridge conflist
itself (conf_dir holds that conflist). conf_dir is switched between measurements; containerd reloads it, and the
switch is awaited through its CRI status. For each round and size both ways are measured in turn (which one
first alternates by round), after one warm-up pod each.

A measurement: n pods posted at once, timed from the first POST until a watch has seen the last of them Running;
then they are deleted, and the next measurement starts once the API server, containerd and the kubelet have
nothing of them left (kubelet 1.20 removes some only at its container GC, once a minute: a run takes minutes),
so that no cleanup of one measurement runs during the next. Within a round each size is measured four times,
netcomp, containerd, containerd, netcomp, which cancels a load that grows or falls steadily; the load average of
the machine is printed at the start and the end (other work on it shows as noise in both ways).

  all n Running: through netcomp / containerd running the bridge itself, medians     goal <= 1.05 for 10 at once

Usage: sudo bench/node.py [--rounds 2] [--sizes 1,10,30]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.integration import nodepods  # noqa: E402
from tests.integration.kubeapi import api_server  # noqa: E402
from tests.integration.kubenode import KubeNode, bridge_conflist, kube_node  # noqa: E402

NETCOMP_CONF = "00-netcomp.conflist"
BRIDGE_CONF = "10-lab-bridge.conflist"
WAYS = ("netcomp", "containerd")


def use(node: KubeNode, way: str) -> None:
    """containerd's conf_dir holds netcomp's conflist, or the bridge conflist; returns once containerd gives pods
    that network. The other file is put in place before this one goes, so conf_dir is never empty."""
    conf, stash = node.cni_conf_dir, node.base / "cni" / "stash"
    stash.mkdir(exist_ok=True)
    if way == "containerd":
        tmp = conf / f".{BRIDGE_CONF}.tmp"  # not a name containerd loads
        tmp.write_text(json.dumps(bridge_conflist(node.hostlocal_dir)))
        os.replace(tmp, conf / BRIDGE_CONF)
        if (conf / NETCOMP_CONF).exists():
            os.replace(conf / NETCOMP_CONF, stash / NETCOMP_CONF)
        want = "lab-bridge"
    else:
        if (stash / NETCOMP_CONF).exists():
            os.replace(stash / NETCOMP_CONF, conf / NETCOMP_CONF)
        (conf / BRIDGE_CONF).unlink(missing_ok=True)
        want = "netcomp"
    deadline = time.monotonic() + 60
    while node.cri.cni_network() != want:
        if time.monotonic() > deadline:
            raise RuntimeError(f"containerd did not load {want} in 60 s")
        time.sleep(0.1)  # containerd reloading its CNI config: polled with a deadline


def start(node: KubeNode, names: list[str]) -> tuple[float, float]:
    """POST the pods at once; (seconds until all were Running, median seconds until one was); then delete them
    and wait until nothing of them is left."""
    api = nodepods.core(node)
    posted = {}
    for n in names:
        posted[n] = time.perf_counter()
        api.create_namespaced_pod(nodepods.NAMESPACE, nodepods.manifest(node, n))
    got = nodepods.wait_running(node, names, timeout=300)
    t0 = min(posted.values())
    every = max(when for _, when in got.values()) - t0
    each = statistics.median(when - posted[n] for n, (_, when) in got.items())
    pods = [p for p, _ in got.values()]
    nodepods.delete(node, pods)
    nodepods.gone(node, pods)
    return every, each


@contextlib.contextmanager
def node_lab() -> Iterator[KubeNode]:
    with (
        tempfile.TemporaryDirectory(prefix="netcomp-bench-node-") as d,
        api_server(Path(d) / "kube") as api,
        kube_node(Path(d) / "node", api, device_plugin=False) as node,
    ):
        yield node


def main() -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--sizes", default="1,10,30", help="pods posted at once, comma-separated")
    a = p.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    every: dict[tuple[str, int], list[float]] = {(w, n): [] for w in WAYS for n in sizes}
    each: dict[tuple[str, int], list[float]] = {(w, n): [] for w in WAYS for n in sizes}
    with node_lab() as node:
        count = 0

        def names(n: int) -> list[str]:
            nonlocal count
            count += 1
            return [f"b{count}-{i}" for i in range(n)]

        for way in WAYS:
            use(node, way)
            start(node, names(1))  # warm-up: the first sandbox of a way
        load = os.getloadavg()[0]
        for r in range(a.rounds):
            for n in sizes:
                for way in (*WAYS, *WAYS[::-1]):
                    use(node, way)
                    t_every, t_each = start(node, names(n))
                    every[(way, n)].append(t_every)
                    each[(way, n)].append(t_each)
                    print(f"round {r + 1} {n:3d} pods {way:10s} all Running {t_every:6.2f} s", file=sys.stderr)
        use(node, "netcomp")
    out: dict[str, Any] = {"loadavg_start": load, "loadavg_end": os.getloadavg()[0]}
    for n in sizes:
        nc, ct = (statistics.median(every[(w, n)]) for w in WAYS)
        nc1, ct1 = (statistics.median(each[(w, n)]) for w in WAYS)
        out[str(n)] = {
            "netcomp_s": round(nc, 2),
            "containerd_s": round(ct, 2),
            "ratio": round(nc / ct, 3),
            "pod_median_netcomp_s": round(nc1, 2),
            "pod_median_containerd_s": round(ct1, 2),
        }
    print(json.dumps(out))
    for n in sizes:
        o = out[str(n)]
        goal = "   (goal <= 1.05)" if n == 10 else ""
        print(
            f"{n:3d} at once: all Running through netcomp {o['netcomp_s']:6.2f} s / containerd's own bridge "
            f"{o['containerd_s']:6.2f} s = {o['ratio']:.3f}{goal}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
