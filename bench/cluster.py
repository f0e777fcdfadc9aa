#!/usr/bin/env python3
"""What a cluster costs an ADD+DEL (root; the pod lookup off the hot path). Two daemons in one run,
each in a lab netns of its own with the real plugins, both serving one bridge+host-local default network through
the compiled shim: one with `kubernetes:` configured against a local kube-apiserver (it follows the node's pods,
reads each ADD's pod from that watch, writes network-status and an AddedInterface event after answering), one
without. Interleaved; the cluster daemon's queued writes are let finish before each round of the other, so they
slow only the daemon that makes them.

  ADD+DEL of a pod's sandbox, cluster configured / the same without, medians                   goal <= 1.05

Also printed: where the ADDs' pods came from (the watch, or a GET) and the writes that failed. Everything runs
against a kube-apiserver and etcd this script starts on 127.0.0.1 (tests/lab/kubeapi.py) and is removed
at the end. Usage: sudo bench/cluster.py [--runs 40]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from netcomp.settings import KubeSettings  # noqa: E402
from netcomp.shim import install as shimbuild  # noqa: E402
from tests.lab.daemonlab import DaemonLab, daemon_lab  # noqa: E402
from tests.lab.kubeapi import api_server  # noqa: E402
from tests.lab.netlab import PLUGIN_DIR  # noqa: E402

NODE = "bench-node"


def shim(exe: Path, dl: DaemonLab, command: str, ctr: str, pod: str) -> None:
    conf = {"cniVersion": "1.0.0", "name": "netcomp", "type": "netcomp", "socket": dl.sock, "readyTimeout": 30}
    env = {
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": f"ctr-{ctr}",
        "CNI_IFNAME": "eth0",
        "CNI_NETNS": f"/var/run/netns/{ctr}",
        "CNI_ARGS": f"IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={pod};K8S_POD_INFRA_CONTAINER_ID={ctr}",
        "CNI_PATH": PLUGIN_DIR,
    }
    p = subprocess.run([str(exe)], input=json.dumps(conf).encode(), env=env, capture_output=True, timeout=60)
    if p.returncode != 0:
        raise RuntimeError(f"{command} failed: {p.stdout.decode()} {p.stderr.decode()}")


def round_trip(exe: Path, dl: DaemonLab, pod: str) -> float:
    ctr = dl.lab.container()
    t = time.perf_counter()
    shim(exe, dl, "ADD", ctr, pod)
    shim(exe, dl, "DEL", ctr, pod)
    return time.perf_counter() - t


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=40)
    p.add_argument("--no-writes", action="store_true", help="neither network-status nor events (to see their cost)")
    a = p.parse_args()
    warm = 5
    with tempfile.TemporaryDirectory(prefix="netcomp-bench-cluster-") as d, api_server(Path(d) / "kube") as api:
        exe = Path(d) / "netcomp-shim"
        shimbuild.build(exe, shimbuild.find_cc() or "cc")
        from kubernetes import client, config

        core = client.CoreV1Api(config.new_client_from_config(config_file=str(api.admin_kubeconfig)))
        pods = [f"bench-{i}" for i in range(warm + a.runs)]
        for name in pods:
            core.create_namespaced_pod(
                "default",
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": name},
                    "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "registry.invalid/none"}]},
                },
            )
        with contextlib.ExitStack() as stack:
            writes = {"networkStatus": False, "events": False} if a.no_writes else {}
            kube = KubeSettings(kubeconfig=str(api.node_kubeconfig), timeout=10, networks=False, **writes)
            (Path(d) / "cl").mkdir()
            (Path(d) / "plain").mkdir()
            cl = stack.enter_context(
                daemon_lab(
                    Path(d) / "cl",
                    extra={"kubernetes": kube, "nodeName": NODE, "clusterIntentDir": str(Path(d) / "cl" / "cluster.d")},
                )
            )
            plain = stack.enter_context(daemon_lab(Path(d) / "plain"))
            assert cl.daemon.cluster is not None
            watch = cl.daemon.cluster.pods
            with watch.changed:
                if not watch.changed.wait_for(lambda: all(watch.has("default", n) for n in pods), 60):
                    raise RuntimeError("the pod watch did not deliver the pods in 60 s")
            times: dict[str, list[float]] = {"cluster": [], "plain": []}
            for i, name in enumerate(pods):
                t_cl = round_trip(exe, cl, name)
                watch.flush(30)  # the cluster daemon's writes done: they must not slow the other one
                t_plain = round_trip(exe, plain, name)
                if i >= warm:
                    times["cluster"].append(t_cl)
                    times["plain"].append(t_plain)
            watch.flush(30)
            m = cl.daemon.metrics
            lookups = {s: m.pod_lookups.labels(s).value() for s in ("watch", "api")}
            errors = {op: m.kube_errors.labels(op).value() for op in ("read", "patch", "event", "dropped")}
            statuses = sum(
                1
                for name in pods
                if "k8s.v1.cni.cncf.io/network-status"
                in (core.read_namespaced_pod(name, "default").metadata.annotations or {})
            )
    cl_ms = statistics.median(times["cluster"]) * 1000
    plain_ms = statistics.median(times["plain"]) * 1000
    out: dict[str, Any] = {
        "cluster_ms": round(cl_ms, 1),
        "plain_ms": round(plain_ms, 1),
        "ratio": round(cl_ms / plain_ms, 3),
        "pod_lookups": lookups,
        "failed_writes": errors,
        "network_status_written": f"{statuses}/{len(pods)}",
    }
    print(json.dumps(out))
    print(
        f"ADD+DEL with a cluster {cl_ms:6.1f} ms / without {plain_ms:6.1f} ms = {cl_ms / plain_ms:.3f}   (goal <= 1.05)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
