"""Devices a device plugin manages: the pod's device IDs from the kubelet (PodResources v1, the checkpoint file
when that cannot answer), handed to its networks in order, put where their plugins read them, device-info copied
and removed, and every refusal before any plugin runs.

The kubelet's PodResources API is a stand-in here (tests/lab/podresources.py: a real gRPC server on a
unix socket, with answers chosen per test, and one that never answers); the real kubelet answers in
tests/integration/test_kubelet_node.py. The plugins are stand-ins that record the config they are given (the
real host-device plugin takes its device in tests/integration/test_device_plugin.py)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from netcomp.cni.invoke import ExecResult, Runner
from netcomp.delegate.delegator import Delegator
from netcomp.delegate.request import parse_request
from netcomp.errors import DelegateError
from netcomp.kubelet import devinfo
from netcomp.kubelet.podresources import Kubelet
from netcomp.pods.devices import Devices
from netcomp.pods.multus import Policy
from netcomp.pods.naming import PodRef
from netcomp.pods.netstatus import network_status
from netcomp.records.files import Records
from tests.lab.podresources import MSGS, PodResourcesServer, podresources

OWN_NETNS = "/proc/self/ns/net"  # a real namespace any user can open; the stand-in plugins attach nothing to it
RES = "netcomp.io/vf"
POD = ("default", "p1")


def sriov_net(name: str, resource: str = RES) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": name,
        "plugins": [{"type": "sriov", "vlan": 300}],
        "netcomp": {"generated": True, "type": "sriov", "resourceName": resource},
    }


NAD = {
    "cniVersion": "1.0.0",
    "name": "default.hd",
    "plugins": [
        {"type": "host-device", "capabilities": {"deviceID": True, "CNIDeviceInfoFile": True}},
        {"type": "tuning", "mtu": 1400},
    ],
    "netcomp": {"generated": True, "type": "static", "namespace": "default", "resourceName": RES},
}
NETS = {"vf-a": sriov_net("vf-a"), "vf-b": sriov_net("vf-b"), "default.hd": NAD, "pool": sriov_net("pool", "x.io/p")}


class FakePods:
    """The pod's annotations, as the cluster would give them (the API server is not what these tests are about)."""

    def __init__(self) -> None:
        self.policy = Policy()
        self.notes: dict[tuple[str, str], dict[str, str]] = {}
        self.status: dict[str, Any] = {}

    def annotations(self, pod: PodRef) -> Mapping[str, str]:
        return self.notes.get((pod.namespace, pod.name), {})

    def report(self, pod: PodRef, status: list[dict[str, Any]]) -> None:
        self.status[str(pod)] = status

    def event(self, pod: PodRef, kind: str, reason: str, message: str) -> None:
        pass


class Node:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.sock = str(tmp / "pod-resources.sock")
        self.checkpoint = tmp / "kubelet_internal_checkpoint"
        self.info = tmp / "devinfo"
        self.seen: list[dict[str, Any]] = []
        self.pods = FakePods()
        self.pools: set[str] = {"x.io/p"}
        self.d = self.delegator()

    def plugin(self, argv: Any, env: Any, stdin: bytes, timeout: float) -> ExecResult:
        if env["CNI_COMMAND"] == "VERSION":  # asked once per plugin, before its first ADD
            return ExecResult(0, json.dumps({"cniVersion": "1.0.0", "supportedVersions": ["1.0.0"]}).encode(), b"")
        conf = json.loads(stdin)
        self.seen.append({"command": env["CNI_COMMAND"], "ifname": env["CNI_IFNAME"], "conf": conf})
        if env["CNI_COMMAND"] != "ADD":
            return ExecResult(0, b"", b"")
        out = {"cniVersion": "1.0.0", "interfaces": [{"name": env["CNI_IFNAME"], "sandbox": env["CNI_NETNS"]}]}
        return ExecResult(0, json.dumps(out).encode(), b"")

    def delegator(self, timeout: float = 2.0) -> Delegator:
        bin_dir = self.tmp / "bin"
        bin_dir.mkdir(exist_ok=True)
        for name in ("sriov", "host-device", "tuning"):
            (bin_dir / name).write_text("#!/bin/sh\n")
            (bin_dir / name).chmod(0o755)
        return Delegator(
            Runner([bin_dir], exec_=self.plugin),
            Records(self.tmp / "cache"),
            lambda: NETS,
            lambda: None,
            lambda netns: set(),
            vf_pool=lambda rn: ["0000:99:00.0"],
            pods=self.pods,  # type: ignore[arg-type]
            devices=Devices(Kubelet(self.sock, str(self.checkpoint), timeout), lambda: self.pools, str(self.info)),
        )

    def adds(self) -> list[tuple[str, Any]]:
        """(ifname, what the plugins were given as deviceID) of every ADD so far, by interface (a container's
        networks are attached side by side)."""
        return sorted((s["ifname"], s["conf"].get("deviceID")) for s in self.seen if s["command"] == "ADD")


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path)


