#!/usr/bin/env python3
"""Delegation benchmark (root). Prints ratios against baselines measured in the same run:

  (a) ADD+DEL of one bridge+host-local network through shim+daemon / the same delegate exec'd directly   <= 1.6
  (b) a container joining three networks (ADD) / the three delegates exec'd one after another directly   <= 0.9
  (c) shim start (CNI_COMMAND=VERSION) / /usr/bin/python3 -I -S -c pass                                  <= 1.3
  (d) 16 containers ADD at once, wall time / the same 16 direct execs at once                             <= 1.5

(e), no goal set: a container on three networks leaving them (DEL) / the three DELs direct, one after another;
and, for reading them, (a0) (b0) (d0): the same work with a daemon that costs nothing, the floor of each ratio
here: a shim start (its VERSION, answered without the daemon) in place of each shim call, then the delegates
exec'd directly, in parallel where the daemon runs them so. A floor over a goal means no daemon can meet it on
this machine with a Python shim.

Everything runs inside a network namespace the benchmark makes (a veth pair as macvlan master), with the daemon
started as `netcomp daemon --root TMP` in it and the shim installed as the package installs it (a launcher that
imports the byte-compiled shim, netcomp/shim/install.py); all is removed at the end.
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PY = "/usr/bin/python3"
NC = str(Path(sys.executable).parent / "netcomp")
PLUGINS = "/usr/lib/cni"


def sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=60)


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def setup(base: Path) -> None:
    nets, static = base / "etc/netcomp/networks.d", base / "etc/netcomp/static.d"
    nets.mkdir(parents=True)
    static.mkdir(parents=True)
    ipam = {"type": "host-local", "dataDir": f"{base}/ipam"}
    (static / "br.conflist").write_text(
        json.dumps(
            {
                "cniVersion": "1.0.0",
                "name": "br",
                "plugins": [
                    {
                        "type": "bridge",
                        "bridge": "ncbench0",
                        "isGateway": True,
                        **{"ipam": {**ipam, "subnet": "10.140.0.0/16"}},
                    }
                ],
            }
        )
    )
    (nets / "mgmt.yaml").write_text(
        "apiVersion: netcomp.io/v1\nkind: Network\nmetadata: {name: mgmt}\nspec: {type: static, networkID: br}\n"
    )
    for name, subnet in (("storage", "10.141.0.0/16"), ("backup", "10.142.0.0/16")):
        (nets / f"{name}.yaml").write_text(
            f"apiVersion: netcomp.io/v1\nkind: Network\nmetadata: {{name: {name}}}\nspec: {{type: macvlan, "
            f"hostDevice: bench0, ipam: {{type: host-local, dataDir: {base}/ipam, subnet: {subnet}}}}}\n"
        )
    (base / "etc/netcomp/netcomp.yaml").write_text("defaultNetwork: mgmt\nmaxInFlight: 64\n")


def inner(runs: int) -> None:
    from netcomp.cni.invoke import Runner, RuntimeConf
    from netcomp.shim import install as shimlaunch

    base = Path(tempfile.mkdtemp(prefix="netcomp-bench-"))
    setup(base)
    # The shim as the package installs it: a launcher importing the byte-compiled shim.
    shim_exe = str(base / "cni/netcomp")
    shimlaunch.install(Path(shim_exe), base / "shim")
    sh("ip", "link", "add", "bench0", "type", "veth", "peer", "name", "bench0p")
    for dev in ("lo", "bench0", "bench0p"):
        sh("ip", "link", "set", dev, "up")
    daemon = subprocess.Popen([NC, "daemon", "--root", str(base), "--log-level", "error"])
    sock = f"{base}/run/netcomp/netcomp.sock"
    shimconf = json.dumps({"cniVersion": "1.0.0", "name": "netcomp", "type": "netcomp", "socket": sock}).encode()
    nss: list[str] = []

    def netns() -> str:
        name = f"ncb-{os.getpid()}-{len(nss)}"
        sh("ip", "netns", "add", name)
        nss.append(name)
        return name

    def shim(cmd: str, ns: str, args: str = "") -> float:
        env = {
            "CNI_COMMAND": cmd,
            "CNI_CONTAINERID": ns,
            "CNI_NETNS": f"/var/run/netns/{ns}",
            "CNI_IFNAME": "eth0",
            "CNI_ARGS": args,
            "CNI_PATH": PLUGINS,
        }
        t = time.perf_counter()
        p = subprocess.run([shim_exe], input=shimconf, env=env, capture_output=True, timeout=120)
        took = time.perf_counter() - t
        if p.returncode != 0:
            raise SystemExit(f"shim {cmd} failed: {p.stdout.decode()}")
        return took

    compiled: dict[str, dict] = {}
    try:
        shim("ADD", netns())  # warm up: waits until the daemon serves
        shim("DEL", nss[-1])
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

        a_shim, a_direct, a_paused, b_shim, b_direct = [], [], [], [], []
        a_floor, b_floor, e_shim, e_direct = [], [], [], []

        def shim_start() -> float:
            return shim("VERSION", "x")

        # How long a shim call takes outside the daemon: the pause a real DEL always comes after (see (a*)).
        pause = statistics.median(shim_start() for _ in range(5))
        one = [("mgmt", "eth0")]
        three = [("mgmt", "eth0"), ("storage", "net0"), ("backup", "net1")]
        for _ in range(runs):
            ns = netns()
            a_shim.append(shim("ADD", ns) + shim("DEL", ns))
            ns = netns()
            t_add, res = direct(ns, one)
            a_direct.append(t_add + direct_del(ns, one, res))
            ns = netns()
            t_add, res = direct(ns, one)
            time.sleep(pause)  # not timed: after an idle pause a DEL costs more (docs/benchmarks.md, (a))
            a_paused.append(t_add + direct_del(ns, one, res))
            ns = netns()
            t_add, res = direct(ns, one, shim_start())
            a_floor.append(t_add + direct_del(ns, one, res, shim_start()))
            ns = netns()
            b_floor.append(direct_parallel(ns, three, shim_start()))
            ns = netns()
            b_shim.append(shim("ADD", ns, "NETCOMP_NETWORKS=storage,backup"))
            e_shim.append(shim("DEL", ns))
            ns = netns()
            t_add, res = direct(ns, three)
            b_direct.append(t_add)
            e_direct.append(direct_del(ns, three, res))

        c_shim, c_bare = [], []
        for _ in range(runs * 2):
            t = time.perf_counter()
            subprocess.run([PY, "-I", "-S", "-c", "pass"], check=True)
            c_bare.append(time.perf_counter() - t)
            t = time.perf_counter()
            subprocess.run([shim_exe], env={"CNI_COMMAND": "VERSION"}, check=True, capture_output=True)
            c_shim.append(time.perf_counter() - t)

        d_shim, d_direct, d_floor = [], [], []
        for _ in range(max(3, runs // 5)):
            group = [netns() for _ in range(16)]
            with ThreadPoolExecutor(16) as pool:
                t = time.perf_counter()
                list(pool.map(lambda ns: shim("ADD", ns), group))
                d_shim.append(time.perf_counter() - t)
                list(pool.map(lambda ns: shim("DEL", ns), group))
            group = [netns() for _ in range(16)]
            with ThreadPoolExecutor(16) as pool:
                t = time.perf_counter()
                outs = list(pool.map(lambda ns: direct(ns, one)[1], group))
                d_direct.append(time.perf_counter() - t)
                list(pool.map(lambda a: direct_del(a[0], one, a[1]), zip(group, outs, strict=True)))
            group = [netns() for _ in range(16)]
            with ThreadPoolExecutor(16) as pool:
                t = time.perf_counter()
                outs = list(pool.map(lambda ns: direct(ns, one, shim_start())[1], group))
                d_floor.append(time.perf_counter() - t)
                list(pool.map(lambda a: direct_del(a[0], one, a[1]), zip(group, outs, strict=True)))
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
        for ns in nss:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)

    print(f"netcomp delegation benchmark, {time.strftime('%Y-%m-%d')}, medians of {runs} runs (ms)")
    rows = [
        ("(a) ADD+DEL bridge: shim+daemon / direct", a_shim, a_direct, 1.6),
        ("(b) join 3 networks: shim+daemon / 3 direct in turn", b_shim, b_direct, 0.9),
        ("(c) shim VERSION / python3 -I -S -c pass", c_shim, c_bare, 1.3),
        ("(d) 16 ADDs at once: shim+daemon / 16 direct at once", d_shim, d_direct, 1.5),
    ]
    for label, ours, base_, goal in rows:
        ratio = median_ms(ours) / median_ms(base_)
        print(
            f"  {label:55s} {median_ms(ours):8.1f} / {median_ms(base_):8.1f} = {ratio:5.2f}  goal <= {goal}  "
            f"{'ok' if ratio <= goal else 'MISSED'}"
        )
    label = "(a*) as (a), direct DEL after a shim start's pause"
    ratio = median_ms(a_shim) / median_ms(a_paused)
    print(f"  {label:55s} {median_ms(a_shim):8.1f} / {median_ms(a_paused):8.1f} = {ratio:5.2f}  (for reading (a))")
    label = "(e) DEL of 3 networks: shim+daemon / 3 direct in turn"
    ratio = median_ms(e_shim) / median_ms(e_direct)
    print(f"  {label:55s} {median_ms(e_shim):8.1f} / {median_ms(e_direct):8.1f} = {ratio:5.2f}  (no goal set)")
    print("  floors: the same with a daemon that costs nothing (shim starts + direct execs)")
    for label, floor, base_, goal in (
        ("(a0) floor of (a)", a_floor, a_direct, 1.6),
        ("(b0) floor of (b)", b_floor, b_direct, 0.9),
        ("(d0) floor of (d)", d_floor, d_direct, 1.5),
    ):
        ratio = median_ms(floor) / median_ms(base_)
        print(f"  {label:55s} {median_ms(floor):8.1f} / {median_ms(base_):8.1f} = {ratio:5.2f}  goal <= {goal}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=20)
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
