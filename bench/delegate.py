#!/usr/bin/env python3
"""Delegation benchmark (root). Both shims in one run, interleaved: the compiled shim (netcomp/shim/netcomp-shim.c,
built as `netcomp install-shim` builds it) and the Python shim (plugin.py behind its launcher, byte-compiled, as
install-shim installs it where there is no compiler). Prints ratios against baselines measured in the same run;
the goals (issue 14) are the compiled shim's:

  (a) ADD+DEL of one bridge+host-local network through shim+daemon / the same delegate exec'd directly   <= 1.20
  (b) a container joining three networks (ADD) / the three delegates exec'd one after another directly   <= 0.75
  (c) shim start (CNI_COMMAND=VERSION) / /bin/true (the Python shim: / /usr/bin/python3 -I -S -c pass)   <= 1.5
  (d) 16 containers ADD at once, wall time / the same 16 direct execs at once                             <= 1.25

(e), no goal set: a container on three networks leaving them (DEL) / the three DELs direct, one after another;
and, for reading them, (a0) (b0) (d0): the same work with a daemon that costs nothing, the floor of each ratio
here: that shim's start (its VERSION, answered without the daemon) in place of each shim call, then the delegates
exec'd directly, in parallel where the daemon runs them so. A floor over a goal means no daemon can meet it on
this machine with that shim.

In (a), (a0) and (e) each DEL is made SETTLE (0.1 s, untimed) after its ADD on both sides, as a runtime's is
(see SETTLE). (a-) reads (a) with each DEL right after its ADD, as this benchmark measured (a) until session 9.
Every program is exec'd the one way, the way the direct delegates are: netcomp's runner (cni/invoke.real_exec),
the shims and the baselines of (c) too, so that an exec costs the same on both sides of a ratio. (a~) reads (a-)
with the shims exec'd by subprocess.run, as this benchmark did until session 9 (the direct side by the runner):
that charged each shim call about 1 ms the direct delegates did not pay.

Everything runs inside a network namespace the benchmark makes (a veth pair as macvlan master), with the daemon
started as `netcomp daemon --root TMP` in it; all is removed at the end.
Usage: sudo bench/delegate.py [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PY = "/usr/bin/python3"
NC = str(Path(sys.executable).parent / "netcomp")
PLUGINS = "/usr/lib/cni"


def sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=60)


def veth_up(name: str, peer: str) -> None:
    """A veth pair, both ends and lo up (in the benchmark's own network namespace): the macvlan master."""
    sh("ip", "link", "add", name, "type", "veth", "peer", "name", peer)
    for dev in ("lo", name, peer):
        sh("ip", "link", "set", dev, "up")


class Netnses:
    """Network namespaces made on demand (`ns()` names a new one), all deleted by delete()."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.names: list[str] = []

    def __call__(self) -> str:
        name = f"{self.prefix}-{os.getpid()}-{len(self.names)}"
        sh("ip", "netns", "add", name)
        self.names.append(name)
        return name

    def delete(self) -> None:
        for ns in self.names:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def default_bridge(base: Path, bridge: str, subnet: str) -> Path:
    """A node root under `base` whose default network `mgmt` is a static bridge file (`bridge`, host-local over
    `subnet`); the intent dir is returned (bench/memory.py makes its node the same way)."""
    nets, static = base / "etc/netcomp/networks.d", base / "etc/netcomp/static.d"
    nets.mkdir(parents=True)
    static.mkdir(parents=True)
    ipam = {"type": "host-local", "dataDir": f"{base}/ipam", "subnet": subnet}
    conf = {
        "cniVersion": "1.0.0",
        "name": "br",
        "plugins": [{"type": "bridge", "bridge": bridge, "isGateway": True, "ipam": ipam}],
    }
    (static / "br.conflist").write_text(json.dumps(conf))
    (nets / "mgmt.yaml").write_text(
        "apiVersion: netcomp.io/v1\nkind: Network\nmetadata: {name: mgmt}\nspec: {type: static, networkID: br}\n"
    )
    return nets


def setup(base: Path) -> None:
    nets = default_bridge(base, "ncbench0", "10.140.0.0/16")
    for name, subnet in (("storage", "10.141.0.0/16"), ("backup", "10.142.0.0/16")):
        (nets / f"{name}.yaml").write_text(
            f"apiVersion: netcomp.io/v1\nkind: Network\nmetadata: {{name: {name}}}\nspec: {{type: macvlan, "
            f"hostDevice: bench0, ipam: {{type: host-local, dataDir: {base}/ipam, subnet: {subnet}}}}}\n"
        )
    (base / "etc/netcomp/netcomp.yaml").write_text("defaultNetwork: mgmt\nmaxInFlight: 64\n")


GOALS = {"a": 1.20, "b": 0.75, "c": 1.5, "d": 1.25}  # the compiled shim's (issue 14)
# How long after its ADD a container's DEL is made in (a) and (e), untimed, through the shim and directly alike. A
# bridge DEL costs more once the kernel has finished what an ADD sets going (measured here: 20 ms right after
# the ADD, 25.6 ms 20 ms after it, 27.8-28.1 ms from 50 ms to 1 s after it: docs/benchmarks.md). A direct DEL
# can follow its ADD at once; one through the shim cannot (the answer, the shim's exit and the next shim's start
# come between), so back to back the two sides' DELs found the kernel in different states. A container lives
# longer than this: the settled DEL is the one a runtime makes.
SETTLE = 0.1


def inner(runs: int) -> None:
    from netcomp.cni.invoke import Runner, RuntimeConf, real_exec
    from netcomp.shim import install as shimlaunch

    base = Path(tempfile.mkdtemp(prefix="netcomp-bench-"))
    setup(base)
    # Both shims as install-shim installs them: compiled with the node's cc, or the launcher and bytecode.
    exes = {"C": str(base / "cni/netcomp-c"), "Python": str(base / "cni/netcomp-py")}
    (base / "cni").mkdir()
    shimlaunch.build(Path(exes["C"]), shimlaunch.find_cc() or "cc")
    shimlaunch.install(Path(exes["Python"]), base / "shim")
    veth_up("bench0", "bench0p")
    # At its default log level (info: a line per request, as under systemd), the log kept in a file and shown if
    # the benchmark fails.
    daemon_log = base / "daemon.log"
    with daemon_log.open("wb") as log_file:
        daemon = subprocess.Popen([NC, "daemon", "--root", str(base)], stderr=log_file)
    sock = f"{base}/run/netcomp/netcomp.sock"
    shimconf = json.dumps({"cniVersion": "1.0.0", "name": "netcomp", "type": "netcomp", "socket": sock}).encode()
    netns = Netnses("ncb")

    def execute(argv: list[str], env: dict[str, str], legacy: bool = False) -> tuple[float, int, bytes]:
        """Exec as a runtime execs a plugin (config on stdin, stdout read): the shims and their baselines with the
        very routine the direct delegates are exec'd with (netcomp's runner: posix_spawn, one poll loop), so that
        an exec costs the same on both sides of every ratio. legacy: with subprocess.run instead, as this
        benchmark exec'd the shims (not the direct delegates) until session 9: about 1 ms more per exec here."""
        t = time.perf_counter()
        if legacy:
            p = subprocess.run(argv, input=shimconf, env=env, capture_output=True, timeout=120)
            return time.perf_counter() - t, p.returncode, p.stdout
        r = real_exec(argv, env, shimconf, 120)
        return time.perf_counter() - t, r.returncode, r.stdout

    def shim(exe: str, cmd: str, ns: str, args: str = "", legacy: bool = False) -> float:
        env = {
            "CNI_COMMAND": cmd,
            "CNI_CONTAINERID": ns,
            "CNI_NETNS": f"/var/run/netns/{ns}",
            "CNI_IFNAME": "eth0",
            "CNI_ARGS": args,
            "CNI_PATH": PLUGINS,
        }
        took, code, out = execute([exe], env, legacy)
        if code != 0:
            raise SystemExit(f"shim {exe} {cmd} failed: {out.decode()}")
        return took

    def start(exe: str) -> float:
        """A shim start alone: its VERSION, answered without the daemon."""
        return shim(exe, "VERSION", "x")

    def bare(argv: list[str]) -> float:
        """A program that does nothing, exec'd as the shims are: the floor of a start."""
        took, code, _ = execute(argv, {"CNI_COMMAND": "VERSION"})
        if code != 0:
            raise SystemExit(f"{argv[0]} exited {code}")
        return took

    compiled: dict[str, dict] = {}
    m: dict[str, dict[str, list[float]]] = {name: defaultdict(list) for name in exes}
    direct_ms: dict[str, list[float]] = defaultdict(list)
    try:
        for exe in exes.values():
            shim(exe, "ADD", netns())  # warm up: waits until the daemon serves
            shim(exe, "DEL", netns.names[-1])
        for n in ("mgmt", "storage", "backup"):
            compiled[n] = json.loads((base / f"run/netcomp/networks/{n}.conflist").read_text())
        runner = Runner([PLUGINS])

        def direct(ns: str, nets: list[tuple[str, str]], before: float = 0.0) -> tuple[float, list]:
            """The delegates exec'd in turn; `before`: time already spent (a shim start) added to the total."""
            t = time.perf_counter()
            results = [runner.add(compiled[n], RuntimeConf(ns, f"/var/run/netns/{ns}", ifn)) for n, ifn in nets]
            return before + time.perf_counter() - t, results

        def direct_del(ns: str, nets: list[tuple[str, str]], results: list, before: float = 0.0) -> float:
            t = time.perf_counter()
            for (n, ifn), r in zip(nets, results, strict=True):
                runner.delete(compiled[n], RuntimeConf(ns, f"/var/run/netns/{ns}", ifn), r)
            return before + time.perf_counter() - t

        def direct_parallel(ns: str, nets: list[tuple[str, str]], before: float) -> float:
            """The delegates exec'd side by side (as the daemon runs them); DEL'd after, not timed."""
            with ThreadPoolExecutor(len(nets)) as pool:
                t = time.perf_counter()
                outs = list(pool.map(lambda net: direct(ns, [net])[1][0], nets))
                took = time.perf_counter() - t
            direct_del(ns, nets, outs)
            return before + took

        one = [("mgmt", "eth0")]
        three = [("mgmt", "eth0"), ("storage", "net0"), ("backup", "net1")]
        for _ in range(runs):
            # (a) and (e): the DEL made SETTLE after the ADD, untimed, on both sides (see SETTLE).
            ns = netns()
            t_add, res = direct(ns, one)
            time.sleep(SETTLE)
            direct_ms["a"].append(t_add + direct_del(ns, one, res))
            ns = netns()
            t_add, res = direct(ns, one)
            direct_ms["a-"].append(t_add + direct_del(ns, one, res))
            ns = netns()
            t_add, res = direct(ns, three)
            direct_ms["b"].append(t_add)
            time.sleep(SETTLE)
            direct_ms["e"].append(direct_del(ns, three, res))
            for name, exe in exes.items():
                r = m[name]
                ns = netns()
                t_add = shim(exe, "ADD", ns)
                time.sleep(SETTLE)
                r["a"].append(t_add + shim(exe, "DEL", ns))
                ns = netns()
                r["a-"].append(shim(exe, "ADD", ns) + shim(exe, "DEL", ns))
                ns = netns()
                r["a~"].append(shim(exe, "ADD", ns, legacy=True) + shim(exe, "DEL", ns, legacy=True))
                ns = netns()
                t_add, res = direct(ns, one, start(exe))
                time.sleep(SETTLE)
                r["a0"].append(t_add + direct_del(ns, one, res, start(exe)))
                ns = netns()
                r["b0"].append(direct_parallel(ns, three, start(exe)))
                ns = netns()
                r["b"].append(shim(exe, "ADD", ns, "NETCOMP_NETWORKS=storage,backup"))
                time.sleep(SETTLE)
                r["e"].append(shim(exe, "DEL", ns))

        for _ in range(runs * 2):
            direct_ms["c/true"].append(bare(["/bin/true"]))
            direct_ms["c/python"].append(bare([PY, "-I", "-S", "-c", "pass"]))
            for name, exe in exes.items():
                m[name]["c"].append(start(exe))

        def at_once(exe: str | None, floor: bool = False) -> float:
            """16 ADDs at once through exe (None: direct; floor: exe's start, then direct); DEL'd after."""
            group = [netns() for _ in range(16)]
            with ThreadPoolExecutor(16) as pool:
                t = time.perf_counter()
                if exe is None or floor:
                    outs = list(pool.map(lambda ns: direct(ns, one, start(exe) if exe else 0.0)[1], group))
                else:
                    list(pool.map(lambda ns: shim(exe, "ADD", ns), group))
                took = time.perf_counter() - t
                if exe is None or floor:
                    list(pool.map(lambda a: direct_del(a[0], one, a[1]), zip(group, outs, strict=True)))
                else:
                    list(pool.map(lambda ns: shim(exe, "DEL", ns), group))
            return took

        # Half as many rounds as the others (20 of 40): one round's ratio reads anywhere from 1.00 to 1.40 here (16
        # plugins on 2 cores; the direct round alone 84 to 136 ms), and a median of 8 moved by 0.1 between runs.
        for _ in range(max(3, runs // 2)):
            direct_ms["d"].append(at_once(None))
            for name, exe in exes.items():
                m[name]["d"].append(at_once(exe))
                m[name]["d0"].append(at_once(exe, floor=True))
    except BaseException:
        sys.stderr.write(
            "the daemon's log, its end:\n" + "".join(daemon_log.read_text(errors="replace").splitlines(True)[-30:])
        )
        raise
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
        netns.delete()
        shutil.rmtree(base, ignore_errors=True)

    def row(label: str, ours: list[float], base_: list[float], goal: float | None = None, note: str = "") -> None:
        ratio = median_ms(ours) / median_ms(base_)
        tail = f"goal <= {goal}  {'ok' if ratio <= goal else 'MISSED'}" if goal is not None else note
        print(f"  {label:58s} {median_ms(ours):8.1f} / {median_ms(base_):8.1f} = {ratio:5.2f}  {tail}")

    print(f"netcomp delegation benchmark, {time.strftime('%Y-%m-%d')}, medians of {runs} runs (ms)")
    for name, r in m.items():
        compiled_shim = name == "C"
        print(
            f"  the {'compiled shim (netcomp-shim.c)' if compiled_shim else 'Python shim (plugin.py), for comparison'}"
        )
        goal = GOALS.get if compiled_shim else (lambda _key: None)
        row("(a) ADD+DEL bridge: shim+daemon / direct", r["a"], direct_ms["a"], goal("a"))
        row("(b) join 3 networks: shim+daemon / 3 direct in turn", r["b"], direct_ms["b"], goal("b"))
        if compiled_shim:
            row("(c) shim VERSION / /bin/true", r["c"], direct_ms["c/true"], goal("c"))
        else:
            row("(c) shim VERSION / python3 -I -S -c pass", r["c"], direct_ms["c/python"])
        row("(d) 16 ADDs at once: shim+daemon / 16 direct at once", r["d"], direct_ms["d"], goal("d"))
        row("(a-) as (a), each DEL right after its ADD", r["a-"], direct_ms["a-"], note="(for reading (a))")
        row("(a~) as (a-), the shim exec'd by subprocess.run", r["a~"], direct_ms["a-"], note="(as before session 9)")
        row("(e) DEL of 3 networks: shim+daemon / 3 direct in turn", r["e"], direct_ms["e"], note="(no goal set)")
        row("(a0) floor of (a): shim starts + direct execs", r["a0"], direct_ms["a"], goal("a"))
        row("(b0) floor of (b)", r["b0"], direct_ms["b"], goal("b"))
        row("(d0) floor of (d)", r["d0"], direct_ms["d"], goal("d"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench/delegate.py needs root (network namespaces)")
    if args.inner:
        inner(args.runs)
        return
    host = f"ncbench-host-{os.getpid()}"
    sh("ip", "netns", "add", host)
    try:
        subprocess.run(
            ["ip", "netns", "exec", host, sys.executable, __file__, "--inner", "--runs", str(args.runs)], check=True
        )
    finally:
        subprocess.run(["ip", "netns", "del", host], capture_output=True)


if __name__ == "__main__":
    main()