@pytest.fixture
def api(node: Node) -> Iterator[PodResourcesServer]:
    with podresources(node.sock) as state:
        yield state


def req(cmd: str, cid: str, networks: str = "", pod: tuple[str, str] | None = POD, uid: str = "") -> Any:
    args = [f"NETCOMP_NETWORKS={networks}"] if networks else []
    if pod:
        args += [f"K8S_POD_NAMESPACE={pod[0]}", f"K8S_POD_NAME={pod[1]}"] + ([f"K8S_POD_UID={uid}"] if uid else [])
    env = {
        "CNI_COMMAND": cmd,
        "CNI_CONTAINERID": cid,
        "CNI_NETNS": OWN_NETNS,
        "CNI_IFNAME": "eth0",
        "CNI_ARGS": ";".join(args),
    }
    return parse_request(env, {"cniVersion": "1.0.0"})


def test_podresources_wire_format() -> None:
    """The bytes of a List answer as k8s.io/kubelet/pkg/apis/podresources/v1/api.proto numbers its fields:
    pod_resources 1; PodResources name 1, namespace 2, containers 3; ContainerResources name 1, devices 2;
    ContainerDevices resource_name 1, device_ids 2."""
    out = MSGS["ListPodResourcesResponse"]()
    pod = out.pod_resources.add(name="p", namespace="n")
    pod.containers.add(name="c").devices.add(resource_name="r", device_ids=["d"])
    dev = b"\x0a\x01r" + b"\x12\x01d"
    ctr = b"\x0a\x01c" + b"\x12" + bytes([len(dev)]) + dev
    body = b"\x0a\x01p" + b"\x12\x01n" + b"\x1a" + bytes([len(ctr)]) + ctr
    assert out.SerializeToString() == b"\x0a" + bytes([len(body)]) + body


def test_two_networks_of_one_resource_each_get_their_own_device_in_order(node: Node, api: PodResourcesServer) -> None:
    """The kubelet lists devices per NUMA node and as a set: they are merged, sorted and handed out in the
    order the networks come; the same pod's devices go the same way after a restart of the daemon."""
    api.pods[POD] = {"c1": [(RES, ["0000:3b:02.1"])], "c2": [(RES, ["0000:3b:02.0", "0000:3b:02.1"])]}
    node.d.handle(req("ADD", "a", "vf-a,vf-b"))
    assert node.adds() == [("net0", "0000:3b:02.0"), ("net1", "0000:3b:02.1")]
    entry = node.d.cache.load("a", "eth0")
    assert entry is not None
    assert [(a.network, a.device and a.device["id"]) for a in entry.attachments] == [
        ("vf-a", "0000:3b:02.0"),
        ("vf-b", "0000:3b:02.1"),
    ]
    node.d.close()
    node.d = node.delegator()  # a daemon started again: DEL uses what the record says
    node.seen.clear()
    node.d.handle(req("DEL", "a"))
    assert sorted((s["ifname"], s["conf"]["deviceID"]) for s in node.seen) == [
        ("net0", "0000:3b:02.0"),
        ("net1", "0000:3b:02.1"),
    ]
    node.seen.clear()
    node.d.handle(req("ADD", "a2", "vf-a,vf-b"))  # the pod's sandbox made again
    assert node.adds() == [("net0", "0000:3b:02.0"), ("net1", "0000:3b:02.1")]


def test_more_networks_than_devices_says_the_numbers_and_runs_nothing(node: Node, api: PodResourcesServer) -> None:
    api.pods[POD] = {"c1": [(RES, ["0000:3b:02.0"])]}
    with pytest.raises(DelegateError) as ei:
        node.d.handle(req("ADD", "a", "vf-a,vf-b"))
    assert ei.value.code == 7
    assert (
        f"pod default/p1: 2 networks (vf-a, vf-b) take a device of resource {RES}, and the kubelet gave the pod 1"
        in (ei.value.msg)
    )
    assert node.seen == [] and node.d.cache.load("a", "eth0") is None


