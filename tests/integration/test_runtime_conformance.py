"""netcomp driven as runtimes other than the team's drive it (libcni's cnitool, containerd, CRI-O, podman): the
real shim, the real daemon, real plugins in real namespaces, each verb at each cniVersion the shim claims, and the
answers held to what the CNI spec and libcni's skel say: the verbs a version lacks refused with code 1, DEL that
succeeds whatever is left of the container, GC that touches only the network it names, runtimeConfig that reaches
the plugins declaring the capability."""

from __future__ import annotations

import errno
import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.lab.daemonlab import DaemonLab, daemon_lab, run_shim
from tests.lab.intents import intent
from tests.lab.netlab import PLUGIN_DIR, ip
from tests.lab.poll import until
from tests.lab.shimlab import build_all, pick

pytestmark = pytest.mark.root

VERSIONS = ("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")


@pytest.mark.parametrize("version", VERSIONS)
def test_every_verb_at_every_version(dl: DaemonLab, version: str) -> None:
    """ADD's result is in the request's version (`version` on each IP before 1.0.0); CHECK (with libcni's
    prevResult) from 0.4.0 on, GC and STATUS from 1.1.0 on; before that each is CNI error 1 in the request's
    version, as libcni's skel answers, and changes nothing."""
    ctr = dl.lab.container()
    rc, result = dl.shim("ADD", ctr, version=version)
    assert rc == 0 and result["cniVersion"] == version, result
    assert all(("version" in ipc) == (version < "1.0.0") for ipc in result["ips"]), result
    valid = {"cni.dev/valid-attachments": [{"containerID": f"ctr-{ctr}", "ifname": "eth0"}]}
    prev = {"prevResult": result}  # libcni's CHECK and DEL carry the cached ADD result
    for verb, since, extra in (("CHECK", "0.4.0", prev), ("STATUS", "1.1.0", {}), ("GC", "1.1.0", valid)):
        rc, out = dl.shim(verb, ctr, version=version, extra=extra)
        if version >= since:
            assert rc == 0 and out is None, (verb, out)
        else:
            assert rc == 1 and out["code"] == 1 and out["cniVersion"] == version, (verb, out)
            assert out["msg"] == f"config version {version} does not allow {verb}", out
    assert sorted(dl.lab.links(ctr)) == ["eth0", "lo"]
    rc, out = dl.shim("VERSION", ctr, version=version)
    assert rc == 0 and version in out["supportedVersions"]
    assert dl.shim("DEL", ctr, version=version, extra=prev) == (0, None)
    assert dl.lab.links(ctr) == ["lo"] and dl.cache_files() == [] and dl.leases() == []


def test_del_succeeds_whatever_is_left(dl: DaemonLab) -> None:
    """DEL of a container never added, DEL without CNI_NETNS (libcni's cache gone, or a runtime that forgot
    it), DEL after the namespace was deleted, DEL twice: each succeeds, and the addresses are given back."""
    never = dl.lab.container()
    assert dl.shim("DEL", never) == (0, None)
    assert dl.shim("DEL", never, netns="/var/run/netns/nc-never-made") == (0, None)
    assert dl.shim("DEL", never, netns="") == (0, None)
    gone, empty = dl.lab.container(), dl.lab.container()
    for ctr in (gone, empty):
        assert dl.shim("ADD", ctr)[0] == 0
    ip("netns", "del", gone)
    assert dl.shim("DEL", gone) == (0, None)
    assert dl.shim("DEL", empty, netns="") == (0, None)
    assert dl.shim("DEL", empty, netns="") == (0, None)
    assert dl.cache_files() == [] and dl.leases() == []


