"""A daemon that can be killed at any instant and loses nothing (docs/reliability.md): each repro of the
crash-safety issue as a test, with the real shim, the real daemon (a process of its own where it must die), the
Debian CNI plugins, and network namespaces the tests make."""

from __future__ import annotations

import concurrent.futures
import json
import os
import threading
from pathlib import Path

import pytest

from tests.lab.checkout import ROOT
from tests.lab.daemonlab import DaemonLab, daemon_lab
from tests.lab.netlab import PLUGIN_DIR, ip
from tests.lab.procdaemon import ProcNode, proc_node

pytestmark = pytest.mark.root
FIXTURES = ROOT / "tests" / "fixtures"


def gated_plugin(base: Path, wrapped: str = "macvlan") -> tuple[Path, Path, Path]:
    """A plugin dir with `gated`, which on ADD says it has arrived (a line to the `arrived` FIFO), waits for a
    line on the `gate` FIFO, then execs the real `wrapped` plugin: the test decides when the delegate runs and
    knows when it is running, without timing anything."""
    d = base / "plugins"
    d.mkdir()
    arrived, gate = base / "arrived.fifo", base / "gate.fifo"
    os.mkfifo(arrived)
    os.mkfifo(gate)
    script = d / "gated"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$CNI_COMMAND" = ADD ]; then echo here > {arrived}; read -r line < {gate}; fi\n'
        f"exec {PLUGIN_DIR}/{wrapped}\n"
    )
    script.chmod(0o755)
    return d, arrived, gate


def add_gated_network(base: Path, master: str) -> None:
    conf = {
        "cniVersion": "1.0.0",
        "name": "gated",
        "plugins": [
            {
                "type": "gated",
                "master": master,
                "ipam": {"type": "host-local", "dataDir": f"{base}/ipam", "subnet": "10.88.0.0/24"},
            }
        ],
    }
    (base / "static.d" / "gated.conflist").write_text(json.dumps(conf))
    (base / "networks.d" / "90-gated.yaml").write_text(
        "apiVersion: netcomp.io/v1\nkind: Network\nmetadata: {name: gated}\nspec: {type: static, networkID: gated}\n"
    )


def wait_line(fifo: Path) -> None:
    with open(fifo) as f:  # blocks until the plugin writes: it is running now
        assert f.readline() == "here\n"


def open_gate(gate: Path) -> None:
    with open(gate, "w") as f:
        f.write("go\n")


def nothing_left(node: ProcNode | DaemonLab, containers: list[str]) -> None:
    lab = node.lab
    for ctr in containers:
        assert lab.links(ctr) == ["lo"], ctr
    assert node.leases() == []
    assert node.cache_files() == []


# ------------------------------------------------------------------------------------------------ repro 1


def test_daemon_killed_while_a_delegate_runs(tmp_path: Path) -> None:
    """The daemon dies while a delegate of an ADD is running (that delegate lives on: its own process group).
    The new daemon kills it, undoes what the record says was about to be attached, and the shim's retry of the
    same ADD then succeeds; DEL leaves nothing."""
    plugins, arrived, gate = gated_plugin(tmp_path)
    with proc_node(tmp_path, extra={"pluginDirs": [str(plugins), PLUGIN_DIR], "defaultNetwork": None}) as node:
        add_gated_network(tmp_path, node.lab.master)
        node.restart()
        ctr = node.lab.container()
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            add = pool.submit(node.shim, "ADD", ctr, args="NETCOMP_NETWORKS=gated")
            wait_line(arrived)  # the delegate runs, blocked at the gate
            node.kill()
            node.start(wait=False)
            wait_line(arrived)  # the shim posted the ADD again; the new daemon runs it
            open_gate(gate)
            rc, res = add.result(timeout=120)
        assert rc == 0, (res, node.logs())
        assert sorted(node.lab.links(ctr)) == ["lo", "net0"]
        assert node.leases() == ["gated/10.88.0.2"]  # one address: the first ADD's was freed, or never taken
        logs = node.logs()
        assert "killed 1 delegate processes an earlier netcomp daemon left running" in logs
        assert "recovered 1 containers an earlier daemon left mid-ADD: 1 attachments undone, 0 still failing" in logs
        rc, res = node.shim("DEL", ctr)
        assert rc == 0, res
        nothing_left(node, [ctr])