def test_a_pod_without_the_resource_is_refused_naming_pod_network_and_resource(
    node: Node, api: PodResourcesServer
) -> None:
    api.pods[POD] = {"c1": [("other.io/thing", ["x"])]}
    with pytest.raises(DelegateError) as ei:
        node.d.handle(req("ADD", "a", "vf-a"))
    e = ei.value
    assert (
        e.code == 7
        and e.msg == f"pod default/p1: network vf-a takes a device of resource {RES}, and the kubelet gave the pod none"
    )
    assert f"resources: {{limits: {{{RES}: 1}}}}" in e.details and node.seen == []


def test_a_request_without_a_pod_is_refused(node: Node) -> None:
    with pytest.raises(DelegateError) as ei:
        node.d.handle(req("ADD", "a", "vf-a", pod=None))
    assert ei.value.code == 7 and "the request names no pod (K8S_POD_NAMESPACE and K8S_POD_NAME" in ei.value.msg


@pytest.mark.parametrize("layout", ["numa-map", "list"])
def test_no_socket_the_checkpoint_is_read_by_pod_uid(node: Node, layout: str) -> None:
    """Kubelets since 1.20 keep DeviceIDs per NUMA node; older ones as a list: both are read."""
    ids: Any = (
        {"0": ["0000:3b:02.1"], "1": ["0000:3b:02.0"]} if layout == "numa-map" else ["0000:3b:02.1", "0000:3b:02.0"]
    )
    entries = [
        {"PodUID": "u-1", "ContainerName": "c", "ResourceName": RES, "DeviceIDs": ids, "AllocResp": ""},
        {"PodUID": "u-2", "ContainerName": "c", "ResourceName": RES, "DeviceIDs": ["0000:3b:09.0"], "AllocResp": ""},
    ]
    node.checkpoint.write_text(
        json.dumps({"Data": {"PodDeviceEntries": entries, "RegisteredDevices": {}}, "Checksum": 1})
    )
    node.d.handle(req("ADD", "a", "vf-a,vf-b", uid="u-1"))
    assert node.adds() == [("net0", "0000:3b:02.0"), ("net1", "0000:3b:02.1")]


def test_an_api_that_never_answers_and_no_checkpoint_is_code_11_in_bounded_time(node: Node) -> None:
    node.d = node.delegator(timeout=0.3)
    with podresources(node.sock, PodResourcesServer(hang=True)) as api:
        api.pods[POD] = {"c1": [(RES, ["0000:3b:02.0"])]}
        with pytest.raises(DelegateError) as ei:
            node.d.handle(req("ADD", "a", "vf-a", uid="u-1"))
    e = ei.value
    assert e.code == 11 and e.details == "no plugin was run"
    assert "did not answer in 0.3 s" in e.msg and "no kubelet checkpoint" in e.msg
    assert node.seen == [] and node.d.cache.load("a", "eth0") is None


def test_an_api_that_never_answers_falls_back_to_the_checkpoint(node: Node) -> None:
    node.d = node.delegator(timeout=0.3)
    entries = [{"PodUID": "u-1", "ContainerName": "c", "ResourceName": RES, "DeviceIDs": {"0": ["0000:3b:02.7"]}}]
    node.checkpoint.write_text(json.dumps({"Data": {"PodDeviceEntries": entries}}))
    with podresources(node.sock, PodResourcesServer(hang=True)):
        node.d.handle(req("ADD", "a", "vf-a", uid="u-1"))
    assert node.adds() == [("net0", "0000:3b:02.7")]


