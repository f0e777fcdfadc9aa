"""The Delegator with stand-in plugins, no namespace made: host links held while an ADD is in flight, the record
of a container (cache entries, an ADD's outcome appended to its write-ahead, a record cut short, a full disk, a
cache moved mid-ADD), DEL of a container's networks side by side, and a result nested too deep."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from netcomp.delegate.request import parse_request
from netcomp.errors import DelegateError, HostError
from tests.lab.standins import OWN_NETNS


def _delegator(tmp_path: Path, nets: dict[str, Any], fake_exec: Any, **kw: Any) -> Any:
    """A Delegator over `nets` whose plugins are `fake_exec` (no default network, no interface in any netns)."""
    from netcomp.cni.invoke import Runner
    from netcomp.delegate.delegator import Delegator
    from netcomp.records.files import Records

    return Delegator(
        Runner(["/bin"], exec_=fake_exec),
        Records(tmp_path / "cache"),
        lambda: nets,
        lambda: None,
        lambda netns: set(),
        **kw,
    )


def test_host_links_are_held_while_an_add_is_in_flight(tmp_path: Path) -> None:
    """A compile that drops a network while one of its ADDs runs must not take the link from under the plugin.
    The kernel side (making and removing real links) is tested in tests/integration; here the plugin is a fake
    that runs the link GC in the middle of the ADD, as a concurrent reload would."""
    from netcomp.cni.invoke import ExecResult

    link = {"kind": "vxlan", "name": "vx7", "link": "eth1", "vni": 7}
    conf = {"cniVersion": "1.0.0", "name": "t", "plugins": [{"type": "sh"}], "netcomp": {"hostLink": link}}
    nets: dict[str, dict[str, object]] = {"t": conf}
    host = {"vx7", "vx8"}  # vx8: an earlier network's link, unused
    removed: list[str] = []
    during: list[list[str]] = []

    def fake_exec(argv, env, stdin, timeout):  # type: ignore[no-untyped-def]
        if env["CNI_COMMAND"] == "ADD":
            nets.clear()  # the network is gone from the compiled set...
            during.append(d.gc_host_links())  # ...and the GC runs while this plugin runs
        return ExecResult(0, b'{"cniVersion": "1.0.0"}', b"")

    d = _delegator(
        tmp_path,
        nets,
        fake_exec,
        owned_links=lambda: set(host),
        remove_link=lambda name: (removed.append(name), host.discard(name)),
    )
    req = parse_request(
        {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_NETNS": OWN_NETNS, "CNI_IFNAME": "eth0",
         "CNI_ARGS": "NETCOMP_NETWORKS=t"},
        {"cniVersion": "1.0.0"},
    )  # fmt: skip
    try:
        d.handle(req)
        assert during == [["vx8"]] and removed == ["vx8"]  # vx7 was held by the ADD in flight
        assert d.gc_host_links() == []  # now the cache holds it: container c1 uses it
        d.handle(parse_request({"CNI_COMMAND": "DEL", "CNI_CONTAINERID": "c1", "CNI_IFNAME": "eth0"}, {}))
        assert removed == ["vx8", "vx7"]  # the last user is gone, and no network names it
    finally:
        d.close()


def test_cache_entries_round_trip_and_are_counted_without_reading(tmp_path: Path) -> None:
    from netcomp.records.files import Records
    from netcomp.records.record import Attachment, Record

    cache = Records(tmp_path / "cache")
    assert cache.count() == 0 and cache.entries() == []
    big = {"cniVersion": "1.0.0", "x": 10**30}  # over 64 bits: orjson refuses, the stdlib encoder takes it
    for i, res in enumerate([{"cniVersion": "1.0.0"}, big]):
        cache.save(Record(f"c{i}", "/run/netns/x", "eth0", "1.0.0", [Attachment("n", "eth0", {"a": 1}, res)]))
    (tmp_path / "cache" / ".stray.json.netcomp-tmp").write_text("{")  # a crash's temp file: not an entry
    assert cache.count() == 2
    assert sorted(e.container_id for e in cache.entries()) == ["c0", "c1"]
    loaded = cache.load("c1", "eth0")
    assert loaded is not None and loaded.attachments[0].result == big
    assert (tmp_path / "cache").stat().st_mode & 0o777 == 0o700  # made when first needed, root's only
    import shutil

    shutil.rmtree(tmp_path / "cache")  # removed behind the daemon's back: made again by the next save
    cache.save(Record("c2", "/run/netns/x", "eth0", "1.0.0", [Attachment("n", "eth0", {"a": 1}, {})]))
    assert cache.count() == 1 and (tmp_path / "cache").stat().st_mode & 0o777 == 0o700


def test_an_empty_entry_is_reported_by_a_scan_and_removed_only_by_a_load(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An entry a power cut left empty (zero bytes, or zeros): a scan (listing, GC, start-up; no container lock)
    reports it and leaves it; a load (always under the container's lock) removes it, says so, and reads it as no
    entry. A half-written entry is not empty: it stays an error, kept for the operator."""
    from netcomp.records.files import Records

    cache = Records(tmp_path / "cache")
    cache.directory.mkdir()
    empty, zeros, half = (cache.path(c, "eth0") for c in ("c1", "c2", "c3"))
    empty.write_bytes(b"")
    zeros.write_bytes(b"\0" * 600)
    half.write_bytes(b'{"kind": "netcompCacheV1", "contai')
    entries, broken = cache.scan()
    assert entries == []
    assert sorted((p.name, why.split(" (")[0]) for p, why in broken if "empty" in why) == sorted(
        [(empty.name, "empty"), (zeros.name, "empty")]
    )
    assert empty.exists() and zeros.exists()
    with caplog.at_level(logging.WARNING, logger="netcomp.cache"):
        assert cache.load("c1", "eth0") is None and cache.load("c2", "eth0") is None
    assert not empty.exists() and not zeros.exists()
    assert sum("the machine went down" in r.getMessage() for r in caplog.records) == 2
    with pytest.raises(HostError, match="cannot be read"):
        cache.load("c3", "eth0")
    assert half.exists()


