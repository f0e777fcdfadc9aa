#!/usr/bin/env python3
"""Pod start on a real node, side by side (root). The test node (tests/lab/kubenode.py: the kubelet and
containerd in namespaces of their own, registered with a kube-apiserver this script starts on 127.0.0.1) runs
plain pods on one bridge+host-local network two ways in one run: through netcomp (containerd's conf_dir holds the
conflist netcomp's daemon wrote, so containerd execs the shim and the daemon runs the bridge conflist as the
node's default network, writing network-status after) and with containerd running the same bridge conflist
itself (conf_dir holds that conflist). conf_dir is switched between measurements; containerd reloads it, and the
switch is awaited through its CRI status. One warm-up pod each way first.

Also printed: the CPU time netcomp's daemon and the plugins it ran took per pod (ADD, DEL, network-status and
the event written), from /proc, and the median of the ADDs the daemon logged.

A measurement: n pods posted at once, timed from the first POST until a watch has seen the last of them Running;
then they are deleted, and the next measurement starts once nothing of them is left: the kubelet has stopped their
sandboxes (their CNI DEL done), the bench has removed them through the CRI (the kubelet's container GC would,
within a minute), the kubelet has removed the pods from the API server. A measurement run during another's cleanup
is slower (docs/benchmarks.md), so none is. Within a round each size is measured four times, netcomp, containerd,
containerd, netcomp, which cancels a load that grows or falls steadily. The kubelet sees a container start at its
next relist (PLEG, once a second): one pod's time varies by up to a second from one measurement to the next,
whichever way it is started. The load average of the machine is printed at the start and the end (other work on it
is noise in both ways).

  all n Running: through netcomp / containerd running the bridge itself, medians     goal <= 1.05 for 10 at once

Usage: sudo bench/node.py [--rounds 3] [--sizes 1,10,30] [--no-writes]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.lab import nodepods  # noqa: E402
from tests.lab.kubeapi import api_server  # noqa: E402
from tests.lab.kubenode import KubeNode, bridge_conflist, kube_node  # noqa: E402

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


def daemon_cpu(node: KubeNode) -> float:
    """CPU seconds netcomp's daemon has used, its plugins (reaped children) included (proc(5): utime, stime,
    cutime, cstime)."""
    fields = Path(f"/proc/{node.ns.procs['netcomp'].pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def add_times(log: Path, offset: int) -> tuple[list[float], int]:
    """The durations (ms) of the CNI ADDs the daemon logged after `offset` of its log, and the log's end."""
    with open(log, "rb") as f:
        f.seek(offset)
        text = f.read()
    found = [float(m) for m in re.findall(rb"CNI ADD .* ok in ([0-9.]+) ms", text)]
    return found, offset + len(text)


@dataclass
class Measured:
    every: float  # seconds from the first POST until all were Running
    each: float  # median seconds from a pod's POST until it was Running
    pods: list[Any]


def start(node: KubeNode, names: list[str]) -> Measured:
    """POST the pods at once, wait until all are Running, delete them and wait until nothing of them is left."""
    api = nodepods.core(node)
    posted = {}
    for n in names:
        posted[n] = time.perf_counter()
        api.create_namespaced_pod(nodepods.NAMESPACE, nodepods.manifest(node, n))
    got = nodepods.wait_running(node, names, timeout=300)
    every = max(when for _, when in got.values()) - min(posted.values())
    each = statistics.median(when - posted[n] for n, (_, when) in got.items())
    pods = [p for p, _ in got.values()]
    nodepods.delete(node, pods)
    # Removed now, as the kubelet's container GC would within a minute: until then the kubelet stops each stopped
    # sandbox again now and then, and containerd runs a CNI DEL each time, through whichever way conf_dir names by
    # then (a cheap no-op through netcomp, the bridge and host-local plugins run directly).
    for p in pods:
        for sid in node.cri.sandbox_ids(**{"io.kubernetes.pod.uid": p.metadata.uid}):
            node.cri.remove(sid)
    nodepods.gone(node, pods)
    return Measured(every, each, pods)


@contextlib.contextmanager
def node_lab(settings: dict[str, Any]) -> Iterator[KubeNode]:
    with (
        tempfile.TemporaryDirectory(prefix="netcomp-bench-node-") as d,
        api_server(Path(d) / "kube") as api,
        kube_node(Path(d) / "node", api, device_plugin=False, settings=settings) as node,
    ):
        yield node


def main() -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--sizes", default="1,10,30", help="pods posted at once, comma-separated")
    p.add_argument("--no-writes", action="store_true", help="netcomp writes neither network-status nor events")
    a = p.parse_args()
    writes = {"kubernetes": {"networkStatus": False, "events": False}} if a.no_writes else {}
    sizes = [int(s) for s in a.sizes.split(",")]
    runs: dict[tuple[str, int], list[Measured]] = {(w, n): [] for w in WAYS for n in sizes}
    cpu: dict[int, list[float]] = {n: [] for n in sizes}  # the daemon's CPU seconds per pod
    adds: dict[int, list[float]] = {n: [] for n in sizes}  # the daemon's ADDs, ms
    with node_lab(writes) as node:
        log = node.ns.base / "logs" / "netcomp.log"
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
                    cpu0, (_, offset) = daemon_cpu(node), add_times(log, 0)
                    m = start(node, names(n))
                    if way == "netcomp":
                        cpu[n].append((daemon_cpu(node) - cpu0) / n)
                        adds[n] += add_times(log, offset)[0]
                    runs[(way, n)].append(m)
                    print(f"round {r + 1} {n:3d} pods {way:10s} all Running {m.every:6.2f} s", file=sys.stderr)
        use(node, "netcomp")
    out: dict[str, Any] = {"loadavg_start": load, "loadavg_end": os.getloadavg()[0]}
    for n in sizes:
        nc, ct = (statistics.median(m.every for m in runs[(w, n)]) for w in WAYS)
        nc1, ct1 = (statistics.median(m.each for m in runs[(w, n)]) for w in WAYS)
        out[str(n)] = {
            "netcomp_s": round(nc, 2),
            "containerd_s": round(ct, 2),
            "ratio": round(nc / ct, 3),
            "pod_median_netcomp_s": round(nc1, 2),
            "pod_median_containerd_s": round(ct1, 2),
            "add_median_ms": round(statistics.median(adds[n]), 1),
            "daemon_cpu_ms_per_pod": round(statistics.median(cpu[n]) * 1000),
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