def test_gc_touches_only_the_network_it_names(dl: DaemonLab) -> None:
    """Two runtimes on one node, each with a network of its own whose plugin is netcomp's shim (podman's
    "podnet", containerd's "netcomp"): GC is about "this network" (CNI 1.1, "GC"; libcni GCs only the cached
    attachments of the list it is given), so podman's GC, listing none of containerd's containers, leaves them
    attached. The GC of containerd's own network, as libcni sends it (both keys), removes what it does not list."""
    ours, stale = dl.lab.container(), dl.lab.container()
    for ctr in (ours, stale):
        assert dl.shim("ADD", ctr)[0] == 0
    rc, out = dl.shim("GC", "", version="1.1.0", extra={"name": "podnet", "cni.dev/valid-attachments": []})
    assert rc == 0, out
    assert sorted(dl.lab.links(ours)) == sorted(dl.lab.links(stale)) == ["eth0", "lo"]
    assert len(dl.cache_files()) == 2
    valid = [{"containerID": f"ctr-{ours}", "ifname": "eth0"}]
    extra = {"cni.dev/valid-attachments": valid, "cni.dev/attachments": valid}
    assert dl.shim("GC", "", version="1.1.0", extra=extra) == (0, None)
    assert dl.lab.links(stale) == ["lo"] and sorted(dl.lab.links(ours)) == ["eth0", "lo"]
    assert len(dl.cache_files()) == 1
    assert dl.shim("DEL", ours) == (0, None)
    assert dl.cache_files() == [] and dl.leases() == []


def test_add_again_and_after_a_failed_add(dl: DaemonLab) -> None:
    """The same ADD twice is answered with the first one's result; an ADD after a failed one (rolled back)
    attaches; errors are one CNI error object with code and message, exit status 1."""
    ctr = dl.lab.container()
    rc, err = dl.shim("ADD", ctr, args="IgnoreUnknown=1;NETCOMP_NETWORKS=nowhere")
    assert rc == 1 and err["code"] == 999 and err["msg"].startswith("network 'nowhere', plugin 'macvlan'"), err
    assert dl.lab.links(ctr) == ["lo"]
    rc, first = dl.shim("ADD", ctr)
    assert rc == 0
    assert dl.shim("ADD", ctr) == (0, first)
    rc, err = dl.shim("ADD", ctr, version="0.4.0")
    assert rc == 1 and err["code"] == 7 and err["cniVersion"] == "0.4.0", err
    assert dl.shim("DEL", ctr) == (0, None)
    assert dl.cache_files() == [] and dl.leases() == []


def test_runtime_config_reaches_the_plugins_that_declare_it(dl: DaemonLab, tmp_path: Path) -> None:
    """runtimeConfig's `mac` reaches tuning, which declares the capability, and the interface gets it; bridge,
    which declares none, is not given it (it would refuse nothing, but the MAC is tuning's to set)."""
    conflist = {
        "cniVersion": "1.0.0",
        "name": "lab-tuned",
        "plugins": [
            {"type": "bridge", "bridge": "ncbr9", "ipam": {"type": "host-local", "dataDir": f"{dl.base}/ipam",
                                                        "subnet": "10.86.0.0/24"}},
            {"type": "tuning", "capabilities": {"mac": True}},
        ],
    }  # fmt: skip
    (dl.base / "static.d" / "lab-tuned.conflist").write_text(json.dumps(conflist))
    (dl.base / "networks.d" / "80-tuned.yaml").write_text(intent("tuned", "{type: static, networkID: lab-tuned}"))
    dl.daemon.reload()
    ctr = dl.lab.container()
    mac = "02:00:00:00:86:02"
    rc, out = dl.shim(
        "ADD", ctr, args="NETCOMP_NETWORKS=tuned@tun0", extra={"runtimeConfig": {"mac": mac, "portMappings": []}}
    )
    assert rc == 0, out
    assert dl.lab.mac(ctr, "tun0") == mac and dl.lab.mac(ctr, "eth0") != mac
    assert dl.shim("CHECK", ctr) == (0, None)
    assert dl.shim("DEL", ctr) == (0, None)
    assert dl.cache_files() == [] and dl.leases() == []


