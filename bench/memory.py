#!/usr/bin/env python3
"""Memory and start-up benchmark (root). The daemon runs as a real process (`netcomp daemon --root TMP`, in a
network namespace the benchmark makes), READY=1 read from a notify socket it is given, RSS from
/proc/PID/status (VmRSS), fds from /proc/PID/fd. Four rows, each printed with its goal:

  (m1) daemon RSS, idle, 2 networks (a static bridge and a macvlan on a veth), after READY=1     <= 40 MB
  (m2) daemon RSS, 10,000 networks (bench/compile.py's six kinds) compiled and served: after
       READY=1 and 20 ADD/DEL cycles of one of them through the shim                            <= 90 MB
  (m3) daemon start to READY=1 with those 10,000 networks (nothing compiled yet: empty output
       dir, no plan cache, no state) / `netcomp compile --root TMP` of the same into the same
       (emptied) output dir, cold in the same sense; both as processes, alternated, medians      <= 1.2
  (m4) RSS and fds over --cycles ADD/DEL cycles through the compiled shim (the 2-network daemon,
       real plugins, a netns made for it) after --warmup cycles: sampled then and at the end    flat

And, no goal set: (m1r) the 2-network daemon started again (its plan read back from the plan cache); (m2e) the
10,000-network daemon once one intent was edited (renamed), with the time from the edit to the new file.

Also printed, for reading them: peak RSS (VmHWM), RSS right at READY=1, and the modules of note the daemon
imported (from /proc/PID/maps: the shared objects of pydantic_core, pyroute2 is pure Python and shows only
in RSS, so the list is of the extension modules mapped).
Usage: sudo bench/memory.py [--count 10000] [--repeat 3] [--cycles 2000] [--warmup 100]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
NC = str(Path(sys.executable).parent / "netcomp")
PLUGINS = "/usr/lib/cni"
GOALS = {"m1": 40.0, "m2": 90.0, "m3": 1.2}
# bench/compile.py's intents (six kinds in turn) are the 10,000 networks here too.
_spec = importlib.util.spec_from_file_location("bench_compile", Path(__file__).with_name("compile.py"))
assert _spec is not None and _spec.loader is not None
bench_compile = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_compile)
_spec = importlib.util.spec_from_file_location("bench_delegate", Path(__file__).with_name("delegate.py"))
assert _spec is not None and _spec.loader is not None
bench_delegate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_delegate)


sh = bench_delegate.sh


def bytecode() -> None:
    """netcomp's modules byte-compiled, as a package install leaves them (dh_python3, pip): a checkout edited
    under PYTHONDONTWRITEBYTECODE would otherwise compile its changed modules again at every start measured."""
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(ROOT / "netcomp")], check=True, stdout=subprocess.DEVNULL
    )


def status(pid: int, key: str) -> float:
    """A /proc/PID/status figure in MB (VmRSS, VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(key)


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


class Daemon:
    """`netcomp daemon --root BASE` as a process, with a notify socket of its own."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        path = base / "notify.sock"
        path.unlink(missing_ok=True)
        self.notify.bind(str(path))
        self.log = open(base / "daemon.log", "ab")  # noqa: SIM115 - closed in stop()
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            [NC, "daemon", "--root", str(base)],
            env={**os.environ, "NOTIFY_SOCKET": str(path)},
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=self.log,
        )
        self.pid = self.proc.pid

    def ready(self, timeout: float = 600) -> float:
        """Seconds from the start to READY=1."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"the daemon exited ({self.proc.returncode}); see {self.base}/daemon.log")
            self.notify.settimeout(1.0)
            try:
                msg = self.notify.recv(65536)
            except TimeoutError:
                continue
            if b"READY=1" in msg.split(b"\n"):
                took = time.perf_counter() - self.t0
                # Go on reading, as systemd does: a daemon whose STATUS= datagrams are not read blocks on them.
                threading.Thread(target=self._drain, daemon=True).start()
                return took
        raise SystemExit("no READY=1")

    def _drain(self) -> None:
        self.notify.settimeout(None)
        with contextlib.suppress(OSError):
            while self.notify.recv(65536):
                pass

    def settle(self, seconds: float = 2.0) -> float:
        """RSS once the daemon has been idle a while (the largest of a few samples: nothing should move)."""
        samples = []
        for _ in range(4):
            time.sleep(seconds / 4)
            samples.append(status(self.pid, "VmRSS"))
        return max(samples)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        with contextlib.suppress(OSError):
            self.notify.shutdown(socket.SHUT_RDWR)  # wakes the drain
        self.notify.close()
        self.log.close()


def two_networks(base: Path) -> None:
    nets = bench_delegate.default_bridge(base, "ncmem0", "10.150.0.0/16")
    (nets / "storage.yaml").write_text(
        "apiVersion: netcomp.io/v1\nkind: Network\nmetadata: {name: storage}\nspec: {type: macvlan, "
        f"hostDevice: ncmem0v, ipam: {{type: host-local, dataDir: {base}/ipam, subnet: 10.151.0.0/16}}}}\n"
    )
    (base / "etc/netcomp/netcomp.yaml").write_text("defaultNetwork: mgmt\n")


def many_networks(base: Path, n: int) -> None:
    """bench/compile.py's N intents; the plugins are the host's, plus a stand-in sriov (none is installed here,
    and none of these networks is attached but the default one, a bridge)."""
    etc = base / "etc/netcomp"
    etc.mkdir(parents=True)
    intents, static, fake = bench_compile.setup(etc, n)
    intents.rename(etc / "networks.d")
    static.rename(etc / "static.d")
    for p in fake.iterdir():
        if (Path(PLUGINS) / p.name).exists():
            p.unlink()
    (etc / "netcomp.yaml").write_text(
        json.dumps({"defaultNetwork": "nad-5", "pluginDirs": [PLUGINS, str(fake)]}) + "\n"
    )


def edit(base: Path, i: int, *, undo: bool = False) -> float:
    """Rename the network of intent i; seconds until its new file is in the output dir."""
    f = base / f"etc/netcomp/networks.d/{i:05d}.yaml"
    text = f.read_text()
    if undo:
        f.write_text(text.replace("name: e-", "name: ", 1))
        return 0.0
    name = text.split("name: ", 1)[1].split()[0]
    t = time.perf_counter()
    f.write_text(text.replace("name: ", "name: e-", 1))
    new = base / f"run/netcomp/networks/e-{name}.conflist"
    while not new.exists():
        if time.perf_counter() - t > 120:
            raise SystemExit(f"{new} did not appear")
        time.sleep(0.005)
    return time.perf_counter() - t


def fresh(base: Path) -> None:
    """Nothing compiled yet: no output, no plan cache, no state, no cache of attachments."""
    for d in ("run", "var", "out", "etc/cni"):
        shutil.rmtree(base / d, ignore_errors=True)


class Shim:
    """The shim `exe` exec'd as a runtime execs it, each container joining the default network and what
    `cni_args` asks for (NETCOMP_NETWORKS=...)."""

    def __init__(self, base: Path, exe: str, cni_args: str = "") -> None:
        self.exe = exe
        self.cni_args = cni_args
        self.conf = json.dumps(
            {"cniVersion": "1.0.0", "name": "netcomp", "type": "netcomp", "socket": f"{base}/run/netcomp/netcomp.sock"}
        ).encode()

    def __call__(self, cmd: str, ns: str, container: str) -> None:
        env = {
            "CNI_COMMAND": cmd,
            "CNI_CONTAINERID": container,
            "CNI_NETNS": f"/var/run/netns/{ns}",
            "CNI_IFNAME": "eth0",
            "CNI_ARGS": self.cni_args,
            "CNI_PATH": PLUGINS,
        }
        try:
            p = subprocess.run([self.exe], input=self.conf, env=env, capture_output=True, timeout=120)
        except subprocess.TimeoutExpired:
            raise SystemExit(f"shim {cmd} {container} took over 120 s; see the daemon's log") from None
        if p.returncode != 0:
            raise SystemExit(f"shim {cmd} {container} failed: {p.stdout.decode()}")

    def cycles(self, n: int, ns: str, tag: str) -> None:
        for i in range(n):
            self(cmd="ADD", ns=ns, container=f"{tag}-{i}")
            self(cmd="DEL", ns=ns, container=f"{tag}-{i}")


def mapped_libs(pid: int) -> list[str]:
    names = set()
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        path = line.split()[-1] if len(line.split()) >= 6 else ""
        if "site-packages" in path and path.endswith(".so"):
            names.add(path.split("site-packages/")[1].split("/")[0])
    return sorted(names)


def small_rows(top: Path, exe: str, netns: bench_delegate.Netnses, args: argparse.Namespace, out: dict) -> None:
    """(m1), (m1r) and (m4): the daemon with two networks."""
    small = top / "small"
    small.mkdir()
    two_networks(small)
    d = Daemon(small)
    try:
        out["m1_ready_s"] = d.ready()
        out["m1_at_ready"] = status(d.pid, "VmRSS")
        out["m1"] = d.settle()
        out["m1_libs"] = mapped_libs(d.pid)
        shim = Shim(small, exe)
        ns = netns()
        shim.cycles(args.warmup, ns, "warm")
        time.sleep(0.5)
        rss0, fd0 = status(d.pid, "VmRSS"), fds(d.pid)
        trace = [(0, rss0, fd0)]
        step = max(1, args.cycles // 4)
        for k in range(0, args.cycles, step):
            shim.cycles(min(step, args.cycles - k), ns, f"c{k}")
            trace.append((k + min(step, args.cycles - k), status(d.pid, "VmRSS"), fds(d.pid)))
        time.sleep(0.5)
        out["m4"] = trace
        out["m4_end"] = (status(d.pid, "VmRSS"), fds(d.pid))
        out["m4_hwm"] = status(d.pid, "VmHWM")
    finally:
        d.stop()
    d = Daemon(small)  # again: its plan comes from the plan cache
    try:
        d.ready()
        out["m1r"] = d.settle()
    finally:
        d.stop()


def inner(args: argparse.Namespace) -> None:
    from netcomp.shim import install as shimlaunch

    out: dict[str, object] = {}
    bytecode()
    with bench_delegate.lab("mem", "ncm", ("ncmem0v", "ncmem0p")) as (top, netns):
        exe = str(top / "netcomp-c")
        shimlaunch.build(Path(exe), shimlaunch.find_cc() or "cc")

        if not args.only_m3:
            small_rows(top, exe, netns, args, out)

        # (m2) and (m3): N networks.
        big = top / "big"
        big.mkdir()
        many_networks(big, args.count)
        cli_s: list[float] = []
        ready_s: list[float] = []
        rss_ready: list[float] = []
        rss_served: list[float] = []
        rss_edited: list[float] = []
        edit_s: list[float] = []
        hwm: list[float] = []
        libs: list[str] = []
        shim = Shim(big, exe)
        for r in range(args.repeat):
            # Alternated, and in turn which goes first (ABBA: a drift of the machine across the run weighs on
            # both alike); each starts after sync(2), so that neither pays for the writeback of what the one
            # before wrote or removed (10,000 files each).
            for step in ("cli", "daemon") if r % 2 == 0 else ("daemon", "cli"):
                fresh(big)
                os.sync()
                if step == "cli":
                    t = time.perf_counter()
                    subprocess.run(
                        # Into the daemon's own output dir: on ext4, filling a dir again soon after its
                        # 10,000 files were removed gets slower with each time (the second of two daemon starts
                        # read 1.3-1.6 while the CLI wrote elsewhere); the same dir weighs on both alike.
                        [NC, "compile", "--root", str(big), "--out", str(big / "run/netcomp/networks")],
                        check=True,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                    cli_s.append(time.perf_counter() - t)
                    continue
                d = Daemon(big)
                try:
                    ready_s.append(d.ready())
                    if args.only_m3:
                        continue
                    rss_ready.append(d.settle())
                    ns = netns()
                    shim.cycles(20, ns, f"big{r}")
                    rss_served.append(d.settle())
                    hwm.append(status(d.pid, "VmHWM"))
                    libs = mapped_libs(d.pid)
                    edit_s.append(edit(big, args.count // 2))
                    rss_edited.append(d.settle())
                finally:
                    d.stop()
                    if not args.only_m3:
                        edit(big, args.count // 2, undo=True)
        out.update(m3_cli=cli_s, m3_ready=ready_s, m2_ready=rss_ready, m2=rss_served, m2_hwm=hwm, m2_libs=libs)
        out.update(m2e=rss_edited, m2e_s=edit_s)
    report(args, out)


def report(args: argparse.Namespace, out: dict) -> None:
    def verdict(value: float, goal: float) -> str:
        return f"goal <= {goal}  {'ok' if value <= goal else 'MISSED'}"

    print(f"netcomp memory and start-up benchmark, {time.strftime('%Y-%m-%d')}, load {os.getloadavg()[0]:.2f}")
    ready, cli = statistics.median(out["m3_ready"]), statistics.median(out["m3_cli"])
    pairs = [r / c for r, c in zip(out["m3_ready"], out["m3_cli"], strict=True)]
    m3 = (
        f"  (m3) start to READY / compile      {ready:7.2f} s / {cli:.2f} s = {ready / cli:.2f}  "
        f"{verdict(ready / cli, GOALS['m3'])}   (ready {', '.join(f'{v:.2f}' for v in out['m3_ready'])}; "
        f"compile {', '.join(f'{v:.2f}' for v in out['m3_cli'])}; each pair's ratio "
        f"{', '.join(f'{v:.2f}' for v in pairs)})"
    )
    if args.only_m3:
        print(m3)
        return
    print(
        f"  (m1) RSS idle, 2 networks          {out['m1']:7.1f} MB  {verdict(out['m1'], GOALS['m1'])}"
        f"   (at READY=1 {out['m1_at_ready']:.1f} MB, ready in {out['m1_ready_s']:.2f} s)"
    )
    m2 = statistics.median(out["m2"])
    print(
        f"  (m2) RSS {args.count} networks served {m2:6.1f} MB  {verdict(m2, GOALS['m2'])}"
        f"   (median of {args.repeat}: {', '.join(f'{v:.1f}' for v in out['m2'])}; at READY=1 "
        f"{statistics.median(out['m2_ready']):.1f}; peak {statistics.median(out['m2_hwm']):.1f} MB)"
    )
    m2e = statistics.median(out["m2e"])
    print(
        f"  (m2e) the same after one edit      {m2e:7.1f} MB   (no goal; the edit's file in "
        f"{statistics.median(out['m2e_s']) * 1000:.0f} ms, the watcher's 0.1 s debounce included)"
    )
    print(m3)
    trace = out["m4"]
    rss_end, fd_end = out["m4_end"]
    print(
        f"  (m4) {args.cycles} ADD/DEL cycles after {args.warmup}: RSS {trace[0][1]:.1f} -> {rss_end:.1f} MB "
        f"({rss_end - trace[0][1]:+.1f}), fds {trace[0][2]} -> {fd_end}; peak {out['m4_hwm']:.1f} MB"
    )
    print("       " + ", ".join(f"after {k}: {r:.1f} MB {f} fds" for k, r, f in trace))
    print(f"  (m1r) RSS idle, 2 networks, started again (plan from the cache) {out['m1r']:.1f} MB (no goal)")
    print(f"  extension modules mapped: idle {', '.join(out['m1_libs'])}")
    print(f"                            {args.count} networks {', '.join(out['m2_libs'])}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cycles", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--only-m3", action="store_true", help="measure (m3) alone (its pairs only)")
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench/memory.py needs root (network namespaces)")
    if args.inner:
        inner(args)
        return
    bench_delegate.in_host_netns("ncmem", [__file__, "--inner", *sys.argv[1:]])


if __name__ == "__main__":
    main()
