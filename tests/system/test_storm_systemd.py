"""The chaos storm (tests/lab/chaos.py) against the installed package under a real systemd booted with
systemd-nspawn, where systemd, not a test harness, restarts the daemon: ADDs and DELs through the installed shim
(/usr/lib/cni/netcomp, exec'd in the machine's namespaces as a runtime would), from several threads, with the
real plugins (a bridge default network, macvlans, a macvlan over a VXLAN host link netcomp makes, and the chaos
plugin's faulty network: hang, crash, garbage, silent, a DEL failing once), while the daemon's main process is
SIGKILLed with `systemctl kill -s KILL --kill-whom=main netcomp` (an OOM kill: its delegates live on, and
KillMode=mixed must kill them before the restart) and with plain `systemctl kill -s KILL netcomp` (every process
of the unit), and systemd restarts it (Restart=on-failure). Afterwards every container is DELeted as a runtime
would (again until it succeeds): zero interfaces in the container namespaces, zero host links of netcomp's, zero
host-local leases, zero cache entries, no delegate left in the unit's cgroup; no ADD answered success with an
interface or address missing, no address held twice; NRestarts equal to the kills; no traceback in the journal.
That includes the temporary name of a macvlan whose plugin systemd killed between creating and renaming it (its
DEL does not find it; netcomp's undo removes it: docs/reliability.md "Under systemd").

And KillMode=mixed shown doing what docs/reliability.md says: a delegate blocked on a FIFO (ignoring SIGTERM)
when the main process is SIGKILLed is SIGKILLed by systemd at once, the daemon is restarted after RestartSec,
not after TimeoutStopSec; the new daemon undoes the unfinished ADD and the runtime's ADD then succeeds.

Debian 12 is this machine (the package installed here, purged afterwards; the machine boots this /usr); Debian 13
is the cached trixie root on a throw-away overlay (debpackage.installed_machine). Everything the test makes lives in the
machine (namespaces, links, leases) and goes with it."""

from __future__ import annotations

import json
import random
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest

from tests.lab.chaos import CHAOS_PLUGIN, Container, Report, Storm, make_containers, namespace
from tests.lab.debpackage import NSBRIDGE, Dist, installed_machine
from tests.lab.intents import intent
from tests.lab.nspawn import Machine
from tests.lab.poll import until

pytestmark = pytest.mark.root

SHIMCONF = json.dumps({"cniVersion": "1.0.0", "name": "netcomp", "type": "netcomp", "readyTimeout": 30}).encode()
PLUGINS = "/etc/netcomp/plugins"  # the test's plugins; read-only to the unit (ProtectSystem=strict), as /usr is
STATE = "/var/lib/cni/netcomp-test"  # what they write: /var/lib/cni is one of the unit's ReadWritePaths
LEASES = "/var/lib/cni/networks"
CACHE = "/var/lib/netcomp/cache"
UNIT = "netcomp.service"
# systemd's default start limit (DefaultStartLimitBurst=5 in DefaultStartLimitIntervalSec=10s): a sixth start
# within 10 s fails the unit for good. The killer keeps under it (a node OOM-killing netcomp that often would
# see the unit fail, which is systemd's choice, not this test's subject).
START_BURST, START_INTERVAL, RESTART_SEC = 5, 10.0, 1.0


def macvlan(subnet: str, extra: str = "") -> str:
    return f"{{type: macvlan, hostDevice: m0, {extra}ipam: {{type: host-local, subnet: {subnet}}}}}"


def static_conflist(name: str, plugin: str, subnet: str) -> str:
    conf = {
        "cniVersion": "1.0.0",
        "name": name,
        "plugins": [
            {"type": plugin, "master": "m0", "mode": "bridge", "ipam": {"type": "host-local", "subnet": subnet}}
        ],
    }
    return json.dumps(conf)