def halfway_plugin(base: Path, master: str) -> tuple[Path, Path]:
    """A plugin dir with `halfway`, which on ADD does the first half of what macvlan does (the link made in the
    container's namespace under a temporary name, as macvlan's `veth` + 8 hex digits), says so on the `arrived`
    FIFO, and never does the second half (it blocks until killed); its DEL, and any later ADD, are the real
    macvlan's, whose DEL looks for the final name only."""
    d = base / "plugins"
    d.mkdir()
    arrived = base / "arrived.fifo"
    os.mkfifo(arrived)
    never = base / "never.fifo"
    os.mkfifo(never)
    script = d / "halfway"
    once = base / "halfway.done"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$CNI_COMMAND" = ADD ] && [ ! -e {once} ]; then\n'
        f"  touch {once}\n"
        f"  ip link add vethc0ffee01 link {master} type macvlan mode bridge\n"
        '  ip link set vethc0ffee01 netns "$(basename "$CNI_NETNS")"\n'
        f"  echo here > {arrived}; read -r line < {never}; exit 1\n"
        "fi\n"
        f"exec {PLUGIN_DIR}/macvlan\n"
    )
    script.chmod(0o755)
    (base / "static.d" / "halfway.conflist").write_text(
        json.dumps({"cniVersion": "1.0.0", "name": "halfway", "plugins": [{"type": "halfway", "master": master}]})
    )
    (base / "networks.d" / "90-halfway.yaml").write_text(
        "apiVersion: netcomp.io/v1\nkind: Network\nmetadata: {name: halfway}\n"
        "spec: {type: static, networkID: halfway}\n"
    )
    return d, arrived


def test_a_plugin_killed_half_way_leaves_no_interface_on_timeout(tmp_path: Path) -> None:
    """A delegate killed by pluginTimeout after making its link under a temporary name: its DEL does not find
    it; the rollback removes it (it is new since the ADD began and no attachment's)."""
    with daemon_lab(tmp_path, extra={"pluginTimeout": 3.0, "defaultNetwork": None}) as dl:
        plugins, arrived = halfway_plugin(tmp_path, dl.lab.master)
        dl.settings = dl.settings.model_copy(update={"pluginDirs": [str(plugins), PLUGIN_DIR]})
        dl.restart()
        ctr = dl.lab.container()
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            add = pool.submit(dl.shim, "ADD", ctr, args="NETCOMP_NETWORKS=halfway")
            wait_line(arrived)
            assert "vethc0ffee01" in dl.lab.links(ctr)  # the first half is done
            rc, res = add.result(timeout=120)
        assert rc == 1 and "timed out" in res["msg"], res
        assert dl.lab.links(ctr) == ["lo"]
        assert dl.cache_files() == []


def test_a_plugin_killed_half_way_with_the_daemon_leaves_no_interface(tmp_path: Path) -> None:
    """As systemd's KillMode=mixed does, or the next daemon's start: the delegates killed along with the
    daemon while one has made its link under a temporary name. The next daemon undoes the ADD and removes the
    link."""
    extra = {"defaultNetwork": None, "pluginDirs": [str(tmp_path / "plugins"), PLUGIN_DIR]}
    with proc_node(tmp_path, extra=extra, setup=lambda base, lb: halfway_plugin(base, lb.master)) as node:
        ctr = node.lab.container()
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            add = pool.submit(node.shim, "ADD", ctr, args="NETCOMP_NETWORKS=halfway")
            wait_line(tmp_path / "arrived.fifo")
            node.kill()
            node.start()  # kills the delegate the killed daemon left, then recovers
            rc, res = add.result(timeout=120)  # the shim posted it again: the real macvlan this time
        assert rc == 0, (res, node.logs())
        assert sorted(node.lab.links(ctr)) == ["lo", "net0"], node.logs()  # and no vethc0ffee01
        assert "interfaces a killed plugin left in its namespace: vethc0ffee01 (macvlan) deleted" in node.logs()
        assert node.shim("DEL", ctr)[0] == 0
        assert node.lab.links(ctr) == ["lo"] and node.cache_files() == []


