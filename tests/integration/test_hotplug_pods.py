"""Hot-plug by editing the pod, against a real kube-apiserver with the real plugins in network namespaces: an edit of
a running pod's k8s.v1.cni.cncf.io/networks annotation attaches what it adds and detaches what it removes
(renames are a detach and an attach), read back from the pod's namespace, its network-status and events; a
failing add leaves the pod as it was; an edit made while a failed rollback waits to be undone is carried out once
it is; a daemon killed mid-hot-plug finishes the job when it starts again."""

from __future__ import annotations

import contextlib
import io
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from netcomp.cli.ask import _print_status
from tests.lab.daemonlab import DaemonLab
from tests.lab.kubeapi import ApiServer
from tests.lab.labpods import NETWORKS, STATUS, attach, cni_args, detach, edit, events_of, links, pod, status_of

pytestmark = pytest.mark.root


def test_an_edit_attaches_what_it_adds_and_detaches_what_it_removes(admin: Any, multus_node: DaemonLab) -> None:
    with pod(admin, multus_node, "editme", **{NETWORKS: "storage"}) as p:
        ctr, rc, res = attach(multus_node, p)
        assert rc == 0, res
        assert links(multus_node, ctr) == ["eth0", "net1"]
        storage_addr = multus_node.lab.addrs(ctr, "net1")
        edit(admin, multus_node, p, "storage, backup")
        assert links(multus_node, ctr) == ["eth0", "net1", "net2"]
        assert multus_node.lab.addrs(ctr, "net1") == storage_addr  # untouched
        assert multus_node.lab.addrs(ctr, "net2")[0].startswith("10.80.0.")
        assert [(s["name"], s["interface"]) for s in status_of(admin, multus_node, p)] == [
            ("mgmt", "eth0"),
            ("storage", "net1"),
            ("backup", "net2"),
        ]
        # storage removed: backup moves to position 1, so Multus's name for it is net1 now (a detach and an
        # attach), and storage's lease is freed.
        edit(admin, multus_node, p, "backup")
        assert links(multus_node, ctr) == ["eth0", "net1"] and multus_node.lab.addrs(ctr, "net1")[0].startswith(
            "10.80.0."
        )
        assert [(s["name"], s["interface"]) for s in status_of(admin, multus_node, p)] == [
            ("mgmt", "eth0"),
            ("backup", "net1"),
        ]
        assert not any(lease.startswith("storage") for lease in multus_node.leases())
        reasons = [(r, m.split(" [")[0]) for _, r, m in events_of(admin, multus_node, p)]
        assert ("RemovedInterface", "Remove net1 (hot-plug)") in reasons and (
            "RemovedInterface",
            "Remove net2 (hot-plug)",
        ) in reasons
        # An explicit interface name: a rename of the same network is a detach and an attach.
        edit(admin, multus_node, p, "backup@bk7")
        assert links(multus_node, ctr) == ["bk7", "eth0"]
        detach(multus_node, ctr, p)


def test_a_failing_add_leaves_the_pod_as_it_was(admin: Any, multus_node: DaemonLab) -> None:
    """'signal' is an ipvlan network, which this kernel refuses ("operation not supported"): its plugin fails,
    the ADD is rolled back, the pod keeps what it had, and a warning event says why."""
    with pod(admin, multus_node, "failing", **{NETWORKS: "storage"}) as p:
        ctr, rc, res = attach(multus_node, p)
        assert rc == 0, res
        edit(admin, multus_node, p, "storage, signal")
        assert links(multus_node, ctr) == ["eth0", "net1"]
        warnings = [m for kind, r, m in events_of(admin, multus_node, p) if kind == "Warning" and r == "FailedHotplug"]
        assert any("network 'signal', plugin 'ipvlan'" in m for m in warnings), warnings
        assert [(s["name"], s["interface"]) for s in status_of(admin, multus_node, p)] == [
            ("mgmt", "eth0"),
            ("storage", "net1"),
        ]
        edit(admin, multus_node, p, "storage@eth0")  # refused before anything runs: the runtime's interface
        assert links(multus_node, ctr) == ["eth0", "net1"]
        detach(multus_node, ctr, p)