def test_start_up_removes_the_temp_files_a_killed_save_left(tmp_path: Path) -> None:

    d = _delegator(tmp_path, {}, lambda *a: None)
    try:
        d.records.directory.mkdir(parents=True, exist_ok=True)
        stray = d.records.directory / ".0123.json.netcomp-tmp"  # killed between the swap and the removal
        stray.write_text('{"kind": "netcompCacheV1"}')
        kept = d.records.directory / "notes.txt"  # not ours: left alone
        kept.write_text("x")
        assert d.recover()[:2] == (0, 0)
        assert not stray.exists() and kept.exists()
    finally:
        d.close()


def _three_network_delegator(tmp_path: Path, fake_exec):  # type: ignore[no-untyped-def]
    nets = {n: {"cniVersion": "1.0.0", "name": n, "plugins": [{"type": "sh"}]} for n in ("a", "b", "c")}
    d = _delegator(tmp_path, nets, fake_exec)
    env = {"CNI_CONTAINERID": "c1", "CNI_NETNS": OWN_NETNS, "CNI_IFNAME": "eth0", "CNI_ARGS": "NETCOMP_NETWORKS=a,b,c"}
    d.handle(parse_request({**env, "CNI_COMMAND": "ADD"}, {"cniVersion": "1.0.0"}))
    return d, parse_request({**env, "CNI_COMMAND": "DEL"}, {"cniVersion": "1.0.0"})


def test_del_runs_a_containers_networks_side_by_side(tmp_path: Path) -> None:
    """Each of the three DELs waits until all three have started: they pass only if run side by side. The
    plugin is a fake because overlap cannot be observed from real plugins without timing them; the real
    plugins' DELs are tested in tests/integration."""
    from netcomp.cni.invoke import ExecResult

    all_started = threading.Barrier(3, timeout=10)

    def fake_exec(argv, env, stdin, timeout):  # type: ignore[no-untyped-def]
        if env["CNI_COMMAND"] == "DEL":
            all_started.wait()  # BrokenBarrierError (a failed DEL) if the others never start
        return ExecResult(0, b'{"cniVersion": "1.0.0"}', b"")

    d, delete = _three_network_delegator(tmp_path, fake_exec)
    try:
        d.handle(delete)
        assert d.records.count() == 0
    finally:
        d.close()