@pytest.mark.parametrize("point", ["after-write-ahead", "between-delegates", "mid-outcome", "before-answer"])
def test_daemon_killed_at_each_point_of_an_add(tmp_path: Path, point: str) -> None:
    """NETCOMP_CRASH_AT kills the daemon exactly there, in an ADD of two networks (mid-outcome: with half of the
    record of their outcome appended); a new daemon starts, as systemd's Restart= would, and the shim's retry
    gets a complete ADD: both interfaces, one address each."""
    with proc_node(tmp_path, env={"NETCOMP_CRASH_AT": point}) as node:
        ctr = node.lab.container()
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            add = pool.submit(node.shim, "ADD", ctr, args="NETCOMP_NETWORKS=storage")
            assert node.proc is not None
            assert node.proc.wait(timeout=60) == -9, node.logs()  # it died at the point
            if point == "mid-outcome":  # the entry ends in half a record, which the next daemon ignores
                [entry] = node.cache_files()
                data = (node.cache_dir / entry).read_bytes()
                assert data.count(b"\x1e") == 1 and not data.endswith(b"\n"), data[-80:]
            node.env.pop("NETCOMP_CRASH_AT", None)
            node.start(wait=False)
            rc, res = add.result(timeout=120)
        assert rc == 0, (res, node.logs())
        assert sorted(node.lab.links(ctr)) == ["eth0", "lo", "stor0"]
        assert len(node.leases()) == 2 and len(node.cache_files()) == 1
        assert node.lab.addrs(ctr, "eth0") == [res["ips"][0]["address"]]
        rc, res = node.shim("DEL", ctr)
        assert rc == 0, res
        nothing_left(node, [ctr])


def test_daemon_killed_in_the_middle_of_a_del(tmp_path: Path) -> None:
    """Killed after the delegates' DEL ran but before the record was updated: the shim's retry DELs again
    (plugins tolerate it) and reports success only then."""
    with proc_node(tmp_path) as node:
        ctr = node.lab.container()
        assert node.shim("ADD", ctr, args="NETCOMP_NETWORKS=storage,backup")[0] == 0
        node.restart(NETCOMP_CRASH_AT="after-del")
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            delete = pool.submit(node.shim, "DEL", ctr)
            assert node.proc is not None and node.proc.wait(timeout=60) == -9, node.logs()
            node.start(wait=False)
            rc, res = delete.result(timeout=120)
        assert rc == 0, res
        nothing_left(node, [ctr])


# ------------------------------------------------------------------------------------------------ repro 2


def test_del_with_the_daemon_down_is_try_again_and_nothing_is_lost(tmp_path: Path) -> None:
    with proc_node(tmp_path) as node:
        ctr = node.lab.container()
        assert node.shim("ADD", ctr)[0] == 0
        node.kill()
        rc, err = node.shim("DEL", ctr, ready_timeout=0.5)
        assert rc == 1 and err["code"] == 11 and "did not run to the end" in err["details"]
        assert sorted(node.lab.links(ctr)) == ["eth0", "lo"] and len(node.cache_files()) == 1
        node.start()
        assert node.shim("DEL", ctr)[0] == 0
        nothing_left(node, [ctr])


# ------------------------------------------------------------------------------------------------ repro 4


def test_del_acts_on_the_namespace_add_recorded_not_on_the_path_given(tmp_path: Path) -> None:
    """DEL of x1 given x2's netns path: x1's interfaces go (found in x1's own namespace), x2 keeps everything.
    Then x2's namespace is replaced by a new one at the same path: x2's DEL frees its addresses and touches
    nothing in the new namespace."""
    with daemon_lab(tmp_path) as dl:
        x1, x2 = dl.lab.container(), dl.lab.container()
        assert dl.shim("ADD", x1, args="NETCOMP_NETWORKS=storage")[0] == 0
        assert dl.shim("ADD", x2, args="NETCOMP_NETWORKS=storage")[0] == 0
        assert dl.shim("DEL", x1, netns=f"/var/run/netns/{x2}")[0] == 0
        assert dl.lab.links(x1) == ["lo"]
        assert sorted(dl.lab.links(x2)) == ["eth0", "lo", "stor0"]
        assert len(dl.leases()) == 2  # x2's two addresses only
        ip("netns", "del", x2)
        ip("netns", "add", x2)  # a new namespace at the same path, with an eth0 of its own
        ip("link", "add", "eth0", "type", "veth", "peer", "name", "stor0", netns=x2)
        assert dl.shim("DEL", x2)[0] == 0
        assert sorted(dl.lab.links(x2)) == ["eth0", "lo", "stor0"]  # not ours: untouched
        assert dl.leases() == [] and dl.cache_files() == []


