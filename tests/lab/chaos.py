"""The chaos run: a storm of ADDs and DELs through the real shim, with the real plugins in network namespaces
made here, while the daemon (a process of its own) is SIGKILLed at random moments and at fixed points
(NETCOMP_CRASH_AT), some delegates misbehave (hang, crash, print garbage, print nothing, fail a DEL), and the
cache's disk fills up now and then. Seeded: the same seed makes the same choices (the timing of the machine
still varies what each kill interrupts).

After the storm, everything is DELeted as a runtime would (again until it succeeds) and the leftovers are counted:
interfaces in container namespaces, host links netcomp made, host-local leases, cache entries. All must be zero;
no ADD may have answered success with an interface missing; no address may have been held by two containers.

    python -m tests.lab.chaos --containers 100 --kills 200 --seed 1     # the long run (`make chaos`)

tests/chaos/test_chaos.py runs a short one in `make test`. Needs root, iproute2 and the Debian CNI plugins."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from netcomp.faults import POINTS
from tests.lab.intents import intent
from tests.lab.netlab import PLUGIN_DIR, Lab, ip
from tests.lab.procdaemon import ProcNode, proc_node

FAULTS = ("hang", "crash", "garbage", "silent", "faildel")
NETWORKS = ("storage", "backup", "tunnel")  # what well-behaved containers join besides the default (mgmt)
EXPECTED_IF = {"storage": "stor0", "backup": "stor0", "tunnel": "tun0", "faulty": "net0"}

# A delegate that misbehaves as its container's ID says; around the real macvlan plugin, so that a fault after
# the plugin did its work leaves a real interface and a real lease for the rollback to remove.
CHAOS_PLUGIN = """#!/bin/sh
state=@STATE@
case "$CNI_CONTAINERID" in
  *-hang) if [ "$CNI_COMMAND" = ADD ]; then @PLUGIN@/macvlan; exec sleep 3600; fi ;;
  *-crash) if [ "$CNI_COMMAND" = ADD ]; then @PLUGIN@/macvlan; kill -SEGV $$; fi ;;
  *-garbage) if [ "$CNI_COMMAND" = ADD ]; then @PLUGIN@/macvlan >/dev/null; echo 'not JSON {'; exit 0; fi ;;
  *-silent) if [ "$CNI_COMMAND" = ADD ]; then @PLUGIN@/macvlan >/dev/null; exit 0; fi ;;
  *-faildel)
    if [ "$CNI_COMMAND" = ADD ]; then rm -f "$state/$CNI_CONTAINERID"; fi
    if [ "$CNI_COMMAND" = DEL ] && [ ! -e "$state/$CNI_CONTAINERID" ]; then
      : > "$state/$CNI_CONTAINERID"
      echo '{"cniVersion": "1.0.0", "code": 11, "msg": "chaos: this DEL fails once"}'
      exit 1
    fi ;;