def test_del_keeps_exactly_the_attachments_whose_del_failed(tmp_path: Path) -> None:
    from netcomp.cni.invoke import ExecResult

    def fake_exec(argv, env, stdin, timeout):  # type: ignore[no-untyped-def]
        if env["CNI_COMMAND"] == "DEL" and env["CNI_IFNAME"] == "net1":  # network b
            return ExecResult(1, b'{"code": 11, "msg": "busy"}', b"")
        return ExecResult(0, b'{"cniVersion": "1.0.0"}', b"")

    d, delete = _three_network_delegator(tmp_path, fake_exec)
    try:
        with pytest.raises(DelegateError) as e:
            d.handle(delete)
        assert (e.value.code, e.value.full_msg) == (11, "network 'b', plugin 'sh': busy")
        entry = d.records.load("c1", "eth0")
        assert entry is not None and [a.network for a in entry.attachments] == ["b"]
    finally:
        d.close()


def test_an_adds_outcome_is_one_record_appended_to_its_write_ahead(tmp_path: Path) -> None:
    """The write-ahead is the whole entry, its attachment `adding`, on disk before the plugin runs; the outcome is
    one RFC 7464 record appended to that same file (its inode kept: no second file made), which a reader applies."""
    from netcomp.cni.invoke import ExecResult
    from netcomp.records.record import RS, Record

    res = b'{"cniVersion": "1.0.0", "ips": [{"address": "10.1.0.5/24"}]}'
    seen: list[tuple[int, bytes]] = []

    def fake_exec(argv, env, stdin, timeout):  # type: ignore[no-untyped-def]
        if env["CNI_COMMAND"] == "ADD":
            path = d.records.path("c1", "eth0")
            seen.append((path.stat().st_ino, path.read_bytes()))
        return ExecResult(0, res, b"")

    nets = {"a": {"cniVersion": "1.0.0", "name": "a", "plugins": [{"type": "sh"}]}}
    d = _delegator(tmp_path, nets, fake_exec)
    env = {"CNI_CONTAINERID": "c1", "CNI_NETNS": OWN_NETNS, "CNI_IFNAME": "eth0", "CNI_ARGS": "NETCOMP_NETWORKS=a"}
    try:
        d.handle(parse_request({**env, "CNI_COMMAND": "ADD"}, {"cniVersion": "1.0.0"}))
        [(ino, ahead)] = seen
        assert RS not in ahead and [a.state for a in Record.from_json(ahead).attachments] == ["adding"]
        path = d.records.path("c1", "eth0")
        data = path.read_bytes()
        assert path.stat().st_ino == ino and data.startswith(ahead) and data.count(RS) == 1 and data.endswith(b"\n")
        entry = d.records.load("c1", "eth0")
        assert entry is not None and [(a.state, a.result) for a in entry.attachments] == [
            ("attached", {"cniVersion": "1.0.0", "ips": [{"address": "10.1.0.5/24"}]})
        ]
        d.handle(parse_request({**env, "CNI_COMMAND": "DEL"}, {"cniVersion": "1.0.0"}))
        assert d.records.count() == 0
    finally:
        d.close()