def test_a_restart_reads_the_records_once_and_syncs_an_edit_made_meanwhile(admin: Any, multus_node: DaemonLab) -> None:
    """Three pods with records, one edited while the daemon is down. The daemon started again lists and reads
    the records once (Records.scan, the real one, counted: the address blocks, recovery and the pod sync's first
    pass share that read, not one read per pod), and that first pass attaches what the edit asks."""
    from kubernetes import client

    from netcomp.daemon.daemon import Daemon

    with contextlib.ExitStack() as stack:
        pods = [stack.enter_context(pod(admin, multus_node, f"many-{i}", **{NETWORKS: "storage"})) for i in range(3)]
        ctrs = []
        for p in pods:
            ctr, rc, res = attach(multus_node, p)
            assert rc == 0, res
            ctrs.append(ctr)
        multus_node.daemon.stop(drain=5)
        edited = {"metadata": {"annotations": {NETWORKS: "storage, backup"}}}
        client.CoreV1Api(admin).patch_namespaced_pod(pods[0]["name"], pods[0]["ns"], edited)
        d = Daemon(lambda: multus_node.settings, exec_=multus_node.lab.exec_in_host, link_netns=multus_node.lab.host,
                   state_path=multus_node.base / "state.json")  # fmt: skip
        scans: list[str] = []
        scan = d.records.scan

        def counted() -> Any:
            scans.append(threading.current_thread().name)
            return scan()

        d.records.scan = counted  # type: ignore[method-assign]
        multus_node.daemon = d  # the module's fixture stops it
        d.start_cluster()
        d.reload()
        d.start()
        d.watch()
        assert d.podsync is not None and d.podsync.wait_synced(2, 60), "the start-up pass did not sync 3 pods"
        assert links(multus_node, ctrs[0]) == ["eth0", "net1", "net2"]
        assert [links(multus_node, c) for c in ctrs[1:]] == [["eth0", "net1"], ["eth0", "net1"]]
        # The EndpointSlices' thread (kube-reconcile) reads the records it follows on its own, beside start-up.
        assert [t for t in scans if t != "kube-reconcile"] == ["MainThread"]
        for ctr, p in zip(ctrs[1:], pods[1:], strict=True):
            assert multus_node.shim("DEL", ctr, args=cni_args(p, ctr))[0] == 0
        detach(multus_node, ctrs[0], pods[0])  # and nothing of the three is left


def test_a_restart_syncs_a_pod_that_an_earlier_pod_of_its_name_left_a_record_of(
    admin: Any, multus_node: DaemonLab
) -> None:
    """Records of one pod name: the live pod's, one an earlier pod of that name left (another uid: its DEL never
    came) listed after it, and one of the live pod's whose namespace is gone listed before it. The start-up pass
    syncs the live pod's container with an edit made while the daemon was down, whichever record is read last
    (the earlier pod's is not touched: the watch does not have its uid). The planted records are copies of the
    live one's, removed by hand at the end (their DEL would take the live one's interfaces)."""
    from kubernetes import client

    from netcomp.daemon.daemon import Daemon

    with pod(admin, multus_node, "twice", **{NETWORKS: "storage"}) as p:
        ctr, rc, res = attach(multus_node, p)
        assert rc == 0, res
        real = multus_node.daemon.records.path(f"ctr-{ctr}", "eth0")
        stale = next(
            c for c in (f"ctr-stale{i}" for i in range(999)) if multus_node.daemon.records.path(c, "eth0") > real
        )
        doc = json.loads(real.read_bytes().partition(b"\x1e")[0])
        doc |= {"containerID": stale, "pod": doc["pod"] | {"uid": "0000-earlier-pod"}}
        doc["attachments"] = [a | {"state": "attached"} for a in doc["attachments"]]
        planted = [multus_node.daemon.records.path(stale, "eth0")]
        planted[0].write_text(json.dumps(doc))
        gone = next(
            c for c in (f"ctr-gone{i}" for i in range(999)) if multus_node.daemon.records.path(c, "eth0") < real
        )
        doc |= {"containerID": gone, "pod": doc["pod"] | {"uid": p["uid"]}, "netns": "/var/run/netns/nc-gone-0"}
        planted.append(multus_node.daemon.records.path(gone, "eth0"))
        planted[1].write_text(json.dumps(doc))
        try:
            multus_node.daemon.stop(drain=5)
            edited = {"metadata": {"annotations": {NETWORKS: "storage, backup"}}}
            client.CoreV1Api(admin).patch_namespaced_pod(p["name"], p["ns"], edited)
            lab = multus_node.lab
            multus_node.daemon = d = Daemon(lambda: multus_node.settings, exec_=lab.exec_in_host, link_netns=lab.host,
                                            state_path=multus_node.base / "state.json")  # fmt: skip
            d.start_cluster()
            d.reload()
            d.start()
            d.watch()
            assert d.podsync is not None and d.podsync.wait_synced(0, 60)
            assert links(multus_node, ctr) == ["eth0", "net1", "net2"]
        finally:
            for f in planted:
                f.unlink()
        detach(multus_node, ctr, p)