def test_a_definition_gets_the_device_in_every_plugin_and_as_capabilities(node: Node, api: PodResourcesServer) -> None:
    """As Multus hands a device to a NetworkAttachmentDefinition's conflist: deviceID and pciBusID (host-device
    reads it) in every plugin, runtimeConfig deviceID and CNIDeviceInfoFile for the plugins declaring them."""
    api.pods[POD] = {"c1": [(RES, ["0000:3b:02.0"])]}
    dp = devinfo.dp_path(str(node.info), RES, "0000:3b:02.0")
    dp.parent.mkdir(parents=True)
    dp.write_text(
        json.dumps(
            {
                "type": "pci",
                "version": "1.1.0",
                "pci": {"pci-address": "0000:3b:02.0", "pf-pci-address": "0000:3b:00.0"},
            }
        )
    )
    node.d.handle(req("ADD", "a", "default/hd"))
    first, second = (s["conf"] for s in node.seen)
    copy = str(node.info / "cni" / "default-hd-a_net0")
    assert first["deviceID"] == first["pciBusID"] == "0000:3b:02.0" == second["deviceID"] == second["pciBusID"]
    assert first["runtimeConfig"] == {"deviceID": "0000:3b:02.0", "CNIDeviceInfoFile": copy}
    assert "runtimeConfig" not in second  # tuning declares neither capability
    assert json.loads(Path(copy).read_text())["pci"]["pf-pci-address"] == "0000:3b:00.0"
    assert stat.S_IMODE(os.stat(copy).st_mode) == 0o444
    entry = node.d.cache.load("a", "eth0")
    assert entry is not None
    status = network_status(entry.attachments, "eth0")
    assert status[0]["device-info"] == {
        "type": "pci",
        "version": "1.1.0",
        "pci": {"pci-address": "0000:3b:02.0", "pf-pci-address": "0000:3b:00.0"},
    }

    shown = node.d.attachments()["containers"][0]["networks"][0]
    assert shown["device"] == {"resource": RES, "id": "0000:3b:02.0"} and shown["device-info"]["type"] == "pci"
    node.d.handle(req("DEL", "a"))
    assert not os.path.exists(copy)


def test_no_device_plugin_file_gives_the_minimal_pci_record(node: Node, api: PodResourcesServer) -> None:
    api.pods[POD] = {"c1": [(RES, ["0000:3b:02.0"])]}
    node.d.handle(req("ADD", "a", "vf-a"))
    entry = node.d.cache.load("a", "eth0")
    assert entry is not None and entry.attachments[0].device is not None
    assert entry.attachments[0].device["info"] == {
        "type": "pci",
        "version": "1.1.0",
        "pci": {"pci-address": "0000:3b:02.0"},
    }
    assert Path(entry.attachments[0].device["file"]).exists()


def test_hotplug_takes_a_device_the_pod_holds_and_no_attachment_uses(node: Node, api: PodResourcesServer) -> None:
    api.pods[POD] = {"c1": [(RES, ["0000:3b:02.0", "0000:3b:02.1"])]}
    node.d.handle(req("ADD", "a", "vf-a"))
    pod = PodRef(*POD)
    node.d.hotplug("ADD", "a", OWN_NETNS, "vf-b", None, "eth0", pod)
    assert node.adds() == [("net0", "0000:3b:02.0"), ("net1", "0000:3b:02.1")]
    with pytest.raises(DelegateError) as ei:
        node.d.hotplug("ADD", "a", OWN_NETNS, "default/hd", None, "eth0", pod)
    assert ei.value.code == 7
    assert (
        "take a device of resource netcomp.io/vf, and the kubelet gave the pod 2, 2 of them used by its other networks"
        in ei.value.msg
    )
    with pytest.raises(DelegateError) as ei:
        node.d.hotplug("ADD", "a", OWN_NETNS, "default/hd", None, "eth0")
    assert "the request names no pod" in ei.value.msg
    node.d.hotplug("DEL", "a", "", "vf-b", None, "eth0")
    node.d.hotplug("ADD", "a", OWN_NETNS, "default/hd", None, "eth0", pod)
    assert node.adds()[-1] == ("net1", "0000:3b:02.1")  # given back by the detach


def test_a_pod_may_choose_one_of_its_devices(node: Node, api: PodResourcesServer) -> None:
    api.pods[POD] = {"c1": [(RES, ["0000:3b:02.0", "0000:3b:02.1"])]}
    node.pods.notes[POD] = {
        "k8s.v1.cni.cncf.io/networks": json.dumps([{"name": "vf-a", "deviceID": "0000:3b:02.1"}, {"name": "vf-b"}])
    }
    node.d.handle(req("ADD", "a"))
    assert node.adds() == [("net1", "0000:3b:02.1"), ("net2", "0000:3b:02.0")]  # Multus's names: by position
    node.pods.notes[POD] = {"k8s.v1.cni.cncf.io/networks": json.dumps([{"name": "vf-a", "deviceID": "0000:3b:09.7"}])}
    with pytest.raises(DelegateError) as ei:
        node.d.handle(req("ADD", "b"))
    assert "deviceID 0000:3b:09.7 is not a device of resource netcomp.io/vf the kubelet gave the pod" in ei.value.msg


