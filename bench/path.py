#!/usr/bin/env python3
"""One ADD's path through the daemon, measured (root): a single-network ADD (the lab's default network, a bridge
with host-local) through the shim to a daemon running in this process, as tests/lab/daemonlab.py runs it.

Prints, for the first plugin the ADD spawns:
- the frames of netcomp's own code on the stack, from the loop's read of the request to posix_spawn: those on
  the loop's thread when it read the request, then those on the thread that spawned the plugin, each with its
  package; how many times the path crosses from one package of netcomp to another; and the threads it ran on
  (a hand-off is a change of thread);
- the context switches and CPU time of the daemon's threads per ADD and per DEL (/proc/self/task/*/status
  and schedstat around each request, the median of --rounds): those a thread asked for by waiting (the code's),
  and those the kernel took by preempting it (the machine's load's), apart.
Usage: sudo bench/path.py [--rounds N]"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from netcomp.cni import spawn  # noqa: E402
from netcomp.daemon.server import loop as loopmod  # noqa: E402
from tests.lab.daemonlab import daemon_lab  # noqa: E402

PACKAGE = str(ROOT / "netcomp") + "/"


def own(stack: traceback.StackSummary) -> list[tuple[str, str]]:
    """The frames of netcomp's code, outermost first, as (module path, function)."""
    return [(f.filename[len(PACKAGE) :], f.name) for f in stack if f.filename.startswith(PACKAGE)]


def package(path: str) -> str:
    return path.split("/")[0] if "/" in path else path.removesuffix(".py")


def per_thread() -> dict[str, int]:
    """Context switches by thread name (its comm), the daemon's threads only; those the thread did not ask for
    (it was preempted) apart, as "name(preempted)"."""
    out: dict[str, int] = {}
    main = str(threading.main_thread().native_id)
    names = {str(t.native_id): t.name.rstrip("0123456789_") for t in threading.enumerate()}
    for task in Path("/proc/self/task").iterdir():
        if task.name == main:
            continue
        try:
            name = names.get(task.name, "?")
            status = (task / "status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if "ctxt_switches" in line:
                key = name if line.startswith("voluntary") else f"{name}(preempted)"
                out[key] = out.get(key, 0) + int(line.split()[1])
    return out


def switches_and_cpu() -> tuple[int, int, int]:
    """Context switches the daemon's threads asked for (they waited), those they did not (preempted), and their
    CPU nanoseconds: every thread of this process but the main one, which only runs the shim and waits for it."""
    asked = preempted = cpu = 0
    main = str(threading.main_thread().native_id)
    for task in Path("/proc/self/task").iterdir():
        if task.name == main:
            continue
        try:
            status = (task / "status").read_text()
            run_ns = int((task / "schedstat").read_text().split()[0])
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("voluntary_ctxt_switches"):
                asked += int(line.split()[1])
            elif line.startswith("nonvoluntary_ctxt_switches"):
                preempted += int(line.split()[1])
        cpu += run_ns
    return asked, preempted, cpu


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    seen: dict[str, object] = {}
    real_spawn, real_readable = spawn.posix_spawn, loopmod.Loop._readable

    def spawned(*a: object, **k: object) -> int:
        env = a[2] if len(a) > 2 else k.get("env")
        if "spawn" not in seen and "CNI_COMMAND" in str(env) and "ADD" in str(env):  # the plugin's ADD itself
            seen["spawn"] = (threading.current_thread().name, own(traceback.extract_stack()))
        return real_spawn(*a, **k)  # type: ignore[arg-type]

    def readable(self: loopmod.Loop, c: object) -> None:
        if "read" not in seen:
            seen["read"] = (threading.current_thread().name, own(traceback.extract_stack()))
        real_readable(self, c)  # type: ignore[arg-type]

    spawn.posix_spawn = spawned  # type: ignore[assignment]
    loopmod.Loop._readable = readable  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory() as tmp, daemon_lab(Path(tmp)) as dl:
        netns = dl.lab.container()
        rc, out = dl.shim("ADD", "path-0", netns=f"/var/run/netns/{netns}")
        assert rc == 0, out
        dl.settled()
        dl.shim("DEL", "path-0", netns=f"/var/run/netns/{netns}")
        dl.settled()
        costs: dict[str, list[tuple[int, int, int]]] = {"ADD": [], "DEL": []}
        by_thread: dict[str, dict[str, list[int]]] = {"ADD": {}, "DEL": {}}
        for i in range(args.rounds):
            for verb in ("ADD", "DEL"):
                threads, before = per_thread(), switches_and_cpu()
                rc, out = dl.shim(verb, f"path-{i + 1}", netns=f"/var/run/netns/{netns}")
                dl.settled()
                after, threads_after = switches_and_cpu(), per_thread()
                for name, n in threads_after.items():
                    by_thread[verb].setdefault(name, []).append(n - threads.get(name, 0))
                assert rc == 0, out
                costs[verb].append(tuple(a - b for a, b in zip(after, before, strict=True)))  # type: ignore[arg-type]
    read_thread, read_frames = seen["read"]  # type: ignore[misc]
    spawn_thread, spawn_frames = seen["spawn"]  # type: ignore[misc]
    path = [(read_thread, f) for f in read_frames] + [(spawn_thread, f) for f in spawn_frames]
    print(f"{len(path)} frames of netcomp's code from the read to posix_spawn:")
    crossings, last = 0, None
    for thread, (where, fn) in path:
        pkg = package(where)
        crossings += last is not None and pkg != last
        last = pkg
        print(f"  {thread:<20} {where}:{fn}")
    threads = list(dict.fromkeys(t for t, _ in path))
    print(f"package crossings: {crossings}; threads: {' -> '.join(threads)}")
    for verb, got in costs.items():
        asked, preempted = (statistics.median(c[i] for c in got) for i in (0, 1))
        cpu = statistics.median(c[2] for c in got) / 1e6
        print(
            f"{verb}: {asked + preempted:g} context switches ({asked:g} waits, {preempted:g} preempted), "
            f"{cpu:.2f} ms of CPU in the daemon's threads (median of {len(got)})"
        )
        shown = {t: statistics.median(v) for t, v in by_thread[verb].items() if statistics.median(v)}
        by_count = sorted(shown.items(), key=lambda x: -x[1])
        print("  by thread:", ", ".join(f"{t} {n:g}" for t, n in by_count))


if __name__ == "__main__":
    main()