def test_gc_leaves_a_container_whose_add_is_in_flight(tmp_path: Path) -> None:
    """A GC that comes while a container's ADD runs (a runtime's GC built its list before the sandbox it is
    making was in it) leaves that container attached: its ADD is answered success, so the runtime holds it. The
    next GC, with its ADD done, decides on it."""
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    slow = plugins / "slowbridge"
    slow.write_text(f'#!/bin/sh\n[ "$CNI_COMMAND" = ADD ] && cat {gate} >/dev/null\nexec {PLUGIN_DIR}/bridge\n')
    slow.chmod(0o755)
    with daemon_lab(tmp_path / "d", extra={"pluginDirs": [PLUGIN_DIR, str(plugins)]}) as dl:
        conflist = {
            "cniVersion": "1.0.0",
            "name": "lab-slow",
            "plugins": [{"type": "slowbridge", "bridge": "ncbr8", "ipam": {"type": "host-local",
                         "dataDir": f"{dl.base}/ipam", "subnet": "10.87.0.0/24"}}],
        }  # fmt: skip
        (dl.base / "static.d" / "lab-slow.conflist").write_text(json.dumps(conflist))
        (dl.base / "networks.d" / "80-slow.yaml").write_text(intent("slow", "{type: static, networkID: lab-slow}"))
        dl.daemon.reload()
        ctr = dl.lab.container()
        with ThreadPoolExecutor(2) as pool:
            add = pool.submit(dl.shim, "ADD", ctr, args="NETCOMP_NETWORKS=slow")
            until(lambda: dl.cache_files(), "the ADD never wrote its record")
            gc = pool.submit(dl.shim, "GC", "", version="1.1.0", extra={"cni.dev/valid-attachments": []})
            try:  # a GC that waits for the ADD's lock is never done while the ADD's plugin waits at its gate
                until(gc.done, "the GC waited for the ADD in flight")
            finally:
                until(lambda: _open_gate(gate), "the ADD's plugin never waited at its gate")  # it goes on
            assert add.result()[0] == 0 and gc.result() == (0, None)
        assert sorted(dl.lab.links(ctr)) == ["eth0", "lo", "net0"]
        assert dl.shim("GC", "", version="1.1.0", extra={"cni.dev/valid-attachments": []}) == (0, None)
        assert dl.lab.links(ctr) == ["lo"] and dl.cache_files() == [] and dl.leases() == []


def _open_gate(fifo: Path) -> bool:
    """Let the plugin waiting on `fifo` go on: False while no one reads it yet (the plugin not there yet)."""
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as e:
        if e.errno == errno.ENXIO:
            return False
        raise
    os.close(fd)
    return True


def test_the_compiled_shim_answers_as_the_python_one(dl: DaemonLab, tmp_path: Path) -> None:
    """The verbs a version lacks, a DEL with nothing left and an ADD converted down, through the C shim: the same
    answers byte for byte in meaning (the daemon decides; the shim prints)."""
    shim = pick(build_all(tmp_path / "shims"), "c")
    ctr = dl.lab.container()

    def run(verb: str, version: str, **kw: str) -> tuple[int, Any]:
        conf = {"cniVersion": version, "socket": dl.sock, "readyTimeout": 2}
        return run_shim(conf, verb, ctr, shim=list(shim.argv), **kw)

    rc, result = run("ADD", "0.3.1")
    assert rc == 0 and result["cniVersion"] == "0.3.1" and all(i["version"] == "4" for i in result["ips"])
    rc, err = run("CHECK", "0.3.1")
    assert rc == 1 and (err["code"], err["cniVersion"]) == (1, "0.3.1"), err
    rc, err = run("STATUS", "1.0.0")
    assert rc == 1 and (err["code"], err["cniVersion"]) == (1, "1.0.0"), err
    assert run("CHECK", "0.4.0") == (0, None)
    assert run("DEL", "0.3.1") == (0, None)
    assert run("DEL", "0.3.1", netns="") == (0, None)
    assert dl.lab.links(ctr) == ["lo"] and dl.cache_files() == [] and dl.leases() == []


def test_check_says_unknown_container_only_when_nothing_is_left_to_clean_up(dl: DaemonLab) -> None:
    """CNI error 3 tells the runtime it need not DEL (spec, "Error"): right for a container netcomp has no record
    of, wrong for one whose namespace is gone while its addresses are still held. That one is libcni's
    ErrInvalidNetNS (8), and the runtime's DEL gives its addresses back."""
    never = dl.lab.container()
    rc, err = dl.shim("CHECK", never)
    assert rc == 1 and err["code"] == 3, err
    ctr = dl.lab.container()
    assert dl.shim("ADD", ctr)[0] == 0
    ip("netns", "del", ctr)
    rc, err = dl.shim("CHECK", ctr)
    assert rc == 1 and err["code"] == 8 and "is gone" in err["msg"], err
    assert dl.leases() != []
    assert dl.shim("DEL", ctr) == (0, None)
    assert dl.leases() == [] and dl.cache_files() == []