def test_check_of_a_namespace_that_is_gone(dl: DaemonLab) -> None:
    ctr = dl.lab.container()
    assert dl.shim("ADD", ctr)[0] == 0
    ip("netns", "del", ctr)
    ip("netns", "add", ctr)
    rc, err = dl.shim("CHECK", ctr)
    assert rc == 1 and err["code"] == 8 and "is gone" in err["msg"]
    assert dl.shim("DEL", ctr)[0] == 0
    assert dl.leases() == [] and dl.cache_files() == []


@pytest.mark.parametrize("netns", ["relative/ns", "/var/run/netns/../../etc"])
def test_a_del_with_a_bad_netns_path_is_refused(dl: DaemonLab, netns: str) -> None:
    ctr = dl.lab.container()
    assert dl.shim("ADD", ctr)[0] == 0
    rc, err = dl.shim("DEL", ctr, netns=netns)
    assert rc == 1 and err["code"] == 4
    assert sorted(dl.lab.links(ctr)) == ["eth0", "lo"]
    assert dl.shim("DEL", ctr)[0] == 0


# ------------------------------------------------------------------------------------------------ repro 5, 6


def test_restart_with_a_broken_intent_keeps_its_last_good_network(tmp_path: Path) -> None:
    with proc_node(tmp_path) as node:
        good = (tmp_path / "out" / "storage.conflist").read_bytes()
        (tmp_path / "networks.d" / "20-storage.yaml").write_text("apiVersion: netcomp.io/v1\nkind: Network\nspec: [\n")
        (tmp_path / "static.d" / "lab-bridge.conflist").unlink()  # the default network's static file, gone
        node.restart()
        ctr = node.lab.container()
        rc, res = node.shim("ADD", ctr, args="NETCOMP_NETWORKS=storage")
        assert rc == 0, (res, node.logs())
        assert sorted(node.lab.links(ctr)) == ["eth0", "lo", "stor0"]
        assert (tmp_path / "out" / "storage.conflist").read_bytes() == good
        status = json.loads(node.cli("status", "-o", "json").stdout)
        assert status["degraded"] and {n["name"] for n in status["networks"] if n["keptLastGood"]} == {
            "storage",
            "mgmt",
        }
        assert any(d["file"].endswith("20-storage.yaml") and d["line"] == 4 for d in status["diagnostics"])
        assert node.shim("DEL", ctr)[0] == 0
        nothing_left(node, [ctr])


def test_restart_with_a_broken_netcomp_yaml_runs_the_last_good_settings(tmp_path: Path) -> None:
    with proc_node(tmp_path) as node:
        node.config.write_text(node.config.read_text() + "maxInFlight: -1\nnoSuchKey: 1\n")
        node.restart()
        ctr = node.lab.container()
        rc, res = node.shim("ADD", ctr)
        assert rc == 0, (res, node.logs())
        p = node.cli("status")
        assert p.returncode == 0, p.stderr
        assert "netcomp.yaml is broken" in p.stderr and "maxInFlight" in p.stderr
        assert p.stdout.startswith("netcomp ") and ": degraded," in p.stdout.splitlines()[0]
        assert f"{node.config}:" in p.stdout  # the diagnostics, with their position
        assert node.shim("DEL", ctr)[0] == 0


