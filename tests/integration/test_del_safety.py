"""DEL against hostile namespaces and requests, on the real daemon and plugins: a DEL never frees what a namespace
that is still alive holds (its path repointed, its mount gone but a process in it, its inode number given to
another namespace); failures that can never succeed are refused before anything runs, or forgotten once nothing
of them is left, never kept for ever; a GC whose list is malformed tears down nothing."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from netcomp.host import netns as nsutil
from netcomp.records.record import Attachment, Record
from tests.lab.daemonlab import DaemonLab
from tests.lab.intents import intent
from tests.lab.netlab import ip

pytestmark = pytest.mark.root


def post(dl: DaemonLab, env: dict[str, str], config: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
    """A /cni request as any client may send it (the shim cannot carry a NUL byte or 140 KiB in a variable)."""
    from netcomp.daemon.server.client import call

    conf = {"cniVersion": "1.0.0", "name": "netcomp", "type": "netcomp", **(config or {})}
    body = {"env": env, "config": base64.b64encode(json.dumps(conf).encode()).decode()}
    status, doc = call(dl.sock, "POST", "/cni", body, timeout=120)
    return status, doc if isinstance(doc, dict) else {}


def cni_env(dl: DaemonLab, command: str, ctr: str, args: str = "") -> dict[str, str]:
    return {
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": f"ctr-{ctr}",
        "CNI_NETNS": f"/var/run/netns/{ctr}",
        "CNI_IFNAME": "eth0",
        "CNI_ARGS": args,
        "CNI_PATH": "/usr/lib/cni",
    }


# ------------------------------------------------------------------------------------------ the namespace


def test_del_runs_in_the_namespace_add_recorded_when_its_path_names_another_now(dl: DaemonLab, search: str) -> None:
    """CNI_NETNS a symlink to A at ADD, pointed at B before the DEL: the DEL finds A and runs there (its
    interfaces go, and with them the addresses); B is untouched. Before, A kept its interfaces holding the
    addresses the DEL had freed, for the next ADD to get again: two live containers, one IP."""
    a, b = dl.lab.container(), dl.lab.container()
    link = dl.base / "netns-link"
    link.symlink_to(f"/var/run/netns/{a}")
    assert dl.shim("ADD", a, args="NETCOMP_NETWORKS=storage", netns=str(link))[0] == 0
    ip("link", "add", "eth0", "type", "veth", "peer", "name", "eth9", netns=b)
    link.unlink()
    link.symlink_to(f"/var/run/netns/{b}")
    assert dl.shim("DEL", a, netns=str(link))[0] == 0
    assert dl.lab.links(a) == ["lo"]
    assert sorted(dl.lab.links(b)) == ["eth0", "eth9", "lo"]
    assert dl.leases() == [] and dl.cache_files() == []


def test_del_of_a_namespace_held_only_by_a_process_runs_in_it(dl: DaemonLab, search: str) -> None:
    """The namespace's mount is gone (`ip netns del`), a process still runs in it: it is not gone, and the DEL
    runs in it (through the process), rather than freeing the addresses of interfaces that stay up."""
    ctr = dl.lab.container()
    assert dl.shim("ADD", ctr, args="NETCOMP_NETWORKS=storage")[0] == 0
    holder = subprocess.Popen(
        ["nsenter", f"--net=/var/run/netns/{ctr}", "sh", "-c", "echo in; exec sleep 600"], stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"in\n"  # in the namespace by now
        where = f"/proc/{holder.pid}/ns/net"
        assert nsutil.identity(where) == nsutil.identity(f"/var/run/netns/{ctr}")
        ip("netns", "del", ctr)
        assert dl.shim("DEL", ctr)[0] == 0
        links = subprocess.run(["nsenter", f"--net={where}", "ip", "-o", "link"], capture_output=True, text=True)
        assert [line.split(":")[1].strip() for line in links.stdout.splitlines()] == ["lo"]
        assert dl.leases() == [] and dl.cache_files() == []
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()


def test_a_search_that_cannot_read_a_holder_frees_nothing(dl: DaemonLab, monkeypatch: pytest.MonkeyPatch) -> None:
    """Searched in /proc, the namespace's pin gone and a process still in it whose namespaces the daemon may not
    read (without CAP_SYS_PTRACE: one with capabilities the daemon lacks, another uid's, one not dumpable; here
    its links refused as the kernel refuses them): that process's namespace has interfaces and is none the daemon
    knows, so it might be the container's. The DEL is code 11 and frees nothing; the next one, the process
    readable, finds the namespace and finishes. tests/integration/test_netns_search.py does it for real."""
    monkeypatch.setattr(nsutil, "_handles", lambda: False)
    ctr = dl.lab.container()
    assert dl.shim("ADD", ctr, args="NETCOMP_NETWORKS=storage")[0] == 0
    holder = subprocess.Popen(
        ["nsenter", f"--net=/var/run/netns/{ctr}", "sh", "-c", "echo in; exec sleep 600"], stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"in\n"
        where = f"/proc/{holder.pid}/ns/net"
        ip("netns", "del", ctr)
        link = nsutil._link
        monkeypatch.setattr(
            nsutil, "_link", lambda p: nsutil._REFUSED if p.startswith(f"/proc/{holder.pid}/") else link(p)
        )
        rc, err = dl.shim("DEL", ctr, netns="")
        assert rc == 1 and err["code"] == 11 and "cannot tell whether" in err["msg"], err
        assert len(dl.leases()) == 2 and dl.cache_files() != []
        monkeypatch.setattr(nsutil, "_link", link)
        assert dl.shim("DEL", ctr, netns="")[0] == 0
        links = subprocess.run(["nsenter", f"--net={where}", "ip", "-o", "link"], capture_output=True, text=True)
        assert [line.split(":")[1].strip() for line in links.stdout.splitlines()] == ["lo"]
        assert dl.leases() == [] and dl.cache_files() == []
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()


def test_a_namespace_with_the_inode_number_of_a_gone_one_is_not_taken_for_it(dl: DaemonLab) -> None:
    """The kernel gives a freed namespace's inode number to the next namespace it makes (seen here within a
    second), so (device, inode) alone may name a stranger; the namespace's cookie, recorded at ADD, is never
    given again. Here container x's record is given the cookie of a namespace that is gone, as if x's namespace
    had been freed and this one, at x's path with x's inode number, were a new container's: the DEL frees x's
    addresses and leaves this namespace's interfaces alone (before, it deleted them)."""
    ctr, gone = dl.lab.container(), dl.lab.container()
    assert dl.shim("ADD", ctr, args="NETCOMP_NETWORKS=storage")[0] == 0
    fd, _ = nsutil.open_netns(f"/var/run/netns/{gone}")
    dead = nsutil.cookie(fd)
    os.close(fd)
    ip("netns", "del", gone)
    dl.lab.containers.remove(gone)
    entry = dl.daemon.records.load(f"ctr-{ctr}", "eth0")
    assert entry is not None and entry.netns_cookie is not None and dead is not None
    entry.netns_cookie = dead
    dl.daemon.records.save(entry)
    assert dl.shim("DEL", ctr)[0] == 0
    assert sorted(dl.lab.links(ctr)) == ["eth0", "lo", "stor0"]
    assert dl.leases() == [] and dl.cache_files() == []