esac
exec @PLUGIN@/macvlan
"""


@dataclass
class Container:
    name: str  # its netns, and (as ctr-<name>) its container ID
    network: str
    fault: str = ""

    @property
    def args(self) -> str:
        return f"NETCOMP_NETWORKS={self.network}"


@dataclass
class Report:
    seed: int
    containers: int
    kills: Counter[str] = field(default_factory=Counter)  # "signal", or the crash point
    starts: int = 0
    requests: Counter[str] = field(default_factory=Counter)  # "<verb> <outcome>"
    disk_full: int = 0
    errors: Counter[str] = field(default_factory=Counter)  # failed requests by what they said
    violations: list[str] = field(default_factory=list)
    leftovers: dict[str, list[str]] = field(default_factory=dict)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "containers": self.containers,
            "kills": sum(self.kills.values()),
            "killsBy": dict(sorted(self.kills.items())),
            "daemonStarts": self.starts,
            "requests": sum(self.requests.values()),
            "requestsBy": dict(sorted(self.requests.items())),
            "diskFullEpisodes": self.disk_full,
            "errors": dict(self.errors.most_common(20)),
            "violations": self.violations,
            "leftovers": {k: len(v) for k, v in self.leftovers.items()},
            "leftoverDetails": {k: v[:10] for k, v in self.leftovers.items() if v},
            "seconds": round(self.seconds, 1),
        }


class Node(Protocol):
    """What a storm needs of the node it runs against: a CNI request through the shim as a runtime makes it, and
    `ip` where the container namespaces are (a process daemon's lab here, a booted machine in tests/system)."""

    def request(self, verb: str, c: Container) -> tuple[int, Any]: ...

    def ip(self, *args: str) -> str: ...


def namespace(node: Node, netns: str) -> dict[str, list[str]]:
    """The interfaces of a container namespace, each with its IPv4 addresses."""
    doc = json.loads(node.ip("-j", "-n", netns, "addr", "show") or "[]")
    return {i["ifname"]: [a["local"] for a in i.get("addr_info", []) if a.get("family") == "inet"] for i in doc}


@dataclass
class ProcTarget:
    """A ProcNode as a storm's Node: the shim exec'd here, `ip` of this machine."""

    node: ProcNode

    def request(self, verb: str, c: Container) -> tuple[int, Any]:
        return self.node.shim(verb, c.name, args=c.args if verb == "ADD" else "", ready_timeout=60)

    def ip(self, *args: str) -> str:
        return ip(*args)


def _setup(base: Path, lb: Lab) -> None:
    plugins = base / "chaos-plugins"
    state = base / "chaos-state"
    plugins.mkdir()
    state.mkdir()
    script = plugins / "chaos"
    script.write_text(CHAOS_PLUGIN.replace("@STATE@", str(state)).replace("@PLUGIN@", PLUGIN_DIR))
    script.chmod(0o755)
    conf = {
        "cniVersion": "1.0.0",
        "name": "faulty",
        "plugins": [
            {
                "type": "chaos",
                "master": lb.master,
                "mode": "bridge",
                "ipam": {"type": "host-local", "dataDir": f"{base}/ipam", "subnet": "10.90.0.0/22"},
            }
        ],
    }
    (base / "static.d" / "faulty.conflist").write_text(json.dumps(conf))
    (base / "networks.d" / "80-faulty.yaml").write_text(intent("faulty", "{type: static, networkID: faulty}"))
    (base / "networks.d" / "40-broken.yaml").unlink()  # a network that cannot work is not this run's subject
    (base / "networks.d" / "50-signal.yaml").unlink()  # ipvlan: this kernel has none
    (base / "networks.d" / "70-tagged.yaml").unlink()  # vlan: likewise
    cache = base / "cache"
    cache.mkdir()
    # The cache on a disk of its own, small, so that the run can fill it.
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", str(cache)], check=True, timeout=30)


class Storm:
    """The runtime's side of a storm: workers ADDing and DELing their own containers through the shim, every ADD
    that answers success checked at once, and the final DEL of everything. What kills the daemon is the caller's
    (ProcStorm below; tests/system/test_storm_systemd.py under systemd)."""

    def __init__(self, target: Node, containers: list[Container], rng: random.Random, report: Report) -> None:
        self.target = target
        self.containers = containers
        self.rng = rng
        self.report = report
        self.lock = threading.Lock()
        self.stop = threading.Event()  # the storm is over: workers finish what they are doing
        self.done = threading.Event()  # the workers have finished: the daemon need not be kept alive
        self.holders: dict[str, str] = {}  # address -> container holding it
        # Containers whose DEL is in flight: its delegate frees their addresses before the DEL is answered (long
        # before, when the daemon is killed in between and the shim waits for the next one), and another
        # container may be given one of them meanwhile.
        self.deleting: set[str] = set()

    # --------------------------------------------------------------------------------------------- workers

    @contextlib.contextmanager
    def _deleting(self, c: Container) -> Iterator[None]:
        """c's DEL in flight, until what it freed is released here too."""
        with self.lock:
            self.deleting.add(c.name)
        try:
            yield
        finally:
            with self.lock:
                self.deleting.discard(c.name)

    def _request(self, verb: str, c: Container) -> tuple[int, Any]:
        rc, res = self.target.request(verb, c)
        outcome = "ok" if rc == 0 else f"code {res.get('code') if isinstance(res, dict) else '?'}"
        with self.lock:
            self.report.requests[f"{verb} {outcome}"] += 1
            if rc != 0:
                msg = res.get("msg", "") if isinstance(res, dict) else str(res)
                self.report.errors[f"{verb} {outcome}: {msg[:120]}"] += 1
        return rc, res

    def _check_attached(self, c: Container, res: Any) -> None:
        want = {"eth0", EXPECTED_IF[c.network]}
        ifaces = namespace(self.target, c.name)
        have = set(ifaces)
        if not want <= have:
            self.report.violations.append(f"{c.name}: ADD ok but interfaces {sorted(have)}, wanted {sorted(want)}")
        got = [ip["address"].split("/")[0] for ip in res.get("ips", [])] if isinstance(res, dict) else []
        addrs = [a for found in ifaces.values() for a in found]
        if not got or not set(got) <= set(addrs):
            self.report.violations.append(f"{c.name}: ADD answered {got}, the namespace has {addrs}")
        with self.lock:
            twice = [(a, other) for a in addrs if (other := self.holders.setdefault(a, c.name)) != c.name]
        for a, other in twice:
            still = a in self._addresses(other)
            with self.lock:
                if not still and other in self.deleting:  # freed by other's DEL, which is not answered yet
                    self.holders[a] = c.name
                    continue
            self.report.violations.append(f"address {a} held by {c.name} and {other} (on {other}'s now: {still})")

    def _addresses(self, netns: str) -> set[str]:
        return {a for found in namespace(self.target, netns).values() for a in found}

    def _release(self, c: Container, keep: Collection[str] = ()) -> None:
        with self.lock:
            for a, holder in list(self.holders.items()):
                if holder == c.name and a not in keep:
                    del self.holders[a]

    def worker(self, mine: list[Container], seed: int) -> None:
        rng = random.Random(seed)
        attached: dict[str, bool] = {c.name: False for c in mine}
        dirty: dict[str, bool] = {c.name: False for c in mine}  # a failed ADD or DEL: DEL before the next ADD
        while not self.stop.is_set():
            c = rng.choice(mine)
            if attached[c.name] or dirty[c.name]:
                with self._deleting(c):
                    rc, _ = self._request("DEL", c)
                    if rc == 0:
                        self._release(c)
                        attached[c.name] = dirty[c.name] = False
                    else:
                        dirty[c.name] = True
                        # DEL is best-effort: the attachments it did remove before one failed are gone, and their
                        # addresses are anyone's again; c still holds what is still on its interfaces.
                        self._release(c, keep=self._addresses(c.name))
            else:
                rc, res = self._request("ADD", c)
                if rc == 0:
                    if c.fault in ("hang", "crash", "garbage", "silent"):
                        self.report.violations.append(f"{c.name}: ADD answered ok from a {c.fault} delegate")
                    self._check_attached(c, res)
                    attached[c.name] = True
                else:
                    dirty[c.name] = True  # as a runtime does: DEL after a failed ADD

    def start_workers(self, workers: int, seed: int) -> list[threading.Thread]:
        """`workers` threads, each with its share of the containers and a seed of its own."""
        threads = [
            threading.Thread(target=self._worker, args=(self.containers[i::workers], seed * 1000 + i))
            for i in range(workers)
        ]
        for t in threads:
            t.start()
        return threads

    def _worker(self, mine: list[Container], seed: int) -> None:
        try:
            self.worker(mine, seed)
        except Exception as e:  # a worker that dies is a failed run, not a quieter storm
            with self.lock:
                self.report.violations.append(f"a worker died: {e!r}")

    def delete_all(self, tries: int = 10) -> None:
        """After the storm: every container DELeted as a runtime would, again until it succeeds."""
        for c in self.containers:
            for _ in range(tries):
                with self._deleting(c):
                    rc, _ = self._request("DEL", c)
                    if rc == 0:
                        self._release(c)
                        break
            else:
                self.report.violations.append(f"{c.name}: DEL did not succeed in {tries} tries")


class ProcStorm(Storm):
    """The daemon's side, for a daemon process of its own: a supervisor that restarts it, a killer, a filler of
    the cache's disk."""

    def __init__(self, node: ProcNode, containers: list[Container], rng: random.Random, report: Report) -> None:
        super().__init__(ProcTarget(node), containers, rng, report)
        self.node = node

    # --------------------------------------------------------------------------------------------- faults

    def supervisor(self) -> None:
        """systemd's Restart=always: whenever the daemon is dead, start it again (after a short random pause),
        sometimes with a crash point armed for its next life. A daemon that exits other than by SIGKILL is a
        violation (a crash of its own)."""
        while not self.done.is_set():
            proc = self.node.proc
            assert proc is not None
            while proc.poll() is None:
                if self.done.wait(0.05):  # the daemon is an external process: its exit is polled
                    return
            log = self.node.log.read_text(errors="replace") if self.node.log else ""
            with self.lock:
                died_at = [p for p in POINTS if f"killing the daemon at {p}" in log]
                if died_at:
                    self.report.kills[died_at[0]] += 1
                elif proc.returncode != -signal.SIGKILL:
                    self.report.violations.append(f"the daemon exited with {proc.returncode}: {log[-2000:]}")
            time.sleep(self.rng.uniform(0.0, 0.3))  # RestartSec
            env = {}
            if self.rng.random() < 0.4 and not self.stop.is_set():
                env["NETCOMP_CRASH_AT"] = f"{self.rng.choice(POINTS)}:{self.rng.randint(1, 6)}"
            self.node.env.pop("NETCOMP_CRASH_AT", None)
            self.node.start(wait=False, **env)
            with self.lock:
                self.report.starts += 1

    def killer(self, kills: int) -> None:
        while not self.stop.is_set() and sum(self.report.kills.values()) < kills:
            time.sleep(self.rng.uniform(0.5, 3.0))  # SIGKILLed every few seconds
            proc = self.node.proc
            if proc is not None and proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGKILL)
                with self.lock:
                    self.report.kills["signal"] += 1
        self.stop.set()

    def filler(self) -> None:
        """Fill the cache's disk now and then, for a moment."""
        path = self.node.cache_dir / ".chaos-filler"
        while not self.stop.wait(self.rng.uniform(2.0, 6.0)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                with contextlib.suppress(OSError):
                    while True:
                        os.write(fd, b"\0" * 65536)
                with self.lock:
                    self.report.disk_full += 1
                self.stop.wait(self.rng.uniform(0.2, 1.0))
            finally:
                os.close(fd)
                path.unlink()


def make_containers(n: int, netns: Callable[[str], str]) -> list[Container]:
    """n containers: one in three joins the faulty network, its name (and so its container ID) ending in the fault
    the chaos plugin acts; the others join one of NETWORKS in turn. `netns(suffix)` makes a namespace, its name
    ending in suffix, and returns the name."""
    ctrs = []
    for i in range(n):
        fault = FAULTS[(i // 3) % len(FAULTS)] if i % 3 == 2 else ""
        name = netns(f"-{fault}" if fault else "")
        ctrs.append(Container(name, "faulty" if fault else NETWORKS[i % len(NETWORKS)], fault))
    return ctrs


def _leftovers(node: ProcNode, containers: list[Container]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {
        "interfaces": [f"{c.name}:{i}" for c in containers for i in namespace(ProcTarget(node), c.name) if i != "lo"],
        "hostLinks": node.owned_host_links(),
        "leases": node.leases(),
        "cacheEntries": node.cache_files(),
    }
    return out


def run(base: Path, *, containers: int, kills: int, seed: int, workers: int = 8) -> Report:
    rng = random.Random(seed)
    report = Report(seed, containers)
    t0 = time.monotonic()
    extra = {"pluginDirs": [str(base / "chaos-plugins"), PLUGIN_DIR], "pluginTimeout": 3, "maxInFlight": 16}
    with _unmounting(base / "cache"), proc_node(base, extra=extra, setup=_setup) as node:
        report.starts = 1
        ctrs = make_containers(containers, lambda suffix: node.lab.container(suffix=suffix))
        storm = ProcStorm(node, ctrs, rng, report)
        helpers = [threading.Thread(target=storm.supervisor), threading.Thread(target=storm.filler)]
        killer = threading.Thread(target=storm.killer, args=(kills,))
        for t in [*helpers, killer]:
            t.start()
        threads = storm.start_workers(workers, seed)
        killer.join()
        storm.stop.set()
        for t in threads:
            t.join()
        storm.done.set()
        for t in helpers:
            t.join()
        # The storm is over: one clean daemon, then every container DELeted as a runtime would, until done.
        node.kill()
        node.start()
        report.starts += 1
        storm.delete_all()
        (base / "networks.d" / "60-tunnel.yaml").unlink()  # its host link goes once no network names it
        node.reload()
        report.leftovers = _leftovers(node, ctrs)
        report.seconds = time.monotonic() - t0
    return report


@contextlib.contextmanager
def _unmounting(path: Path) -> Iterator[None]:
    try:
        yield
    finally:
        subprocess.run(["umount", str(path)], check=False, timeout=30, capture_output=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--containers", type=int, default=100)
    p.add_argument("--kills", type=int, default=200)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workers", type=int, default=8)
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="netcomp-chaos-") as d:
        report = run(Path(d), containers=a.containers, kills=a.kills, seed=a.seed, workers=a.workers)
    doc = report.as_dict()
    print(json.dumps(doc, indent=2))
    clean = not report.violations and not any(report.leftovers.values())
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