def test_a_resource_that_is_a_pool_and_a_kubelet_resource_names_both(node: Node) -> None:
    node.checkpoint.write_text(json.dumps({"Data": {"PodDeviceEntries": [], "RegisteredDevices": {"x.io/p": ["a"]}}}))
    with pytest.raises(DelegateError) as ei:
        node.d.handle(req("ADD", "a", "pool"))
    e = ei.value
    assert e.code == 7 and e.network == "pool"
    assert "resource x.io/p is both a VF pool of netcomp.yaml (sriovPools) and a device plugin's resource" in e.msg
    node.checkpoint.unlink()
    node.d.handle(req("ADD", "a", "pool"))  # a node without that device plugin: the pool's
    assert node.adds() == [("net0", "0000:99:00.0")]


def test_a_device_plugins_add_never_reads_the_kubelets_checkpoint(
    node: Node, api: PodResourcesServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checkpoint (up to 16 MiB of JSON) is read for the pools' conflict check only when a network's
    resource is also a pool of netcomp.yaml: a device plugin's network, answered by PodResources, never."""

    def read(*_: object) -> set[str]:
        raise AssertionError("the checkpoint was read on a device plugin's ADD")

    monkeypatch.setattr(node.d.devices.kubelet, "registered", read)
    api.pods[POD] = {"c1": [(RES, ["0000:3b:02.0"])]}
    node.d.handle(req("ADD", "a", "vf-a"))
    assert node.adds() == [("net0", "0000:3b:02.0")]


def test_start_up_sweeps_copies_no_record_names(node: Node, api: PodResourcesServer) -> None:
    api.pods[POD] = {"c1": [(RES, ["0000:3b:02.0"])]}
    node.d.handle(req("ADD", "a", "vf-a"))
    cni = node.info / "cni"
    kept = {p.name for p in cni.iterdir()}
    (cni / "vf-a-gone_net0").write_text("{}")  # a DEL that could not remove it
    (cni / "vf-a-a_net7").write_text("{}")  # of a container with a record: not guessed about
    (cni / "othercni-x_net1").write_text("{}")  # another CNI's network
    (cni / ".vf-a-b_net0.netcomp-tmp").write_text("{")  # a copy's write a SIGKILL cut short

    node.d.recover()
    assert {p.name for p in cni.iterdir()} == kept | {"vf-a-a_net7", "othercni-x_net1"}


def test_start_up_sweeps_nothing_while_a_record_cannot_be_read(node: Node, api: PodResourcesServer) -> None:
    """A record that cannot be read (a disk fault, a hand edit) may be the one that names a copy: none is
    removed at start-up then (said in the log), so the copy is there still when the record is restored."""
    api.pods[POD] = {"c1": [(RES, ["0000:3b:02.0"])]}
    node.d.handle(req("ADD", "a", "vf-a"))
    cni = node.info / "cni"
    kept = {p.name for p in cni.iterdir()}
    assert kept
    record = node.d.cache.path("a", "eth0")
    good = record.read_bytes()
    record.write_bytes(b"{not json")

    node.d.recover()
    assert {p.name for p in cni.iterdir()} == kept and record.read_bytes() == b"{not json"
    record.write_bytes(good)
    node.d.recover()
    assert {p.name for p in cni.iterdir()} == kept


def test_the_idle_daemon_never_imports_grpc(tmp_path: Path) -> None:
    """A node whose networks name no device plugin's resource never loads grpc (its memory stays as it was)."""
    code = (
        "import sys\n"
        "from netcomp.pods.devices import Devices\n"
        "from netcomp.kubelet.podresources import Kubelet\n"
        f"d = Devices(Kubelet('{tmp_path}/s', '{tmp_path}/c', 1), lambda: set(), '{tmp_path}')\n"
        "d.assign(None, 'c', [], [])\n"
        "assert 'grpc' not in sys.modules and 'google.protobuf' not in sys.modules, sorted(sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