def test_first_start_with_a_broken_netcomp_yaml_and_no_last_good_state(tmp_path: Path) -> None:
    import subprocess

    from tests.lab.checkout import NETCOMP

    cfg = tmp_path / "netcomp.yaml"
    cfg.write_text("maxInFlight: [\n")
    p = subprocess.run(
        [NETCOMP, "daemon", "--config", str(cfg), "--state", str(tmp_path / "state.json")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert p.returncode == 65 and "no last good settings to run with" in p.stderr and "Traceback" not in p.stderr


# ------------------------------------------------------------------------------------------------ cache formats


def test_an_entry_written_before_the_format_had_a_version_is_deleted(tmp_path: Path) -> None:
    """tests/fixtures/cache-entry-v0.json is what netcomp wrote before the write-ahead (made by that code): its
    attachment is real here (a real ADD made it), and DEL frees it."""
    with daemon_lab(tmp_path, extra={"defaultNetwork": None}) as dl:
        ctr = dl.lab.container()
        assert dl.shim("ADD", ctr, args="NETCOMP_NETWORKS=storage")[0] == 0
        [entry] = list(Path(dl.settings.cacheDir).glob("*.json"))
        v0 = (FIXTURES / "cache-entry-v0.json").read_text()
        for k, v in {"@CONTAINER@": f"ctr-{ctr}", "@NETNS@": f"/var/run/netns/{ctr}", "@BASE@": str(tmp_path)}.items():
            v0 = v0.replace(k, v)
        entry.write_text(v0.replace("@MASTER@", dl.lab.master))
        assert dl.daemon.delegator.attachments()["containers"][0]["networks"][0]["interface"] == "stor0"
        rc, res = dl.shim("DEL", ctr)
        assert rc == 0, res
        nothing_left(dl, [ctr])


def test_an_entry_of_an_unknown_kind_is_named_and_kept(dl: DaemonLab) -> None:
    """A kind this netcomp does not read is named (CNI error 5) and the file kept; an entry of version 1 (the
    whole document, written by netcomp before outcome records) is read and DELeted."""
    from netcomp.records.record import Record

    ctr = dl.lab.container()
    assert dl.shim("ADD", ctr)[0] == 0
    [entry] = list(Path(dl.settings.cacheDir).glob("*.json"))
    written = entry.read_bytes()
    head, sep, records = written.partition(b"\x1e")
    assert sep and records.endswith(b"\n")  # the write-ahead, then the ADD's outcome appended
    doc = json.loads(head)
    assert doc["kind"] == "netcompCacheV2" and {a["state"] for a in doc["attachments"]} == {"adding"}
    doc["kind"] = "netcompCacheV9"
    entry.write_bytes(json.dumps(doc).encode() + sep + records)
    rc, err = dl.shim("DEL", ctr)
    assert rc == 1 and err["code"] == 5 and "'netcompCacheV9' is not one this netcomp reads" in err["msg"]
    assert entry.exists() and json.loads(entry.read_bytes().partition(b"\x1e")[0])["kind"] == "netcompCacheV9"
    v1 = json.loads(Record.from_json(written).to_json())
    assert {a["state"] for a in v1["attachments"]} == {"attached"}
    v1["kind"] = "netcompCacheV1"
    entry.write_text(json.dumps(v1))
    assert dl.shim("DEL", ctr)[0] == 0
    nothing_left(dl, [ctr])


def test_write_ahead_refused_on_a_full_disk_runs_no_plugin(tmp_path: Path) -> None:
    """ENOSPC on the cache: the ADD fails with code 5 before any plugin runs; a DEL still works."""
    import subprocess

    cache = tmp_path / "cache"
    cache.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(cache)], check=True, timeout=30)
    try:
        with daemon_lab(tmp_path) as dl:
            ctr = dl.lab.container()
            filler = cache / "filler"
            fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                with pytest.raises(OSError) as full:
                    while True:
                        os.write(fd, b"\0" * 4096)
                assert full.value.errno == 28  # ENOSPC
            finally:
                os.close(fd)
            rc, err = dl.shim("ADD", ctr)
            assert rc == 1 and err["code"] == 5 and "no plugin was run" in err["details"], err
            assert dl.lab.links(ctr) == ["lo"] and dl.leases() == []
            filler.unlink()
            assert dl.shim("ADD", ctr)[0] == 0
            assert dl.shim("DEL", ctr)[0] == 0
            nothing_left(dl, [ctr])
    finally:
        subprocess.run(["umount", str(cache)], check=False, timeout=30)


def test_concurrent_adds_and_dels_of_one_container_are_serialized(dl: DaemonLab) -> None:
    """The lock per container: ADD and DEL racing on one container end in one of two clean states."""
    ctr = dl.lab.container()
    barrier = threading.Barrier(2)

    def go(verb: str) -> int:
        barrier.wait()
        return dl.shim(verb, ctr)[0]

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        list(pool.map(go, ["ADD", "DEL"]))
    attached = dl.cache_files() != []
    assert sorted(dl.lab.links(ctr)) == (["eth0", "lo"] if attached else ["lo"])
    assert len(dl.leases()) == (1 if attached else 0)
    assert dl.shim("DEL", ctr)[0] == 0
    nothing_left(dl, [ctr])
