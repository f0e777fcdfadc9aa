#!/usr/bin/env python3
"""Compile benchmark. Prints ratios against baselines measured in the same run (these machines are noisy):

  cold     the CLI's compile of N mixed intents into an empty dir  /  a bare loop writing N files atomically
           (tmp, fsync, rename): the disk is the floor.                                          goal <= 1.5
  nochange the same compile again, nothing changed                  /  that floor                goal <= 0.3
  edit     in one process (library API): one intent of N edited, recompiled and its file replaced
           /  the cold compile through the same API                                               goal <= 0.01

Usage: bench/compile.py [--count N] [--repeat R]   (medians of R runs)
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from netcomp.compiler.compiler import Compiler, discover  # noqa: E402
from netcomp.compiler.output import Output  # noqa: E402
from netcomp.settings import Settings  # noqa: E402

PLUGINS = ("macvlan", "ipvlan", "sriov", "bridge", "host-local", "static", "dhcp", "whereabouts")


def intent(i: int) -> str:
    """Six kinds in turn: macvlan+vlan, ipvlan dual stack, sriov, static, DanmNet, NetworkAttachmentDefinition."""
    a, b = divmod(i, 256)
    kind = i % 6
    if kind == 0:
        return (
            f"apiVersion: netcomp.io/v1\nkind: Network\nmetadata:\n  name: mv-{i}\nspec:\n  type: macvlan\n"
            f"  hostDevice: eth{i // 4000}\n  vlan: {i % 4000 + 1}\n  mtu: 9000\n  interfacePrefix: mv\n"
            f"  ipam:\n    type: host-local\n    subnet: 10.{a % 256}.{b}.0/24\n"
            f"    rangeStart: 10.{a % 256}.{b}.10\n    routes:\n      - dst: 192.168.0.0/16\n"
        )
    if kind == 1:
        return (
            f"apiVersion: netcomp.io/v1\nkind: Network\nmetadata:\n  name: ipv-{i}\nspec:\n  type: ipvlan\n"
            f"  hostDevice: ens{i}\n  mode: l3\n  ipam:\n    type: host-local\n    ranges:\n"
            f"      - subnet: 172.16.{b}.0/24\n      - subnet: fd00:{i:x}::/64\n"
            f"    routes:\n      - dst: 0.0.0.0/0\n      - dst: ::/0\n"
        )
    if kind == 2:
        return (
            f"apiVersion: netcomp.io/v1\nkind: Network\nmetadata:\n  name: vf-{i}\nspec:\n  type: sriov\n"
            f"  resourceName: intel.com/pool{i % 8}\n  vlan: {i % 4000}\n  spoofchk: true\n"
        )
    if kind == 3:
        return (
            f"apiVersion: netcomp.io/v1\nkind: Network\nmetadata:\n  name: st-{i}\nspec:\n  type: static\n"
            f"  networkID: shared{i % 10}\n"
        )
    if kind == 4:
        return (
            f"apiVersion: danm.k8s.io/v1\nkind: DanmNet\nmetadata:\n  name: dn-{i}\n  namespace: x\nspec:\n"
            f"  NetworkID: n{i}\n  NetworkType: macvlan\n  Options:\n    host_device: dn{i}\n"
            f"    cidr: 10.200.{b}.0/24\n    container_prefix: dn\n"
        )
    return (
        f"apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata:\n  name: nad-{i}\n"
        f'spec:\n  config: \'{{"cniVersion": "0.4.0", "type": "bridge", "bridge": "br{i % 100}"}}\'\n'
    )


def setup(base: Path, n: int) -> tuple[Path, Path, Path]:
    intents, static, plugins = base / "intents", base / "static", base / "plugins"
    for d in (intents, static, plugins):
        d.mkdir()
    for i in range(n):
        (intents / f"{i:05d}.yaml").write_text(intent(i))
    for k in range(10):
        (static / f"shared{k}.conf").write_text(f'{{"cniVersion": "1.0.0", "type": "bridge", "bridge": "s{k}"}}')
    for p in PLUGINS:
        (plugins / p).write_text("#!/bin/sh\n")
        (plugins / p).chmod(0o755)
    return intents, static, plugins


def floor(out: Path, n: int, size: int) -> float:
    """The bare minimum: N atomic writes (tmp, fsync, rename) of files of the same size."""
    out.mkdir()
    data = b"x" * size
    t = time.perf_counter()
    for i in range(n):
        tmp, dst = out / f".f{i}.tmp", out / f"f{i}.conflist"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(fd, data)
        os.fsync(fd)
        os.close(fd)
        os.replace(tmp, dst)
    return time.perf_counter() - t


def cli(intents: Path, static: Path, plugins: Path, out: Path) -> float:
    exe = str(Path(sys.executable).parent / "netcomp")
    argv = [exe, "compile", str(intents), "--out", str(out), "--static-dir", str(static), "--plugin-dir", str(plugins)]
    t = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def in_process(intents: Path, static: Path, plugins: Path, out: Path) -> tuple[float, float]:
    settings = Settings(staticDirs=[str(static)], pluginDirs=[str(plugins)], templateDir="/nonexistent")
    comp, output = Compiler(settings), Output(out)
    t = time.perf_counter()
    files = discover([intents])
    output.apply(comp.compile(files))
    cold = time.perf_counter() - t
    edited = files[len(files) // 2]
    edited.write_text(edited.read_text().replace("name: ", "name: e", 1))
    t = time.perf_counter()
    plan = comp.compile(files, changed=[edited])
    changes = output.apply(plan)
    edit = time.perf_counter() - t
    assert plan.ok and len(changes) == 2, changes  # the renamed network's file added, the old one removed
    return cold, edit


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    n = args.count
    rows: dict[str, list[float]] = {k: [] for k in ("floor", "cold", "nochange", "api-cold", "edit")}
    with tempfile.TemporaryDirectory(prefix="netcomp-bench-", dir="/var/tmp") as tmp:
        base = Path(tmp)
        intents, static, plugins = setup(base, n)
        for r in range(args.repeat):
            out = base / f"out{r}"
            rows["cold"].append(cli(intents, static, plugins, out))
            rows["nochange"].append(cli(intents, static, plugins, out))
            size = int(statistics.mean(p.stat().st_size for p in list(out.iterdir())[:200]))
            rows["floor"].append(floor(base / f"floor{r}", n, size))
            api_cold, edit = in_process(intents, static, plugins, base / f"api{r}")
            rows["api-cold"].append(api_cold)
            rows["edit"].append(edit)
            for d in (out, base / f"floor{r}", base / f"api{r}"):
                shutil.rmtree(d)
            for f in intents.iterdir():  # undo the edit for the next round
                f.write_text(f.read_text().replace("name: e", "name: ", 1))
    med = {k: statistics.median(v) for k, v in rows.items()}
    print(f"netcomp compile benchmark: {n} intents, median of {args.repeat} runs, {time.strftime('%Y-%m-%d')}")
    for k, v in med.items():
        print(f"  {k:9s} {v * 1000:10.1f} ms")
    checks = [
        ("cold CLI compile / atomic-write floor", med["cold"] / med["floor"], 1.5),
        ("no-change CLI compile / floor", med["nochange"] / med["floor"], 0.3),
        ("one edit recompiled / cold compile (API)", med["edit"] / med["api-cold"], 0.01),
    ]
    for label, ratio, goal in checks:
        print(f"  {label:42s} {ratio:8.4f}   goal <= {goal}   {'ok' if ratio <= goal else 'MISSED'}")


if __name__ == "__main__":
    main()
