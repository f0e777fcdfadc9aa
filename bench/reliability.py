#!/usr/bin/env python3
"""Reliability under load (root): the figures of docs/reliability.md.

  burst      N containers on three networks (a bridge default, two macvlans) ADDed, then DELed, C at a time
             through the real shim (a node drain on a big node): how many answers were code 11 (goal: none),
             latency p50/p95, and the daemon's peak RSS and thread count while it happened.
  slowloris  ADD+DEL of one container through the shim, median of R, while another process keeps 1,000
             connections open that send nothing (reopening any the daemon closes) / the same without them
             (goal: about 1.0).

The daemon is a process of its own (`netcomp daemon`) in a network namespace this script makes
(tests/lab/procdaemon.py); everything is removed at the end.
Usage: sudo bench/reliability.py [burst|slowloris|all] [--containers 300] [--concurrency 96] [--runs 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.lab.daemonlab import intent  # noqa: E402
from tests.lab.netlab import Lab, ip  # noqa: E402
from tests.lab.procdaemon import ProcNode, proc_node  # noqa: E402


def big_networks(base: Path, lb: Lab) -> None:
    """The lab's networks with /16 subnets (room for thousands of containers), and nothing else."""
    nets = base / "networks.d"
    for f in nets.glob("*.yaml"):
        f.unlink()
    conf = json.loads((base / "static.d" / "lab-bridge.conflist").read_text())
    conf["plugins"][0]["ipam"]["subnet"] = "10.140.0.0/16"
    conf["plugins"][0]["ipam"].pop("routes", None)
    (base / "static.d" / "lab-bridge.conflist").write_text(json.dumps(conf))
    (nets / "10-mgmt.yaml").write_text(intent("mgmt", "{type: static, networkID: lab-bridge}"))
    for name, subnet in (("storage", "10.141.0.0/16"), ("backup", "10.142.0.0/16")):
        (nets / f"20-{name}.yaml").write_text(
            intent(
                name,
                f"{{type: macvlan, hostDevice: {lb.master}, ipam: {{type: host-local, dataDir: {base}/ipam, "
                f"subnet: {subnet}}}}}",
            )
        )


class Sampler:
    """The daemon's RSS (MiB) and threads, every 0.2 s, at their peaks."""

    def __init__(self, node: ProcNode) -> None:
        self.node = node
        self.rss = self.threads = 0.0
        self.stop = threading.Event()
        self.t = threading.Thread(target=self.run)
        self.t.start()

    def run(self) -> None:
        while not self.stop.wait(0.2):
            proc = self.node.proc
            if proc is None:
                continue
            try:
                status = Path(f"/proc/{proc.pid}/status").read_text()
            except OSError:
                continue
            fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
            self.rss = max(self.rss, int(fields["VmRSS"].split()[0]) / 1024)
            self.threads = max(self.threads, int(fields["Threads"]))

    def done(self) -> tuple[float, float]:
        self.stop.set()
        self.t.join()
        return self.rss, self.threads


def _phase(node: ProcNode, verb: str, ctrs: list[str], concurrency: int) -> dict[str, object]:
    def one(c: str) -> tuple[int, object, float]:
        t = time.perf_counter()
        rc, res = node.shim(verb, c, args="NETCOMP_NETWORKS=storage,backup" if verb == "ADD" else "")
        return rc, res, time.perf_counter() - t

    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        out = list(pool.map(one, ctrs))
    wall = time.perf_counter() - t0
    lat = sorted(x[2] for x in out)
    codes: dict[str, int] = {}
    for rc, res, _ in out:
        key = "ok" if rc == 0 else f"code {res.get('code') if isinstance(res, dict) else '?'}"
        codes[key] = codes.get(key, 0) + 1
    return {
        "answers": codes,
        "p50_s": round(statistics.median(lat), 2),
        "p95_s": round(lat[int(len(lat) * 0.95) - 1], 2),
        "wall_s": round(wall, 1),
    }


def burst(containers: int, concurrency: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="netcomp-burst-") as d, proc_node(Path(d), setup=big_networks) as node:
        ctrs = [node.lab.container() for _ in range(containers)]
        sampler = Sampler(node)
        add = _phase(node, "ADD", ctrs, concurrency)
        dele = _phase(node, "DEL", ctrs, concurrency)
        rss, threads = sampler.done()
        leftovers = len(node.leases()) + len(node.cache_files())
        leftovers += sum(1 for c in ctrs for i in node.lab.links(c) if i != "lo")
        return {
            "containers": containers,
            "networksEach": 3,
            "concurrency": concurrency,
            "ADD": add,
            "DEL": dele,
            "daemonPeakRssMiB": round(rss, 1),
            "daemonPeakThreads": int(threads),
            "leftovers": leftovers,
        }


ATTACKER = """
import select, socket, sys, time
path, n, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
end, opened, conns = time.monotonic() + seconds, 0, {}
def connect():
    global opened
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    conns[s.fileno()] = s
    opened += 1
for _ in range(n):
    connect()
print("ready", flush=True)
poller = select.poll()
for fd in conns:
    poller.register(fd, select.POLLIN)
while time.monotonic() < end:
    # a connection the daemon answered (refused at once, or closed after headerTimeout) is opened again, once a
    # second at most: a slowloris keeps its 1,000 connections, it does not flood
    for fd, _ in poller.poll(1000):
        poller.unregister(fd)
        conns.pop(fd).close()
    while len(conns) < n:
        connect()
        poller.register(max(conns), select.POLLIN)
    time.sleep(1)
print(opened)
"""


def slowloris(runs: int) -> dict[str, object]:
    import resource

    with tempfile.TemporaryDirectory(prefix="netcomp-slow-") as d, proc_node(Path(d)) as node:

        def add_del() -> float:
            c = node.lab.container()
            t = time.perf_counter()
            assert node.shim("ADD", c)[0] == 0
            assert node.shim("DEL", c)[0] == 0
            took = time.perf_counter() - t
            ip("netns", "del", c)
            node.lab.containers.remove(c)
            return took

        add_del()  # warm up
        quiet = [add_del() for _ in range(runs)]
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        attacker = subprocess.Popen(
            [sys.executable, "-c", ATTACKER, node.sock, "1000", "3600"],
            stdout=subprocess.PIPE,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard)),
        )
        try:
            assert attacker.stdout is not None and attacker.stdout.readline() == b"ready\n"
            attacked = [add_del() for _ in range(runs)]
        finally:
            attacker.kill()
            attacker.wait()
        q, a = statistics.median(quiet), statistics.median(attacked)
        return {
            "runs": runs,
            "addDelQuietMs": round(q * 1000, 1),
            "addDelUnderAttackMs": round(a * 1000, 1),
            "ratio": round(a / q, 2),
        }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", nargs="?", default="all", choices=("burst", "slowloris", "all"))
    p.add_argument("--containers", type=int, default=300)
    p.add_argument("--concurrency", type=int, default=96)
    p.add_argument("--runs", type=int, default=20)
    a = p.parse_args()
    out: dict[str, object] = {}
    if a.what in ("burst", "all"):
        out["burst"] = burst(a.containers, a.concurrency)
    if a.what in ("slowloris", "all"):
        out["slowloris"] = slowloris(a.runs)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