def configure(
    m: Machine, networks: dict[str, str], plugins: dict[str, str], *, settings: str = "", bridge: str = "10.201.0.0/24"
) -> None:
    """netcomp.yaml, the default network (mgmt: a bridge on `bridge`), `networks` (name -> intent spec), the test's
    `plugins` (name -> script) and a macvlan master m0 in the machine; then start the units (Type=notify: READY=1)."""
    m.put("/etc/netcomp/netcomp.yaml", f"defaultNetwork: mgmt\npluginDirs: [{PLUGINS}, /usr/lib/cni]\n{settings}")
    (plugin,) = NSBRIDGE["plugins"]
    conf = {**NSBRIDGE, "plugins": [{**plugin, "ipam": {"type": "host-local", "subnet": bridge}}]}
    m.put("/etc/netcomp/static.d/nsbridge.conflist", json.dumps(conf))
    for name, spec in {"mgmt": "{type: static, networkID: nsbridge}", **networks}.items():
        m.put(f"/etc/netcomp/networks.d/{name}.yaml", intent(name, spec))
    for name, script in plugins.items():
        m.put(f"{PLUGINS}/{name}", script)
        m.run("chmod", "0755", f"{PLUGINS}/{name}")
    m.run("mkdir", "-p", STATE)
    m.run("ip", "link", "add", "m0", "type", "veth", "peer", "name", "m0p")
    for dev in ("m0", "m0p"):
        m.run("ip", "link", "set", dev, "up")
    m.run("systemctl", "start", "netcomp.socket", UNIT)
    assert m.show(UNIT, "ActiveState") == "active"


@dataclass
class MachineNode:
    """The machine as a storm's Node (chaos.Node): the installed shim exec'd in the machine's namespaces."""

    m: Machine

    def request(self, verb: str, c: Container) -> tuple[int, Any]:
        env = {
            "CNI_COMMAND": verb,
            "CNI_CONTAINERID": f"ctr-{c.name}",
            "CNI_NETNS": f"/run/netns/{c.name}",
            "CNI_IFNAME": "eth0",
            "CNI_ARGS": c.args if verb == "ADD" else "",
            "CNI_PATH": "/usr/lib/cni",
        }
        p = self.m.run("/usr/lib/cni/netcomp", input=SHIMCONF, env=env, check=False)
        out = p.stdout.decode().strip()
        return p.returncode, json.loads(out) if out else None

    def ip(self, *args: str) -> str:
        return self.m.text("ip", *args)


def lease_files(m: Machine) -> dict[str, str]:
    """host-local's lease files left, with what each holds: the container ID and interface it was given to, or
    nothing. host-local creates the file, then writes whose it is (plugins/ipam/host-local/backend/disk), so one
    SIGKILLed between the two leaves a reservation no DEL can release, whoever ran it (a runtime directly too)."""
    found = m.text("find", LEASES, "-type", "f")
    left = [f for f in found.splitlines() if not f.rsplit("/", 1)[-1].startswith(("last_reserved_ip", "lock"))]
    return {f: m.text("head", "-c", "200", f) for f in left}


def leases(m: Machine) -> list[str]:
    return [f"{f} {v!r}" for f, v in lease_files(m).items()]


def cache_entries(m: Machine) -> list[str]:
    return m.text("find", CACHE, "-name", "*.json").splitlines()


def owned_host_links(m: Machine) -> list[str]:
    out = m.text("ip", "-d", "-o", "link", "show")
    return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if "netcomp:owned" in line]


def unit_processes(m: Machine) -> list[str]:
    """The PIDs in the unit's cgroup (systemd's own hierarchy: cgroup2 on a unified or a hybrid layout)."""
    cg = m.show(UNIT, "ControlGroup")
    out = m.run(
        "sh", "-c", 'cat "/sys/fs/cgroup/unified$1/cgroup.procs" || cat "/sys/fs/cgroup$1/cgroup.procs"', "sh", cg
    )
    return out.stdout.decode().split()


def alive(m: Machine, pid: str) -> bool:
    """Not yet reaped nor a zombie (the machine's PID namespace)."""
    p = m.run("cat", f"/proc/{pid}/stat", check=False)
    return p.returncode == 0 and p.stdout.decode().rsplit(")", 1)[-1].split()[0] != "Z"


def restarted(m: Machine, old_main: str) -> bool:
    main = m.show(UNIT, "MainPID")
    return m.show(UNIT, "ActiveState") == "active" and main not in ("0", old_main)


def journal(m: Machine) -> str:
    return m.text("journalctl", "-u", UNIT, "--no-pager", "-o", "cat")