def test_an_outcome_record_cut_short_is_ignored_and_a_whole_one_that_is_wrong_is_an_error(tmp_path: Path) -> None:
    """A daemon killed in its append leaves a record without its newline, a power cut NUL bytes: the attachment
    stays `adding` (its ADD was never answered) and is undone. A whole record that is not JSON, or names what the
    entry has not begun, is no truncation (a disk fault, a hand edit): the entry cannot be read, and is kept for the
    operator."""
    from netcomp.records.files import Records
    from netcomp.records.record import RS, Attachment, Record

    cache = Records(tmp_path / "cache")
    entry = Record("c1", "/run/netns/x", "eth0", "1.0.0", [Attachment("n", "eth0", {"a": 1})])
    cache.save(entry)
    path = cache.path("c1", "eth0")
    head = path.read_bytes()
    entry.attachments[0].result = {"cniVersion": "1.0.0", "dns": {"search": ["x" * 50] * 100}}  # over a page
    record = entry.outcome(entry.attachments)
    assert record.startswith(RS) and record.endswith(b"\n") and len(record) > 4096
    for tail in (record[:-1], record[: len(record) // 2], RS, b"\0" * len(record), RS + b"\0" * 10):
        path.write_bytes(head + tail)
        loaded = cache.load("c1", "eth0")
        assert loaded is not None and [(a.state, a.result) for a in loaded.attachments] == [("adding", None)], tail[:9]
    for tail in (record + record[:7], record + b"\0" * 300):  # what follows a whole record does not undo it
        path.write_bytes(head + tail)
        loaded = cache.load("c1", "eth0")
        assert loaded is not None and loaded.attachments[0].state == "attached"
        assert loaded.attachments[0].result == entry.attachments[0].result
    path.write_bytes(head + RS + b'{"attached": [{"ifname": "eth0", "netw\n')  # whole, not JSON: not a kill's
    with pytest.raises(HostError, match="not JSON"):
        cache.load("c1", "eth0")
    other = Record("c1", "", "eth0", "1.0.0", [Attachment("n", "net9", {}, {"cniVersion": "1.0.0"})])
    path.write_bytes(head + other.outcome(other.attachments))
    with pytest.raises(HostError, match=r"cannot be read.*net9"):
        cache.load("c1", "eth0")
    assert path.read_bytes() == head + other.outcome(other.attachments)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small tmpfs to fill")
def test_an_outcome_refused_on_a_full_disk_rolls_the_add_back(tmp_path: Path) -> None:
    """ENOSPC on the outcome's append (the plugin filled the disk while it ran): the ADD fails with code 5, its
    delegate is DELeted again, and the entry goes; nothing is answered as attached."""
    import subprocess

    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(cache_dir)], check=True, timeout=30)
    try:
        _full_disk_add(tmp_path, cache_dir)
    finally:
        subprocess.run(["umount", str(cache_dir)], check=False, timeout=30)


