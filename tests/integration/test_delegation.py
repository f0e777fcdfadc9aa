"""Delegation for real: the shim exec'd as a runtime would, the daemon on its socket, the Debian CNI plugins in
network namespaces the tests make. Nothing may be left behind: interfaces, host-local leases, cache entries."""

from __future__ import annotations

import concurrent.futures
import logging
import re
from pathlib import Path

import pytest

from tests.lab.daemonlab import DaemonLab

pytestmark = pytest.mark.root


def test_default_bridge_and_macvlan_at_once(dl: DaemonLab, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="netcomp.server")
    ctr = dl.lab.container()
    rc, res = dl.shim("ADD", ctr, args="IgnoreUnknown=1;NETCOMP_NETWORKS=storage,backup", version="0.4.0")
    assert rc == 0, res
    assert sorted(dl.lab.links(ctr)) == ["eth0", "lo", "stor0", "stor1"]
    assert dl.lab.addrs(ctr, "eth0") == ["10.77.0.2/24"]
    assert dl.lab.addrs(ctr, "stor0") == ["10.79.0.10/24"]
    assert dl.lab.addrs(ctr, "stor1") == ["10.80.0.2/24"]
    # The runtime gets the default network's result, in its own cniVersion (0.4.0 IPs carry "version").
    assert res["cniVersion"] == "0.4.0"
    assert [(i["address"], i["version"]) for i in res["ips"]] == [("10.77.0.2/24", "4")]
    assert len(dl.cache_files()) == 1
    assert dl.shim("CHECK", ctr, args="IgnoreUnknown=1;NETCOMP_NETWORKS=storage,backup")[0] == 0
    rc, res = dl.shim("DEL", ctr)
    assert rc == 0, res
    assert dl.lab.links(ctr) == ["lo"]
    assert dl.leases() == [] and dl.cache_files() == []
    assert dl.shim("DEL", ctr)[0] == 0  # DEL again: fine
    # The log names the networks DEL and CHECK found in the container's record (read once, by the verb itself).
    dl.settled()  # each line is written once its answer is out
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("CNI ")]
    check, del1, del2 = (
        next(m for m in lines if m.startswith("CNI CHECK")),
        *[m for m in lines if m.startswith("CNI DEL")],
    )
    assert all(n in check.split(" networks=")[1].split()[0].split(",") for n in ("storage", "backup")), check
    assert del1.split(" networks=")[1].split()[0] == check.split(" networks=")[1].split()[0], del1
    assert " networks=- ok" in del2  # nothing recorded any more
    status = dl.daemon.status()
    assert status["ready"] and not status["degraded"] and status["requests"]["served"] >= 4


def test_failing_delegate_rolls_back_everything(dl: DaemonLab) -> None:
    """macvlan cannot ADD a network whose master is missing, and cannot DEL it either (it fails loading its config
    as its ADD did). Its rollback DEL fails, but that attachment never got a result and no interface of it is in
    the namespace: nothing of it is left, so it is forgotten (logged), not kept for a DEL that can never succeed;
    the other network is DELeted and its address freed."""
    ctr = dl.lab.container()
    rc, err = dl.shim("ADD", ctr, args="NETCOMP_NETWORKS=storage,nowhere")
    assert rc == 1
    # The plugin's own words, verbatim, with the network and plugin in front.
    assert err["msg"] == "network 'nowhere', plugin 'macvlan': Link not found"
    assert dl.lab.links(ctr) == ["lo"]  # eth0 and stor0 were taken down again
    assert dl.leases() == []  # and their addresses released
    assert dl.cache_files() == [] and dl.daemon.status()["attachmentsToUndo"] == 0
    rc, err = dl.shim("DEL", ctr)
    assert rc == 0, err


def test_del_uses_the_cache_after_the_intent_is_gone(dl: DaemonLab) -> None:
    ctr = dl.lab.container()
    assert dl.shim("ADD", ctr, args="NETCOMP_NETWORKS=storage")[0] == 0
    (dl.base / "networks.d" / "20-storage.yaml").unlink()
    snap = dl.daemon.reload()
    assert "storage" not in snap.networks and not (dl.base / "out" / "storage.conflist").exists()
    rc, res = dl.shim("DEL", ctr)
    assert rc == 0, res
    assert dl.lab.links(ctr) == ["lo"] and dl.leases() == []