# ------------------------------------------------------------------------ failures that can never succeed


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ("IgnoreUnknown=1;X=a\0b", "CNI_ARGS holds a NUL byte"),
        ("IgnoreUnknown=1;X=" + "a" * 140_000, "over the 128 KiB the kernel takes for one"),
    ],
)
def test_args_no_exec_can_take_are_refused_before_anything_runs(dl: DaemonLab, args: str, words: str) -> None:
    ctr = dl.lab.container()
    status, err = post(dl, cni_env(dl, "ADD", ctr, args))
    assert status == 400 and err["code"] == 4 and words in err["msg"], err
    assert dl.cache_files() == [] and dl.lab.links(ctr) == ["lo"] and dl.leases() == []
    assert post(dl, cni_env(dl, "DEL", ctr, args)) == (200, {"Result": None})


def add_v11_network(dl: DaemonLab) -> Path:
    """A static network whose conflist says cniVersion 1.1.0 to Debian's plugins, which speak up to 1.0.0."""
    conf = json.loads((dl.base / "static.d" / "lab-bridge.conflist").read_text())
    conf.update(cniVersion="1.1.0", name="lab-v11")
    conf["plugins"][0].update(bridge="ncbr1", ipam={**conf["plugins"][0]["ipam"], "subnet": "10.76.0.0/24"})
    (dl.base / "static.d" / "lab-v11.conflist").write_text(json.dumps(conf, indent=2))
    path = dl.base / "networks.d" / "80-v11.yaml"
    path.write_text(intent("v11", "{type: static, networkID: lab-v11}"))
    dl.daemon.reload()
    return path


def test_a_cni_version_its_plugins_do_not_speak_is_a_warning_and_refused_at_add(dl: DaemonLab) -> None:
    path = add_v11_network(dl)
    warnings = [d for d in dl.daemon.diagnostics if d.location and d.location.file == str(path)]
    assert [d.severity for d in warnings] == ["warning"], warnings
    d = warnings[0]
    assert d.location is not None and (d.location.line, d.location.column) == (4, 33)  # the networkID
    assert "lab-v11.conflist:2:3: cniVersion 1.1.0 is not one plugin 'bridge' speaks" in d.message, d.message
    ctr = dl.lab.container()
    rc, err = dl.shim("ADD", ctr, args="NETCOMP_NETWORKS=v11")
    assert rc == 1 and err["code"] == 1 and "no plugin was run" in err["details"], err
    assert "network 'v11', plugin 'bridge': incompatible CNI versions" in err["msg"]
    assert dl.cache_files() == [] and dl.lab.links(ctr) == ["lo"] and dl.leases() == []
    assert dl.shim("DEL", ctr)[0] == 0