def _full_disk_add(tmp_path: Path, cache_dir: Path) -> None:
    from netcomp.cni.invoke import ExecResult

    calls: list[str] = []
    big = b'{"cniVersion": "1.0.0", "dns": {"search": ["' + b"x" * 6000 + b'"]}}'  # its record needs a page more

    def fake_exec(argv, env, stdin, timeout):  # type: ignore[no-untyped-def]
        if env["CNI_COMMAND"] == "VERSION":  # asked once, before the first ADD: says nothing
            return ExecResult(0, b"", b"")
        calls.append(env["CNI_COMMAND"])
        if env["CNI_COMMAND"] == "ADD":
            fd = os.open(cache_dir / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                with pytest.raises(OSError):
                    while True:
                        os.write(fd, b"\0" * 4096)
            finally:
                os.close(fd)
            return ExecResult(0, big, b"")
        return ExecResult(0, b"", b"")

    nets = {"a": {"cniVersion": "1.0.0", "name": "a", "plugins": [{"type": "sh"}]}}
    d = _delegator(tmp_path, nets, fake_exec)
    env = {"CNI_CONTAINERID": "c1", "CNI_NETNS": OWN_NETNS, "CNI_IFNAME": "eth0", "CNI_ARGS": "NETCOMP_NETWORKS=a"}
    try:
        with pytest.raises(DelegateError) as e:
            d.handle(parse_request({**env, "CNI_COMMAND": "ADD"}, {"cniVersion": "1.0.0"}))
        assert e.value.code == 5 and "cannot write the attachment cache" in e.value.full_msg
        assert calls == ["ADD", "DEL"] and d.records.load("c1", "eth0") is None and d.records.count() == 0
    finally:
        d.close()


def test_an_outcome_follows_the_cache_moved_while_the_delegates_ran(tmp_path: Path) -> None:
    """A SIGHUP that changes cacheDir while an ADD's plugin runs: the ADD succeeds and its entry is written whole
    in the new dir, where DEL looks for it; the write-ahead in the old dir goes."""
    from netcomp import fsutil
    from netcomp.cni.invoke import ExecResult

    def fake_exec(argv, env, stdin, timeout):  # type: ignore[no-untyped-def]
        if env["CNI_COMMAND"] == "ADD":
            d.records.directory = tmp_path / "moved"
        return ExecResult(0, b'{"cniVersion": "1.0.0"}', b"")

    nets = {"a": {"cniVersion": "1.0.0", "name": "a", "plugins": [{"type": "sh"}]}}
    d = _delegator(tmp_path, nets, fake_exec)
    env = {"CNI_CONTAINERID": "c1", "CNI_NETNS": OWN_NETNS, "CNI_IFNAME": "eth0", "CNI_ARGS": "NETCOMP_NETWORKS=a"}
    try:
        d.handle(parse_request({**env, "CNI_COMMAND": "ADD"}, {"cniVersion": "1.0.0"}))
        entry = d.records.load("c1", "eth0")
        assert entry is not None and [a.state for a in entry.attachments] == ["attached"]
        assert fsutil.settle(10) and os.listdir(tmp_path / "cache") == []
        d.handle(parse_request({**env, "CNI_COMMAND": "DEL"}, {"cniVersion": "1.0.0"}))
        assert d.records.count() == 0
    finally:
        d.close()


def test_a_result_nested_too_deep_is_the_plugins_error_and_rolled_back(tmp_path: Path) -> None:
    """A plugin's result nested deeper than netcomp could write again (the cache, a prevResult, the answer): the
    runner refuses it as the plugin's error, so the ADD is rolled back, its DEL run without that result, and
    nothing is recorded. 64 levels are taken, 65 refused."""
    from netcomp.cni.codes import E_OTHER
    from netcomp.cni.invoke import ExecResult

    def nested(levels: int) -> bytes:  # the result object itself is the first level
        return b'{"cniVersion": "1.0.0", "x": ' + b"[" * (levels - 1) + b"]" * (levels - 1) + b"}"

    out = {"ADD": nested(1000)}
    calls: list[tuple[str, bytes]] = []

    def fake_exec(argv, env, stdin, timeout):  # type: ignore[no-untyped-def]
        if env["CNI_COMMAND"] != "VERSION":  # asked once, before the first ADD
            calls.append((env["CNI_COMMAND"], stdin))
        return ExecResult(0, out.get(env["CNI_COMMAND"], b""), b"")

    nets = {"a": {"cniVersion": "1.0.0", "name": "a", "plugins": [{"type": "sh"}]}}
    d = _delegator(tmp_path, nets, fake_exec)
    env = {"CNI_CONTAINERID": "c1", "CNI_NETNS": OWN_NETNS, "CNI_IFNAME": "eth0", "CNI_ARGS": "NETCOMP_NETWORKS=a"}
    try:
        for levels in (1000, 65):
            out["ADD"], calls[:] = nested(levels), []
            with pytest.raises(DelegateError) as e:
                d.handle(parse_request({**env, "CNI_COMMAND": "ADD"}, {"cniVersion": "1.0.0"}))
            assert e.value.code == E_OTHER and "nested deeper than 64 levels" in e.value.full_msg, e.value.full_msg
            assert [c for c, _ in calls] == ["ADD", "DEL"] and b"prevResult" not in calls[1][1]
            assert d.records.count() == 0
        out["ADD"] = nested(64)
        d.handle(parse_request({**env, "CNI_COMMAND": "ADD"}, {"cniVersion": "1.0.0"}))
        entry = d.records.load("c1", "eth0")
        assert entry is not None and entry.attachments[0].state == "attached"
    finally:
        d.close()


def test_a_failed_dels_log_line_names_every_network_its_record_named(tmp_path: Path) -> None:
    """The DEL's line names the networks the container's record held when the DEL read it, also when the DEL
    failed and its record keeps only the network whose DEL failed; a CHECK's the same."""
    import base64
    import json

    from netcomp.cni.invoke import ExecResult
    from netcomp.daemon.server import handlers
    from netcomp.metrics import Metrics

    def fake_exec(argv, env, stdin, timeout):  # type: ignore[no-untyped-def]
        if env["CNI_COMMAND"] in ("DEL", "CHECK") and env["CNI_IFNAME"] == "net1":  # network b
            return ExecResult(1, b'{"code": 11, "msg": "busy"}', b"")
        return ExecResult(0, b'{"cniVersion": "1.0.0"}', b"")

    d, _ = _three_network_delegator(tmp_path, fake_exec)
    config = base64.b64encode(b'{"cniVersion": "1.0.0", "name": "x", "type": "netcomp"}').decode()
    try:
        for verb in ("CHECK", "DEL"):
            env = {"CNI_COMMAND": verb, "CNI_CONTAINERID": "c1", "CNI_NETNS": OWN_NETNS, "CNI_IFNAME": "eth0"}
            outcome = handlers.cni(d, Metrics(), json.dumps({"env": env, "config": config}).encode(), bare=True)
            assert outcome.status == 400 and outcome.line is not None
            level, msg, args = outcome.line
            assert (level, args[:3]) == (logging.WARNING, (verb, "c1", "a,b,c")), (msg, args)
        entry = d.records.load("c1", "eth0")
        assert entry is not None and [a.network for a in entry.attachments] == ["b"]
    finally:
        d.close()


def test_an_undo_that_raised_at_start_up_is_tried_again_by_the_retry(tmp_path: Path) -> None:
    """A record an earlier daemon left `adding` whose undo raised at start-up (its namespace could not be looked
    for) is retried every few minutes, as a failed rollback's DEL is, not left for a runtime DEL that may never
    come. What makes the undo raise cannot be made on demand here: the first `detach` raises HostError, a
    stand-in for it."""
    from netcomp.cni.invoke import ExecResult
    from netcomp.records.record import Attachment, Record

    conf = {"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "sh"}]}
    d = _delegator(tmp_path, {"n": conf}, lambda *a: ExecResult(0, b"", b""))
    try:
        d.records.save(Record("c1", "", "eth0", "1.0.0", [Attachment("n", "eth0", conf)]))
        real, calls = d.deleting.detach, []

        def detach(*a: Any, **k: Any) -> Any:
            calls.append(k.get("why"))
            if len(calls) == 1:
                raise HostError("cannot look for the network namespace")
            return real(*a, **k)

        d.deleting.detach = detach  # type: ignore[method-assign]
        assert d.recover()[:2] == (0, 1)
        assert ("c1", "eth0") in d.unfinished and d.records.load("c1", "eth0") is not None
        assert d.retry_unfinished() == (1, 0)
        assert calls == ["recovery", "retry"]
        assert d.records.load("c1", "eth0") is None and ("c1", "eth0") not in d.unfinished
    finally:
        d.close()


def test_pod_edits_waiting_count_pods_not_records(tmp_path: Path) -> None:
    """Two records of one pod waiting for their undo (its sandbox made again) are one pod edit waiting, as
    `netcomp status` says it; the undo of one leaves the pod waiting for the other."""
    from netcomp.cluster.podsync import PodSync
    from netcomp.pods.naming import PodRef

    d = _delegator(tmp_path, {}, lambda *a: None)
    sync = PodSync(d)
    web, db = PodRef("default", "web", "u1"), PodRef("default", "db", "u2")
    sync._wait(("c1", "eth0"), web)
    sync._wait(("c2", "eth0"), web)
    sync._wait(("c3", "eth0"), db)
    assert (sync.waiting, sync.pods_waiting) == (3, 2)
    sync.undone(("c3", "eth0"), False)
    sync.undone(("c1", "eth0"), False)
    assert (sync.waiting, sync.pods_waiting) == (1, 1)
    d.close()


def test_a_check_of_an_attachment_recorded_without_a_result_says_so(tmp_path: Path) -> None:
    """CHECK compares with what ADD returned; a record that keeps none for an attachment (an older daemon's,
    whose plugin printed nothing) is refused by that attachment's name before any plugin's CHECK runs, not
    checked against an empty result."""
    from netcomp.cni.invoke import ExecResult
    from netcomp.records.record import Attachment, Record

    checks: list[str] = []

    def fake_exec(argv, env, stdin, timeout):  # type: ignore[no-untyped-def]
        checks.append(env["CNI_COMMAND"])
        return ExecResult(0, b'{"cniVersion": "1.0.0"}', b"")

    conf = {"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "sh"}]}
    d = _delegator(tmp_path, {"n": conf}, fake_exec)
    try:
        a = Attachment("n", "eth0", conf)
        a.state = "attached"
        d.records.save(Record("c1", OWN_NETNS, "eth0", "1.0.0", [a]))
        env = {"CNI_COMMAND": "CHECK", "CNI_CONTAINERID": "c1", "CNI_NETNS": OWN_NETNS, "CNI_IFNAME": "eth0"}
        with pytest.raises(DelegateError, match="eth0: its ADD recorded no result to CHECK against") as e:
            d.handle(parse_request(env, {"cniVersion": "1.0.0"}))
        assert e.value.network == "n" and checks == []
    finally:
        d.close()