# A delegate whose ADD makes its interface (the real macvlan) and then fails, and whose first DEL of an interface
# fails (a file per container and interface in @STATE@ says it failed once); every later DEL is macvlan's own.
ADD_FAILS_DEL_FAILS_ONCE = """#!/bin/sh
if [ "$CNI_COMMAND" = ADD ]; then
  @PLUGIN@/macvlan >/dev/null || exit 1
  echo '{"cniVersion": "1.0.0", "code": 11, "msg": "test: this ADD fails after making its interface"}'
  exit 1
fi
once="@STATE@/$CNI_CONTAINERID-$CNI_IFNAME"
if [ "$CNI_COMMAND" = DEL ] && [ ! -e "$once" ]; then
  : > "$once"
  echo '{"cniVersion": "1.0.0", "code": 11, "msg": "test: this DEL fails once"}'
  exit 1
fi
exec @PLUGIN@/macvlan
"""


def test_an_edit_made_while_an_undo_waits_is_carried_out_once_it_is_undone(
    api: ApiServer, admin: Any, tmp_path: Path
) -> None:
    """A hot-plug ADD that fails with its interface made, and whose rollback DEL fails too (the delegate above):
    the record keeps that attachment to undo, and an edit of the pod made meanwhile waits for it. The retry of
    unfinished undos (the daemon's every few minutes, called here) DELs it; the pod is synced again with no other
    edit and gets what its annotation asks now. A record removed while its edit waits is forgotten."""
    from tests.lab.daemonlab import kube_lab, wait_for
    from tests.lab.intents import intent
    from tests.lab.netlab import PLUGIN_DIR

    plugins, state = tmp_path / "plugins", tmp_path / "plugin-state"
    plugins.mkdir()
    state.mkdir()
    script = plugins / "failing"
    script.write_text(ADD_FAILS_DEL_FAILS_ONCE.replace("@STATE@", str(state)).replace("@PLUGIN@", PLUGIN_DIR))
    script.chmod(0o755)
    with kube_lab(tmp_path, api.node_kubeconfig, settings={"pluginDirs": [str(plugins), PLUGIN_DIR]}) as dl:
        ipam = {"type": "host-local", "dataDir": f"{tmp_path}/ipam", "subnet": "10.93.0.0/24"}
        conf = {
            "cniVersion": "1.0.0",
            "name": "faulty",
            "plugins": [{"type": "failing", "master": dl.lab.master, "ipam": ipam}],
        }
        (tmp_path / "static.d").mkdir(exist_ok=True)
        (tmp_path / "static.d" / "faulty.conflist").write_text(json.dumps(conf))
        (tmp_path / "networks.d" / "80-faulty.yaml").write_text(intent("faulty", "{type: static, networkID: faulty}"))
        wait_for(dl, lambda: "faulty" in dl.daemon.state.networks(), "the faulty network compiled")
        sync, d = dl.daemon.podsync, dl.daemon.delegator
        assert sync is not None
        with pod(admin, dl, "waits", **{NETWORKS: "storage"}) as p:
            ctr, rc, res = attach(dl, p)
            assert rc == 0, res
            edit(admin, dl, p, "storage, faulty")  # fails; its interface stays, to undo
            assert list(d.unfinished.values()) == [1] and links(dl, ctr) == ["eth0", "net1", "net2"]
            edit(admin, dl, p, "storage, backup")  # waits for the undo of net2
            assert sync.waiting == 1 and links(dl, ctr) == ["eth0", "net1", "net2"]
            status = dl.daemon.status()
            assert (status["podEditsWaiting"], status["attachmentsToUndo"]) == (1, 1)
            out = io.StringIO()
            _print_status(status, out)
            said = "  1 attachment to undo (netcomp attachments lists them); 1 pod edit waits for the undo\n"
            assert said in out.getvalue()
            assert not any(lease.startswith("backup") for lease in dl.leases())
            before = sync.synced
            assert d.retry_unfinished() == (1, 0)
            assert sync.wait_synced(before, 60), "the pod was not synced again once its undo was done"
            assert sync.waiting == 0 and d.unfinished == {}
            status, out = dl.daemon.status(), io.StringIO()
            _print_status(status, out)
            assert (status["podEditsWaiting"], status["attachmentsToUndo"]) == (0, 0)
            assert "to undo" not in out.getvalue() and "waits" not in out.getvalue()
            assert links(dl, ctr) == ["eth0", "net1", "net2"] and dl.lab.addrs(ctr, "net2")[0].startswith("10.80.0.")
            assert [(s["name"], s["interface"]) for s in status_of(admin, dl, p)] == [
                ("mgmt", "eth0"),
                ("storage", "net1"),
                ("backup", "net2"),
            ]
            # Again, and the container DELeted while its edit waits: the DEL undoes it, and nothing waits on.
            edit(admin, dl, p, "storage, backup, faulty")
            assert list(d.unfinished.values()) == [1]
            edit(admin, dl, p, "storage")
            assert sync.waiting == 1
            detach(dl, ctr, p)
            assert sync.waiting == 0 and d.unfinished == {}