def entry_left_undone(dl: DaemonLab, ctr: str, conflist: dict[str, Any], ifname: str, args: str = "") -> None:
    """The entry an earlier netcomp left after such an ADD: its rollback's DEL failed the same way, `undo`."""
    nid = nsutil.identity(f"/var/run/netns/{ctr}")
    att = Attachment("v11", ifname, conflist, args=args, state="undo", error="incompatible CNI versions")
    entry = Record(f"ctr-{ctr}", f"/var/run/netns/{ctr}", "eth0", "1.0.0", [att], netns_id=nid)
    dl.daemon.records.save(entry)


def test_an_undo_that_can_never_succeed_is_forgotten_once_nothing_of_it_is_left(dl: DaemonLab) -> None:
    """Entries an earlier netcomp kept for ever: its DEL failed every 5 minutes and every runtime DEL failed.
    Now the DEL fails the same way, sees that nothing of the attachment is in the namespace, and succeeds."""
    add_v11_network(dl)
    conflist = dl.daemon.state.networks()["v11"]
    ctr, other = dl.lab.container(), dl.lab.container()
    entry_left_undone(dl, ctr, conflist, "eth0")
    entry_left_undone(dl, other, dl.daemon.state.networks()["mgmt"], "eth0", args="IgnoreUnknown=1;X=a\0b")
    assert dl.shim("DEL", ctr)[0] == 0 and dl.shim("DEL", other)[0] == 0
    assert dl.cache_files() == []


def test_an_undo_that_can_never_succeed_is_kept_while_its_interface_is_there(dl: DaemonLab) -> None:
    """A plugin that refuses the version of an attachment whose interface is up (a plugin downgraded under a
    running container): the DEL fails, and the attachment is kept, marked as failing for good (shown by `netcomp
    attachments`, not retried every 5 minutes); once the interface is gone, the DEL succeeds."""

    ctr = dl.lab.container()
    assert dl.shim("ADD", ctr, args="NETCOMP_NETWORKS=storage")[0] == 0
    entry = dl.daemon.records.load(f"ctr-{ctr}", "eth0")
    assert entry is not None
    stor = next(a for a in entry.attachments if a.network == "storage")
    stor.conflist = {**stor.conflist, "cniVersion": "1.1.0"}
    dl.daemon.records.save(entry)
    rc, err = dl.shim("DEL", ctr)
    assert rc == 1 and err["code"] == 1
    assert sorted(dl.lab.links(ctr)) == ["lo", "stor0"]  # the default network went; storage's could not
    doc = dl.daemon.delegator.attachments()
    [net] = doc["containers"][0]["networks"]
    assert net["state"] == "undo" and net["permanent"] is True and "incompatible" in net["error"]
    assert dl.daemon.delegator.retry_unfinished() == (0, 0)  # not tried again: nothing can change
    ip("link", "del", "stor0", netns=ctr)
    assert dl.shim("DEL", ctr)[0] == 0
    assert dl.cache_files() == []


# ------------------------------------------------------------------------------------------------------ GC


@pytest.mark.parametrize(
    "valid",
    [
        [None],
        [{"containerId": "ctr-x", "ifname": "eth0"}],
        [{"containerID": "ctr-x"}],
        [{"containerID": "ctr-x", "ifname": "eth0", "extra": 1}],
        [{"containerID": "", "ifname": "eth0"}],
        "ctr-x",
    ],
)
def test_a_gc_whose_list_is_malformed_tears_down_nothing(dl: DaemonLab, valid: Any) -> None:
    ctr = dl.lab.container()
    assert dl.shim("ADD", ctr)[0] == 0
    rc, err = dl.shim("GC", "", version="1.1.0", extra={"cni.dev/valid-attachments": valid})
    assert rc == 1 and err["code"] == 7 and "nothing was deleted" in err["details"], err
    assert sorted(dl.lab.links(ctr)) == ["eth0", "lo"] and len(dl.cache_files()) == 1 and len(dl.leases()) == 1


def test_gc_is_refused_before_cni_1_1(dl: DaemonLab) -> None:
    ctr = dl.lab.container()
    assert dl.shim("ADD", ctr)[0] == 0
    rc, err = dl.shim("GC", "", version="1.0.0", extra={"cni.dev/valid-attachments": []})
    assert rc == 1 and err["code"] == 1, err
    assert sorted(dl.lab.links(ctr)) == ["eth0", "lo"] and len(dl.cache_files()) == 1
    rc, _ = dl.shim("GC", "", version="1.1.0", extra={"cni.dev/valid-attachments": []})
    assert rc == 0 and dl.lab.links(ctr) == ["lo"] and dl.cache_files() == [] and dl.leases() == []