def logged_at(m: Machine, text: str) -> float:
    """When (CLOCK_MONOTONIC, s) the unit's journal last had a line containing `text`."""
    out = m.text("journalctl", "-u", UNIT, "--no-pager", "-o", "json", "--output-fields=MESSAGE")
    times = [
        int(e["__MONOTONIC_TIMESTAMP"]) / 1e6
        for e in map(json.loads, out.splitlines())
        if isinstance(e.get("MESSAGE"), str) and text in e["MESSAGE"]
    ]
    assert times, f"no journal line with {text!r}"
    return times[-1]


# ------------------------------------------------------------------------------------------------- the storm


class SystemdKiller:
    """SIGKILLs the daemon through systemd every 0.5 to 2.5 s of its being up, `kills` times; every third kill
    (and the first) is plain `systemctl kill` (the whole unit), the others `--kill-whom=main`. Waits for
    systemd to restart it after each, recording how long that took, and keeps under the start limit."""

    def __init__(self, m: Machine, storm: Storm, kills: int, rng: random.Random) -> None:
        self.m, self.storm, self.kills, self.rng = m, storm, kills, rng
        self.starts: list[float] = [time.monotonic()]  # when the unit was seen active with a new main PID
        self.restart_seconds: list[float] = []
        self.error: str | None = None

    def run(self) -> None:
        try:
            for k in range(self.kills):
                self.storm.stop.wait(self.rng.uniform(0.5, 2.5))  # the storm meanwhile: pacing, not waiting on it
                if len(self.starts) >= START_BURST:  # the start this kill causes must not be a sixth in 10 s
                    self.storm.stop.wait(
                        max(0.0, self.starts[-START_BURST] + START_INTERVAL - RESTART_SEC + 0.5 - time.monotonic())
                    )
                whom = "all" if k % 3 == 0 else "main"
                main = self.m.show(UNIT, "MainPID")
                t0 = time.monotonic()
                self.m.run("systemctl", "kill", "-s", "KILL", f"--kill-whom={whom}", "netcomp")
                with self.storm.lock:
                    self.storm.report.kills[whom] += 1
                until(lambda main=main: restarted(self.m, main), "timed out waiting for systemd to restart netcomp", 30)
                self.starts.append(time.monotonic())
                self.restart_seconds.append(self.starts[-1] - t0)
        except Exception as e:  # a restart that never came fails the test, after the storm is wound down
            self.error = repr(e)
        finally:
            self.storm.stop.set()


def storm_networks(m: Machine) -> dict[str, str]:
    """The chaos run's networks (tests/lab/chaos.py): besides the default, two macvlans, a macvlan over a VXLAN
    host link netcomp makes, and the chaos plugin's faulty network."""
    m.put("/etc/netcomp/static.d/faulty.conflist", static_conflist("faulty", "chaos", "10.209.0.0/22"))
    return {
        "storage": macvlan("10.202.0.0/24", "interfacePrefix: stor, "),
        "backup": macvlan("10.203.0.0/24", "interfacePrefix: stor, mode: private, "),
        "tunnel": macvlan("10.204.0.0/24", "vxlan: {vni: 4242, group: 239.1.1.42}, interfacePrefix: tun, "),
        "faulty": "{type: static, networkID: faulty}",
    }


def count_leftovers(m: Machine, containers: list[Container]) -> dict[str, list[str]]:
    """What the storm left once every container was DELeted: each a list, all to be empty."""
    interfaces = []
    for c in containers:
        ifaces = namespace(MachineNode(m), c.name)
        kinds = {
            x["ifname"]: x.get("linkinfo", {}).get("info_kind", "")
            for x in json.loads(m.text("ip", "-d", "-j", "-n", c.name, "link", "show"))
        }
        for name, addrs in ifaces.items():
            if name == "lo":
                continue
            interfaces.append(f"{c.name}:{name} ({kinds.get(name)}, {addrs or 'no address'})")
    main = m.show(UNIT, "MainPID")
    files = lease_files(m)
    owned = [f"{f} {v!r}" for f, v in files.items() if v]
    half_made = [f for f, v in files.items() if not v]
    return {
        "interfaces": interfaces,
        "hostLinks": owned_host_links(m),
        "leases": owned,
        "halfMadeLeases": half_made,  # host-local's own race (leases' docstring): reported, not netcomp's leak
        "cacheEntries": cache_entries(m),
        "delegates": [p for p in unit_processes(m) if p != main],  # none left running in the unit's cgroup
    }