def test_del_after_daemon_restart(dl: DaemonLab) -> None:
    ctr = dl.lab.container()
    assert dl.shim("ADD", ctr, args="NETCOMP_NETWORKS=storage")[0] == 0
    dl.restart()
    assert dl.shim("CHECK", ctr, args="NETCOMP_NETWORKS=storage")[0] == 0
    assert dl.shim("DEL", ctr)[0] == 0
    assert dl.lab.links(ctr) == ["lo"] and dl.leases() == [] and dl.cache_files() == []


@pytest.mark.parametrize("gone_as", ["vanished path", "empty CNI_NETNS"])
def test_del_after_the_netns_is_gone_releases_everything(dl: DaemonLab, gone_as: str) -> None:
    """Runtimes DEL after the sandbox is gone (a crashed pod, a node reboot): the namespace and the interfaces
    in it are gone with it, but the addresses (host-local leases) and the cache entry must still be freed."""
    from tests.lab.netlab import ip

    ctr = dl.lab.container()
    assert dl.shim("ADD", ctr, args="NETCOMP_NETWORKS=storage")[0] == 0
    assert len(dl.leases()) == 2 and len(dl.cache_files()) == 1
    ip("netns", "del", ctr)
    dl.lab.containers.remove(ctr)
    rc, res = dl.shim("DEL", ctr, netns="" if gone_as == "empty CNI_NETNS" else None)
    assert rc == 0, res
    assert dl.leases() == [] and dl.cache_files() == []