def test_hotplug_can_be_turned_off(api: ApiServer, admin: Any, tmp_path: Path) -> None:
    from tests.lab.daemonlab import kube_lab

    with kube_lab(tmp_path, api.node_kubeconfig, hotplug=False) as dl:
        assert dl.daemon.podsync is None


def test_a_daemon_killed_mid_hotplug_finishes_it_when_it_starts_again(
    api: ApiServer, admin: Any, tmp_path: Path
) -> None:
    """SIGKILL in the hot-plug's ADD, its record written and no plugin run (the second pass of after-write-ahead:
    the first is the pod's own ADD): the daemon that starts again undoes it, then compares the pod's record with
    its annotation and attaches what the edit asked for. The pod ends as its annotation says."""
    import concurrent.futures

    from kubernetes import client, watch

    from tests.lab.procdaemon import kube_proc_node

    core = client.CoreV1Api(admin)
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "killed", "annotations": {NETWORKS: "storage"}},
        "spec": {"nodeName": "node-h", "containers": [{"name": "c", "image": "registry.invalid/none"}]},
    }
    created = core.create_namespaced_pod("default", body)
    args = f"IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=killed;K8S_POD_UID={created.metadata.uid}"
    try:
        with kube_proc_node(api, tmp_path, "node-h", env={"NETCOMP_CRASH_AT": "after-write-ahead:2"}) as n:
            ctr = n.lab.container()
            assert n.shim("ADD", ctr, args=args)[0] == 0
            assert sorted(n.lab.links(ctr)) == ["eth0", "lo", "net1"]
            core.patch_namespaced_pod("killed", "default", {"metadata": {"annotations": {NETWORKS: "storage, backup"}}})
            assert n.proc is not None and n.proc.wait(timeout=60) == -9, n.logs()
            n.env.pop("NETCOMP_CRASH_AT")
            stream = watch.Watch()
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                seen = pool.submit(_wait_status, stream, core, ["eth0", "net1", "net2"])
                n.start()
                assert seen.result(timeout=120), n.logs()
            assert sorted(n.lab.links(ctr)) == ["eth0", "lo", "net1", "net2"]
            assert n.shim("DEL", ctr, args=args)[0] == 0
            assert n.lab.links(ctr) == ["lo"] and n.cache_files() == [] and n.leases() == []
    finally:
        core.delete_namespaced_pod("killed", "default", grace_period_seconds=0)


def _wait_status(stream: Any, core: Any, interfaces: list[str]) -> bool:
    """Until the pod's network-status names exactly these interfaces (a watch: no polling)."""
    import json

    for event in stream.stream(
        core.list_namespaced_pod, "default", field_selector="metadata.name=killed", timeout_seconds=110
    ):
        got = (event["object"].metadata.annotations or {}).get(STATUS)
        if got and [s["interface"] for s in json.loads(got)] == interfaces:
            stream.stop()
            return True
    return False