@pytest.mark.parametrize("kills", [12])
def test_storm_under_systemd_leaves_nothing(dist: Dist, request: pytest.FixtureRequest, kills: int) -> None:
    t0 = time.monotonic()
    seed, containers, workers = 9, 15, 5
    rng = random.Random(seed)
    with installed_machine(dist, request) as m:
        chaos = CHAOS_PLUGIN.replace("@STATE@", STATE).replace("@PLUGIN@", "/usr/lib/cni")
        # pluginTimeout: the chaos plugin's "hang" fault is killed after 3 s, not the default 60. The default
        # network's range is small (29 addresses), so host-local hands each address out again every few dozen
        # ADDs: an address freed too early (or never freed) shows as an address held twice.
        settings = "pluginTimeout: 3\n"
        configure(m, storm_networks(m), {"chaos": chaos}, settings=settings, bridge="10.201.0.0/27")
        restarts_before = int(m.show(UNIT, "NRestarts"))

        def netns(suffix: str) -> str:
            name = f"st{len(made):02d}{suffix}"
            m.run("ip", "netns", "add", name)
            made.append(name)
            return name

        made: list[str] = []
        report = Report(seed, containers)
        storm = Storm(MachineNode(m), make_containers(containers, netns), rng, report)
        killer = SystemdKiller(m, storm, kills, rng)
        threads = storm.start_workers(workers, seed)
        killer.run()  # until the last kill's restart; then the workers finish what they are doing
        for t in threads:
            t.join()
        storm.done.set()
        assert killer.error is None, killer.error

        # The storm is over: every container DELeted as a runtime would, again until it succeeds.
        storm.delete_all()
        # The tunnel's VXLAN host link goes once no network names it.
        m.run("rm", "/etc/netcomp/networks.d/tunnel.yaml")
        m.run("systemctl", "reload", "netcomp")
        until(
            lambda: (
                "tunnel" not in {n["name"] for n in json.loads(m.text("netcomp", "status", "-o", "json"))["networks"]}
            ),
            "timed out waiting for the reload to drop the tunnel network",
        )
        report.leftovers = count_leftovers(m, storm.containers)
        restarts = int(m.show(UNIT, "NRestarts")) - restarts_before
        report.starts = 1 + restarts
        log = journal(m)
        report.seconds = time.monotonic() - t0
        waits = sorted(killer.restart_seconds)
        doc = {
            **report.as_dict(),
            "dist": dist.name,
            "nRestarts": restarts,
            "restartSeconds": {"median": round(waits[len(waits) // 2], 2), "max": round(waits[-1], 2)},
            # delegates systemd SIGKILLed once the main process was gone (KillMode=mixed), by name
            "killedBySystemd": dict(Counter(re.findall(r"Killing process \d+ \((\S+)\) with signal SIGKILL", log))),
            "recoveries": log.count("recovered "),
        }
        print(json.dumps(doc, indent=2))

    assert doc["kills"] == kills and report.kills["all"] >= 1 and report.kills["main"] >= 1
    assert restarts == kills, "systemd restarted the daemon other than after the test's kills (a crash, the watchdog)"
    assert report.violations == [], report.violations
    assert report.requests["ADD ok"] > 0 and report.requests["DEL ok"] > 0, doc
    left = {k: n for k, n in doc["leftovers"].items() if k != "halfMadeLeases"}
    assert left == {"interfaces": 0, "hostLinks": 0, "leases": 0, "cacheEntries": 0, "delegates": 0}, doc
    assert "Traceback" not in log
    # systemd emptied the unit's cgroup before every restart (KillMode=mixed): the daemon never found one of its
    # predecessor's delegates still running (it would kill it, and say so).
    assert "delegate processes an earlier netcomp daemon left running" not in log


# --------------------------------------------------------------------------------------- KillMode=mixed

# The first ADD of a container does the real macvlan plugin's work, then blocks on a FIFO nobody writes, deaf to
# SIGTERM (and SIGHUP): only a SIGKILL ends it. Later ADDs of it go straight through.
BLOCKING_PLUGIN = f"""#!/bin/sh
trap '' TERM HUP
st={STATE}
if [ "$CNI_COMMAND" = ADD ] && [ ! -e "$st/$CNI_CONTAINERID.pid" ]; then
  /usr/lib/cni/macvlan > "$st/$CNI_CONTAINERID.out" || exit 1
  echo $$ > "$st/$CNI_CONTAINERID.pid"
  read x < "$st/fifo"
  cat "$st/$CNI_CONTAINERID.out"
  exit 0
fi
exec /usr/lib/cni/macvlan
"""


def test_killmode_mixed_kills_a_blocked_delegate_and_restarts_promptly(
    dist: Dist, request: pytest.FixtureRequest
) -> None:
    with installed_machine(dist, request) as m:
        m.put("/etc/netcomp/static.d/blocky.conflist", static_conflist("blocky", "blocky", "10.208.0.0/24"))
        configure(m, {"blocky": "{type: static, networkID: blocky}"}, {"blocky": BLOCKING_PLUGIN})
        m.run("mkfifo", f"{STATE}/fifo")
        m.run("ip", "netns", "add", "k1")
        target = MachineNode(m)
        c = Container("k1", "blocky")
        answer: dict[str, tuple[int, Any]] = {}
        add = threading.Thread(target=lambda: answer.update(first=target.request("ADD", c)))
        add.start()
        try:
            # The blocking delegate has done the macvlan's work, and the default network's delegate (run beside
            # it) has finished: the unfinished ADD made real interfaces and took real leases.
            until(
                lambda: (
                    m.run("test", "-s", f"{STATE}/ctr-k1.pid", check=False).returncode == 0
                    and all(namespace(target, "k1").get(i) for i in ("eth0", "net0"))
                    and len(leases(m)) == 2
                ),
                "timed out waiting for the delegate to block, the other to finish",
            )
            blocked = m.text("cat", f"{STATE}/ctr-k1.pid")
            assert blocked in unit_processes(m)

            main = m.show(UNIT, "MainPID")
            t0 = time.monotonic()
            m.run("systemctl", "kill", "-s", "KILL", "--kill-whom=main", "netcomp")
            until(lambda: restarted(m, main), "timed out waiting for systemd to restart netcomp", 40)
            seconds = time.monotonic() - t0
        finally:
            add.join(timeout=120)
        # systemd killed it, not the new daemon's own sweep for its predecessor's delegates, and at once.
        after = logged_at(m, f"Killing process {blocked} (blocky) with signal SIGKILL") - logged_at(
            m, "Main process exited, code=killed, status=9/KILL"
        )
        print(
            f"{dist.name}: the blocked delegate killed {after * 1000:.1f} ms after the main process exited, "
            f"the daemon active again {seconds:.2f} s after the kill; the shim's ADD exited {answer['first'][0]}"
        )
        assert 0 <= after < 1, after
        # Promptly: RestartSec (1 s) and a start, not TimeoutStopSec (45 s) waiting on a delegate deaf to SIGTERM.
        assert seconds < 10, seconds
        assert m.show(UNIT, "NRestarts") == "1"
        assert not alive(m, blocked)
        log = journal(m)
        assert "delegate processes an earlier netcomp daemon left running" not in log
        assert "recovered 1 containers an earlier daemon left mid-ADD: 2 attachments undone, 0 still failing" in log

        # The runtime's ADD: the shim posts it again to the new daemon (the old one had said 102 Processing);
        # were it answered with an error, the runtime would retry, as here.
        rc, res = answer["first"]
        tries = 1
        while rc != 0 and tries < 5:
            rc, res = target.request("ADD", c)
            tries += 1
        assert rc == 0, res
        ifaces = namespace(target, "k1")
        assert {"eth0", "net0"} <= set(ifaces) and all(ifaces[i] for i in ("eth0", "net0")), ifaces
        assert len(leases(m)) == 2  # the undone ADD's leases were freed, the retried ADD holds two
        assert len(cache_entries(m)) == 1

        rc, res = target.request("DEL", c)
        assert rc == 0, res
        assert set(namespace(target, "k1")) == {"lo"}
        assert leases(m) == [] and cache_entries(m) == []
        assert "Traceback" not in journal(m)
