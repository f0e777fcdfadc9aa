#!/usr/bin/env python3
"""How the daemon execs a plugin: netcomp.cni.invoke.real_exec (posix_spawn and one poll loop) against
subprocess.run with the same pipes, environment and timeout (what it used before), interleaved in one run.
Prints per exec the parent's CPU (user + system, from getrusage: what the daemon pays) and the wall time, and
the ratios ours / subprocess. The plugin is the loopback plugin's VERSION (a real Go plugin that does no
networking, so the exec itself is what is measured). Needs no root.
Usage: bench/spawn.py [--runs N]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from netcomp.cni.invoke import SAFE_PATH, real_exec

PLUGIN = "/usr/lib/cni/loopback"
ENV = {"CNI_COMMAND": "VERSION", "CNI_PATH": "/usr/lib/cni", "PATH": SAFE_PATH}
STDIN = b'{"cniVersion":"1.0.0","name":"x","type":"loopback"}'


def with_subprocess() -> bytes:
    p = subprocess.run([PLUGIN], input=STDIN, env=ENV, capture_output=True, timeout=60, check=False, close_fds=True)
    return p.stdout


def with_real_exec() -> bytes:
    return real_exec([PLUGIN], ENV, STDIN, 60).stdout


def measure(fn: Callable[[], bytes], n: int) -> tuple[float, float]:
    """(parent CPU ms, wall ms) per exec over n execs."""
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    for _ in range(n):
        if b"supportedVersions" not in fn():
            raise SystemExit("the plugin did not answer VERSION")
    r1, t1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return cpu / n * 1000, (t1 - t0) / n * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=20, help="rounds of 20 execs each way")
    args = ap.parse_args()
    ours: list[tuple[float, float]] = []
    base: list[tuple[float, float]] = []
    for _ in range(args.runs):
        base.append(measure(with_subprocess, 20))
        ours.append(measure(with_real_exec, 20))
    print(f"plugin exec, {time.strftime('%Y-%m-%d')}, medians of {args.runs} rounds of 20 (ms per exec)")
    for i, what in ((0, "daemon CPU"), (1, "wall")):
        o, b = statistics.median(x[i] for x in ours), statistics.median(x[i] for x in base)
        print(f"  {what:10s} real_exec {o:6.3f} / subprocess.run {b:6.3f} = {o / b:5.2f}")


if __name__ == "__main__":
    main()