def test_an_unreadable_cache_entry_is_reported_and_kept(dl: DaemonLab) -> None:
    """A cache entry that cannot be read (a disk fault, a hand edit) is the node's problem: DEL and ADD answer
    CNI code 5 naming the file, and the file stays as it was, so nothing it records is forgotten."""
    ctr = dl.lab.container()
    assert dl.shim("ADD", ctr, args="NETCOMP_NETWORKS=storage")[0] == 0
    [name] = dl.cache_files()
    path = Path(dl.settings.cacheDir) / name
    good = path.read_bytes()
    cut = good[: len(good.partition(b"\x1e")[0]) // 2]  # cut inside the document: its records follow it
    path.write_bytes(cut)
    for verb in ("DEL", "ADD"):
        rc, err = dl.shim(verb, ctr)
        assert rc == 1 and err["code"] == 5, err
        assert f"the attachment cache entry {path} of container ctr-{ctr} on eth0 cannot be read" in err["msg"]
    assert path.read_bytes() == cut and len(dl.leases()) == 2
    path.write_bytes(good)  # restored: DEL does what it records
    assert dl.shim("DEL", ctr)[0] == 0
    assert dl.lab.links(ctr) == ["lo"] and dl.leases() == [] and dl.cache_files() == []


def test_start_up_keeps_and_names_every_record_it_cannot_read(dl: DaemonLab, caplog: pytest.LogCaptureFixture) -> None:
    """Start-up reads every record once (the blocks, recovery, the pod sync): one it cannot read (not JSON, of
    another kind, a directory, a FIFO, a symlink, empty, NULs, over the size bound, a claim not whole) is said in
    the log by name and left exactly as it is, and the daemon serves the records it can read; nothing raised. A
    copy of a record under another name is kept too: DEL removes only the record its container's name hashes to."""
    import os

    ctr = dl.lab.container()
    assert dl.shim("ADD", ctr, args="NETCOMP_NETWORKS=storage")[0] == 0
    [name] = dl.cache_files()
    cache = Path(dl.settings.cacheDir)
    good = (cache / name).read_bytes()
    bad = {f"{i:032x}.json": data for i, data in enumerate([
        b"{not json", b'{"kind": "netcompCacheV9"}', b"", b"\0" * 300, b"[1, 2]",
        good.replace(b'"state": "', b'"claims": [{"address": "10.79.0.10"}], "state": "', 1),
        good.replace(b'"attachments": [', b'"attachments": [{"network": 5},'),
    ])}  # fmt: skip
    for n, data in bad.items():
        (cache / n).write_bytes(data)
    (cache / ("c" * 32 + ".json")).write_bytes(good)  # a copy of the record (readable): kept as well
    os.mkfifo(cache / ("f" * 32 + ".json"))
    (cache / ("d" * 32 + ".json")).mkdir()
    (cache / ("e" * 32 + ".json")).symlink_to(cache / name)
    with open(cache / ("b" * 32 + ".json"), "wb") as f:
        f.truncate((64 << 20) + 1)  # sparse: over the bound without writing it
    before = {p.name: (p.lstat().st_mode, p.lstat().st_size) for p in cache.iterdir()}
    with caplog.at_level(logging.WARNING):
        dl.restart()
    assert {p.name: (p.lstat().st_mode, p.lstat().st_size) for p in cache.iterdir()} == before
    assert all((cache / n).read_bytes() == data for n, data in bad.items())
    for n in [*bad, *(c * 32 + ".json" for c in "fdeb")]:
        assert f"{cache / n}" in caplog.text, n
    assert not [r for r in caplog.records if r.exc_info]
    assert dl.shim("CHECK", ctr, args="NETCOMP_NETWORKS=storage")[0] == 0
    assert dl.shim("DEL", ctr)[0] == 0
    assert dl.lab.links(ctr) == ["lo"] and dl.leases() == []
    assert sorted(p.name for p in cache.iterdir()) == sorted(n for n in before if n != name)


@pytest.mark.parametrize("torn", [b"", b"\0" * 812], ids=["empty", "zeros"])
def test_an_entry_a_power_cut_left_empty_does_not_block_the_del_after_the_reboot(
    dl: DaemonLab, caplog: pytest.LogCaptureFixture, torn: bytes
) -> None:
    """Entries are not fsync'd: a machine going down just after an ADD can leave one empty (ext4's delayed
    allocation: the name committed, the data not). The power cut is stood in for by emptying the file. The DEL
    the runtime sends after the reboot succeeds (instead of failing on the entry for ever), the entry goes, the
    log says what could not be undone; an ADD of the container then works."""
    from tests.lab.netlab import ip

    ctr = dl.lab.container()
    assert dl.shim("ADD", ctr, args="NETCOMP_NETWORKS=storage")[0] == 0
    [name] = dl.cache_files()
    path = Path(dl.settings.cacheDir) / name
    path.write_bytes(torn)
    caplog.set_level(logging.WARNING, logger="netcomp.cache")
    rc, res = dl.shim("DEL", ctr)
    assert rc == 0, res
    assert dl.cache_files() == []
    assert any(f"{path} is empty ({len(torn)} bytes)" in r.getMessage() for r in caplog.records)
    assert len(dl.leases()) == 2  # what it held cannot be known: left, and said so
    ip("netns", "del", ctr)
    dl.lab.containers.remove(ctr)
    ctr = dl.lab.container()
    rc, res = dl.shim("ADD", ctr, args="NETCOMP_NETWORKS=storage")
    assert rc == 0, res
    assert dl.shim("DEL", ctr)[0] == 0 and len(dl.leases()) == 2


def test_sixteen_containers_at_once(dl: DaemonLab) -> None:
    ctrs = [dl.lab.container() for _ in range(16)]
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        adds = list(pool.map(lambda c: dl.shim("ADD", c, args="NETCOMP_NETWORKS=storage"), ctrs))
    assert [rc for rc, _ in adds] == [0] * 16, [r for r in adds if r[0]]
    addrs = {dl.lab.addrs(c, "stor0")[0] for c in ctrs} | {dl.lab.addrs(c, "eth0")[0] for c in ctrs}
    assert len(addrs) == 32  # every address distinct
    assert len(dl.cache_files()) == 16
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        dels = list(pool.map(lambda c: dl.shim("DEL", c), ctrs))
    assert [rc for rc, _ in dels] == [0] * 16
    assert all(dl.lab.links(c) == ["lo"] for c in ctrs)
    assert dl.leases() == [] and dl.cache_files() == []


def test_ipvlan_error_reaches_the_caller(dl: DaemonLab) -> None:
    ctr = dl.lab.container()
    rc, err = dl.shim("ADD", ctr, args="NETCOMP_NETWORKS=signal")
    assert rc == 1
    assert err["msg"] == "network 'signal', plugin 'ipvlan': failed to create ipvlan: operation not supported"
    assert dl.lab.links(ctr) == ["lo"] and dl.leases() == []


def test_interface_already_present_stops_before_any_plugin(dl: DaemonLab) -> None:
    ctr = dl.lab.container()
    dl.lab.links(ctr)
    from tests.lab.netlab import ip

    ip("link", "add", "stor0", "type", "veth", "peer", "name", "x0", netns=ctr)
    rc, err = dl.shim("ADD", ctr, args="NETCOMP_NETWORKS=storage")
    assert rc == 1 and "interface 'stor0' already exists" in err["msg"]
    assert sorted(dl.lab.links(ctr)) == ["lo", "stor0", "x0"] and dl.leases() == []


def test_hotplug_attach_and_detach(dl: DaemonLab) -> None:
    from netcomp.daemon.server.client import call

    ctr = dl.lab.container()
    assert dl.shim("ADD", ctr)[0] == 0
    status, doc = call(
        dl.sock,
        "POST",
        "/delegate",
        {"containerID": f"ctr-{ctr}", "netns": f"/var/run/netns/{ctr}", "network": "storage"},
    )
    assert status == 200, doc
    assert sorted(dl.lab.links(ctr)) == ["eth0", "lo", "stor0"]
    status, doc = call(
        dl.sock,
        "POST",
        "/delegate",
        {"command": "DEL", "containerID": f"ctr-{ctr}", "netns": f"/var/run/netns/{ctr}", "network": "storage"},
    )
    assert status == 200, doc
    assert sorted(dl.lab.links(ctr)) == ["eth0", "lo"]
    assert dl.shim("DEL", ctr)[0] == 0
    assert dl.lab.links(ctr) == ["lo"] and dl.leases() == [] and dl.cache_files() == []


def test_runtime_config_points_at_the_socket(dl: DaemonLab) -> None:
    import json

    conf = json.loads((dl.base / "net.d" / "00-netcomp.conflist").read_text())
    assert [{k: v for k, v in p.items() if k != "capabilities"} for p in conf["plugins"]] == [
        {"type": "netcomp", "socket": dl.sock}
    ]


def test_check_finds_damage_and_gc_removes_stale_attachments(dl: DaemonLab) -> None:
    from tests.lab.netlab import ip

    keep, stale = dl.lab.container(), dl.lab.container()
    assert dl.shim("ADD", keep, args="NETCOMP_NETWORKS=storage")[0] == 0
    assert dl.shim("ADD", stale, args="NETCOMP_NETWORKS=storage")[0] == 0
    ip("link", "del", "stor0", netns=keep)  # someone removed an interface behind our back
    rc, err = dl.shim("CHECK", keep)
    assert rc == 1 and err["msg"].startswith("network 'storage', plugin 'macvlan':"), err
    rc, err = dl.shim("CHECK", "never-added")
    assert rc == 1 and err["code"] == 3
    valid = [{"containerID": f"ctr-{keep}", "ifname": "eth0"}]
    rc, out = dl.shim("GC", "", version="1.1.0", extra={"cni.dev/valid-attachments": valid})
    assert rc == 0, out
    assert dl.lab.links(stale) == ["lo"]  # the stale container's attachments were deleted
    assert len(dl.cache_files()) == 1
    assert dl.shim("DEL", keep)[0] == 0
    assert dl.leases() == [] and dl.cache_files() == []


def test_status_verb_and_cli(dl: DaemonLab) -> None:
    import io

    from netcomp.cli.main import main

    assert dl.shim("STATUS", "", version="1.1.0")[0] == 0
    ctr = dl.lab.container()
    assert dl.shim("ADD", ctr)[0] == 0
    cfg = dl.base / "netcomp.yaml"
    cfg.write_text(f"socket: {dl.sock}\n")
    out, err = io.StringIO(), io.StringIO()
    assert (
        main(
            ["attach", "--config", str(cfg), f"ctr-{ctr}", f"/var/run/netns/{ctr}", "storage", "--ifname", "data0"],
            out,
            err,
        )
        == 0
    ), err.getvalue()
    assert sorted(dl.lab.links(ctr)) == ["data0", "eth0", "lo"]
    out = io.StringIO()
    assert main(["status", "--config", str(cfg)], out, io.StringIO()) == 0
    text = out.getvalue()
    assert "ready" in text and "1 containers attached" in text and "mgmt" in text and "(default)" in text
    assert main(["detach", "--config", str(cfg), f"ctr-{ctr}", "-", "storage"], io.StringIO(), io.StringIO()) == 0
    assert sorted(dl.lab.links(ctr)) == ["eth0", "lo"]
    assert dl.shim("DEL", ctr)[0] == 0
    (dl.base / "static.d" / "lab-bridge.conflist").unlink()
    dl.daemon.reload()  # mgmt now fails to compile, but its last good version is kept
    assert dl.shim("STATUS", "", version="1.1.0")[0] == 0
    assert dl.daemon.status()["degraded"] and dl.daemon.status()["networks"][1]["keptLastGood"]


def test_attachments_lists_containers_networks_and_unreadable_entries(dl: DaemonLab) -> None:
    import io
    import json

    from netcomp.cli.main import main

    cfg = dl.base / "netcomp.yaml"
    cfg.write_text(f"socket: {dl.sock}\n")

    def attachments(*extra: str) -> tuple[int, str]:
        out = io.StringIO()
        return main(["attachments", "--config", str(cfg), *extra], out, io.StringIO()), out.getvalue()

    assert attachments() == (0, "no containers attached\n")
    one, two = dl.lab.container(), dl.lab.container()
    assert dl.shim("ADD", one, args="NETCOMP_NETWORKS=storage,backup")[0] == 0
    assert dl.shim("ADD", two)[0] == 0
    rc, text = attachments()
    assert rc == 0
    blocks: dict[str, list[str]] = {}  # a container's line, then one line per network (sorted by container ID)
    for line in text.splitlines():
        if not line.startswith("  "):
            blocks[line] = []
        blocks[list(blocks)[-1]] += [line] if line.startswith("  ") else []
    head_one, head_two = (f"ctr-{c} (eth0) in /var/run/netns/{c}" for c in (one, two))
    assert list(blocks) == sorted([head_one, head_two])
    assert [line.split()[:2] + line.split()[3:] for line in blocks[head_one]] == [
        ["eth0", "10.77.0.2", "mgmt", "(default)"],
        ["stor0", "10.79.0.10", "storage"],
        ["stor1", "10.80.0.2", "backup"],
    ]
    assert blocks[head_one][0].split()[2] == dl.lab.mac(one, "eth0")
    assert [line.split()[0] for line in blocks[head_two]] == ["eth0"]
    rc, text = attachments("-o", "json")
    doc = json.loads(text)
    assert rc == 0 and doc["unreadable"] == []
    assert [c["containerID"] for c in doc["containers"]] == sorted([f"ctr-{one}", f"ctr-{two}"])
    path = next(p for p in Path(dl.settings.cacheDir).glob("*.json") if f"ctr-{two}" in p.read_text())
    good = path.read_bytes()
    path.write_text("{")
    rc, text = attachments()
    assert rc == 1 and text.splitlines()[-1].startswith(f"UNREADABLE {path}: not JSON: ")
    path.write_bytes(good)
    assert dl.shim("DEL", one)[0] == 0 and dl.shim("DEL", two)[0] == 0
    assert dl.leases() == [] and attachments() == (0, "no containers attached\n")


def test_vxlan_master_is_made_on_first_use_and_reused(dl: DaemonLab) -> None:
    from tests.lab.netlab import ip

    a, b = dl.lab.container(), dl.lab.container()
    assert "vx4242" not in dl.lab.links(dl.lab.host)
    assert dl.shim("ADD", a, args="NETCOMP_NETWORKS=tunnel")[0] == 0
    detail = ip("-d", "link", "show", "vx4242", netns=dl.lab.host)
    assert "vxlan id 4242 group 239.1.1.42 dev ncm0" in detail and ",UP" in detail
    assert dl.shim("ADD", b, args="NETCOMP_NETWORKS=tunnel")[0] == 0  # the link is there: reused
    assert dl.lab.addrs(a, "tun0") != dl.lab.addrs(b, "tun0")
    for c in (a, b):
        assert dl.shim("DEL", c)[0] == 0
    assert dl.leases() == []


def test_vlan_master_on_a_kernel_without_8021q_is_a_clear_error(dl: DaemonLab) -> None:
    """This kernel has no 802.1Q VLAN support: the error must say so and name the module, before any plugin."""
    ctr = dl.lab.container()
    rc, err = dl.shim("ADD", ctr, args="NETCOMP_NETWORKS=tagged")
    assert rc == 1 and err["code"] == 5
    assert err["msg"] == (
        "network 'tagged': cannot create vlan link ncm0.120 on ncm0: the kernel does not support "
        "vlan (Operation not supported); load the 8021q module"
    )
    assert dl.lab.links(ctr) == ["lo"] and dl.leases() == [] and dl.cache_files() == []


def test_a_foreign_link_with_the_masters_name_is_left_alone(dl: DaemonLab) -> None:
    from tests.lab.netlab import ip

    ip("link", "add", "vx4242", "type", "veth", "peer", "name", "vxp", netns=dl.lab.host)
    ctr = dl.lab.container()
    rc, err = dl.shim("ADD", ctr, args="NETCOMP_NETWORKS=tunnel")
    assert rc == 1 and "vx4242 exists but is not the vxlan link this network needs" in err["msg"]
    assert "vx4242" in dl.lab.links(dl.lab.host) and dl.lab.links(ctr) == ["lo"]


def _tunnel(dl: DaemonLab, group: str) -> None:
    text = (dl.base / "networks.d" / "60-tunnel.yaml").read_text()
    (dl.base / "networks.d" / "60-tunnel.yaml").write_text(re.sub(r"group: [0-9.]+", f"group: {group}", text))


def test_host_link_of_a_removed_network_goes_with_its_last_container(dl: DaemonLab) -> None:
    from tests.lab.netlab import ip

    a = dl.lab.container()
    assert dl.shim("ADD", a, args="NETCOMP_NETWORKS=tunnel")[0] == 0
    assert "alias netcomp:owned" in ip("-d", "link", "show", "vx4242", netns=dl.lab.host)
    (dl.base / "networks.d" / "60-tunnel.yaml").unlink()
    dl.daemon.reload()
    assert "vx4242" in dl.lab.links(dl.lab.host)  # still carries container a's tun0
    assert dl.shim("DEL", a)[0] == 0  # from the cache: the network is gone, the link is no longer used
    assert "vx4242" not in dl.lab.links(dl.lab.host)
    assert dl.cache_files() == [] and dl.leases() == []


def test_a_link_the_operator_made_is_used_and_never_removed(dl: DaemonLab) -> None:
    from tests.lab.netlab import ip

    ip("link", "add", "vx4242", "type", "vxlan", "id", "4242", "group", "239.1.1.42", "dev", dl.lab.master,
       "dstport", "4789", netns=dl.lab.host)  # fmt: skip
    a = dl.lab.container()
    assert dl.shim("ADD", a, args="NETCOMP_NETWORKS=tunnel")[0] == 0
    (dl.base / "networks.d" / "60-tunnel.yaml").unlink()
    dl.daemon.reload()
    assert dl.shim("DEL", a)[0] == 0
    assert "vx4242" in dl.lab.links(dl.lab.host)
    assert "netcomp" not in ip("-d", "link", "show", "vx4242", netns=dl.lab.host)


def test_netcomps_link_with_old_settings_is_replaced_once_unused(dl: DaemonLab) -> None:
    from tests.lab.netlab import ip

    a, b = dl.lab.container(), dl.lab.container()
    assert dl.shim("ADD", a, args="NETCOMP_NETWORKS=tunnel")[0] == 0
    _tunnel(dl, "239.1.1.43")  # the same link name (vx4242), another group
    dl.daemon.reload()
    rc, err = dl.shim("ADD", b, args="NETCOMP_NETWORKS=tunnel")
    assert rc == 1 and err["code"] == 5
    assert "vx4242 was made by netcomp with other settings" in err["msg"] and "still used" in err["msg"]
    assert dl.lab.links(b) == ["lo"]
    assert "group 239.1.1.42" in ip("-d", "link", "show", "vx4242", netns=dl.lab.host)
    assert dl.shim("DEL", a)[0] == 0
    assert dl.shim("ADD", b, args="NETCOMP_NETWORKS=tunnel")[0] == 0
    detail = ip("-d", "link", "show", "vx4242", netns=dl.lab.host)
    assert "group 239.1.1.43" in detail and "alias netcomp:owned" in detail
    assert dl.shim("DEL", b)[0] == 0
