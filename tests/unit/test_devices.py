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
from pathlib import Path
from typing import Any

import pytest

from netcomp.errors import DelegateError
from netcomp.kubelet import devinfo
from netcomp.pods.naming import PodRef
from netcomp.pods.netstatus import network_status
from tests.lab.devicenode import POD, RES, DeviceNode, req
from tests.lab.podresources import MSGS, PodResourcesServer, podresources
from tests.lab.standins import OWN_NETNS


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


def test_two_networks_of_one_resource_each_get_their_own_device_in_order(
    device_node: DeviceNode, pod_resources: PodResourcesServer
) -> None:
    """The kubelet lists devices per NUMA node and as a set: they are merged, sorted and handed out in the
    order the networks come; the same pod's devices go the same way after a restart of the daemon."""
    pod_resources.pods[POD] = {"c1": [(RES, ["0000:3b:02.1"])], "c2": [(RES, ["0000:3b:02.0", "0000:3b:02.1"])]}
    device_node.d.handle(req("ADD", "a", "vf-a,vf-b"))
    assert device_node.adds() == [("net0", "0000:3b:02.0"), ("net1", "0000:3b:02.1")]
    entry = device_node.d.records.load("a", "eth0")
    assert entry is not None
    assert [(a.network, a.device and a.device["id"]) for a in entry.attachments] == [
        ("vf-a", "0000:3b:02.0"),
        ("vf-b", "0000:3b:02.1"),
    ]
    device_node.d.close()
    device_node.d = device_node.delegator()  # a daemon started again: DEL uses what the record says
    device_node.seen.clear()
    device_node.d.handle(req("DEL", "a"))
    assert sorted((s["ifname"], s["conf"]["deviceID"]) for s in device_node.seen) == [
        ("net0", "0000:3b:02.0"),
        ("net1", "0000:3b:02.1"),
    ]
    device_node.seen.clear()
    device_node.d.handle(req("ADD", "a2", "vf-a,vf-b"))  # the pod's sandbox made again
    assert device_node.adds() == [("net0", "0000:3b:02.0"), ("net1", "0000:3b:02.1")]


def test_more_networks_than_devices_says_the_numbers_and_runs_nothing(
    device_node: DeviceNode, pod_resources: PodResourcesServer
) -> None:
    pod_resources.pods[POD] = {"c1": [(RES, ["0000:3b:02.0"])]}
    with pytest.raises(DelegateError) as ei:
        device_node.d.handle(req("ADD", "a", "vf-a,vf-b"))
    assert ei.value.code == 7
    assert (
        f"pod default/p1: 2 networks (vf-a, vf-b) take a device of resource {RES}, and the kubelet gave the pod 1"
        in (ei.value.msg)
    )
    assert device_node.seen == [] and device_node.d.records.load("a", "eth0") is None


def test_a_pod_without_the_resource_is_refused_naming_pod_network_and_resource(
    device_node: DeviceNode, pod_resources: PodResourcesServer
) -> None:
    pod_resources.pods[POD] = {"c1": [("other.io/thing", ["x"])]}
    with pytest.raises(DelegateError) as ei:
        device_node.d.handle(req("ADD", "a", "vf-a"))
    e = ei.value
    assert (
        e.code == 7
        and e.msg == f"pod default/p1: network vf-a takes a device of resource {RES}, and the kubelet gave the pod none"
    )
    assert f"resources: {{limits: {{{RES}: 1}}}}" in e.details and device_node.seen == []


def test_a_request_without_a_pod_is_refused(device_node: DeviceNode) -> None:
    with pytest.raises(DelegateError) as ei:
        device_node.d.handle(req("ADD", "a", "vf-a", pod=None))
    assert ei.value.code == 7 and "the request names no pod (K8S_POD_NAMESPACE and K8S_POD_NAME" in ei.value.msg


@pytest.mark.parametrize("layout", ["numa-map", "list"])
def test_no_socket_the_checkpoint_is_read_by_pod_uid(device_node: DeviceNode, layout: str) -> None:
    """Kubelets since 1.20 keep DeviceIDs per NUMA node; older ones as a list: both are read."""
    ids: Any = (
        {"0": ["0000:3b:02.1"], "1": ["0000:3b:02.0"]} if layout == "numa-map" else ["0000:3b:02.1", "0000:3b:02.0"]
    )
    entries = [
        {"PodUID": "u-1", "ContainerName": "c", "ResourceName": RES, "DeviceIDs": ids, "AllocResp": ""},
        {"PodUID": "u-2", "ContainerName": "c", "ResourceName": RES, "DeviceIDs": ["0000:3b:09.0"], "AllocResp": ""},
    ]
    device_node.checkpoint.write_text(
        json.dumps({"Data": {"PodDeviceEntries": entries, "RegisteredDevices": {}}, "Checksum": 1})
    )
    device_node.d.handle(req("ADD", "a", "vf-a,vf-b", uid="u-1"))
    assert device_node.adds() == [("net0", "0000:3b:02.0"), ("net1", "0000:3b:02.1")]


def test_an_api_that_never_answers_and_no_checkpoint_is_code_11_in_bounded_time(device_node: DeviceNode) -> None:
    device_node.d = device_node.delegator(timeout=0.3)
    with podresources(device_node.sock, PodResourcesServer(hang=True)) as api:
        api.pods[POD] = {"c1": [(RES, ["0000:3b:02.0"])]}
        with pytest.raises(DelegateError) as ei:
            device_node.d.handle(req("ADD", "a", "vf-a", uid="u-1"))
    e = ei.value
    assert e.code == 11 and e.details == "no plugin was run"
    assert "did not answer in 0.3 s" in e.msg and "no kubelet checkpoint" in e.msg
    assert device_node.seen == [] and device_node.d.records.load("a", "eth0") is None


def test_an_api_that_never_answers_falls_back_to_the_checkpoint(device_node: DeviceNode) -> None:
    device_node.d = device_node.delegator(timeout=0.3)
    entries = [{"PodUID": "u-1", "ContainerName": "c", "ResourceName": RES, "DeviceIDs": {"0": ["0000:3b:02.7"]}}]
    device_node.checkpoint.write_text(json.dumps({"Data": {"PodDeviceEntries": entries}}))
    with podresources(device_node.sock, PodResourcesServer(hang=True)):
        device_node.d.handle(req("ADD", "a", "vf-a", uid="u-1"))
    assert device_node.adds() == [("net0", "0000:3b:02.7")]


def test_a_definition_gets_the_device_in_every_plugin_and_as_capabilities(
    device_node: DeviceNode, pod_resources: PodResourcesServer
) -> None:
    """As Multus hands a device to a NetworkAttachmentDefinition's conflist: deviceID and pciBusID (host-device
    reads it) in every plugin, runtimeConfig deviceID and CNIDeviceInfoFile for the plugins declaring them."""
    pod_resources.pods[POD] = {"c1": [(RES, ["0000:3b:02.0"])]}
    dp = devinfo.dp_path(str(device_node.info), RES, "0000:3b:02.0")
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
    device_node.d.handle(req("ADD", "a", "default/hd"))
    first, second = (s["conf"] for s in device_node.seen)
    copy = str(device_node.info / "cni" / "default-hd-a_net0")
    assert first["deviceID"] == first["pciBusID"] == "0000:3b:02.0" == second["deviceID"] == second["pciBusID"]
    assert first["runtimeConfig"] == {"deviceID": "0000:3b:02.0", "CNIDeviceInfoFile": copy}
    assert "runtimeConfig" not in second  # tuning declares neither capability
    assert json.loads(Path(copy).read_text())["pci"]["pf-pci-address"] == "0000:3b:00.0"
    assert stat.S_IMODE(os.stat(copy).st_mode) == 0o444
    entry = device_node.d.records.load("a", "eth0")
    assert entry is not None
    status = network_status(entry.attachments, "eth0")
    assert status[0]["device-info"] == {
        "type": "pci",
        "version": "1.1.0",
        "pci": {"pci-address": "0000:3b:02.0", "pf-pci-address": "0000:3b:00.0"},
    }

    shown = device_node.d.attachments()["containers"][0]["networks"][0]
    assert shown["device"] == {"resource": RES, "id": "0000:3b:02.0"} and shown["device-info"]["type"] == "pci"
    device_node.d.handle(req("DEL", "a"))
    assert not os.path.exists(copy)


def test_no_device_plugin_file_gives_the_minimal_pci_record(
    device_node: DeviceNode, pod_resources: PodResourcesServer
) -> None:
    pod_resources.pods[POD] = {"c1": [(RES, ["0000:3b:02.0"])]}
    device_node.d.handle(req("ADD", "a", "vf-a"))
    entry = device_node.d.records.load("a", "eth0")
    assert entry is not None and entry.attachments[0].device is not None
    assert entry.attachments[0].device["info"] == {
        "type": "pci",
        "version": "1.1.0",
        "pci": {"pci-address": "0000:3b:02.0"},
    }
    assert Path(entry.attachments[0].device["file"]).exists()


def test_hotplug_takes_a_device_the_pod_holds_and_no_attachment_uses(
    device_node: DeviceNode, pod_resources: PodResourcesServer
) -> None:
    pod_resources.pods[POD] = {"c1": [(RES, ["0000:3b:02.0", "0000:3b:02.1"])]}
    device_node.d.handle(req("ADD", "a", "vf-a"))
    pod = PodRef(*POD)
    device_node.d.hotplug("ADD", "a", OWN_NETNS, "vf-b", None, "eth0", pod)
    assert device_node.adds() == [("net0", "0000:3b:02.0"), ("net1", "0000:3b:02.1")]
    with pytest.raises(DelegateError) as ei:
        device_node.d.hotplug("ADD", "a", OWN_NETNS, "default/hd", None, "eth0", pod)
    assert ei.value.code == 7
    assert (
        "take a device of resource netcomp.io/vf, and the kubelet gave the pod 2, 2 of them used by its other networks"
        in ei.value.msg
    )
    with pytest.raises(DelegateError) as ei:
        device_node.d.hotplug("ADD", "a", OWN_NETNS, "default/hd", None, "eth0")
    assert "the request names no pod" in ei.value.msg
    device_node.d.hotplug("DEL", "a", "", "vf-b", None, "eth0")
    device_node.d.hotplug("ADD", "a", OWN_NETNS, "default/hd", None, "eth0", pod)
    assert device_node.adds()[-1] == ("net1", "0000:3b:02.1")  # given back by the detach


def test_a_pod_may_choose_one_of_its_devices(device_node: DeviceNode, pod_resources: PodResourcesServer) -> None:
    pod_resources.pods[POD] = {"c1": [(RES, ["0000:3b:02.0", "0000:3b:02.1"])]}
    device_node.pods.notes[POD] = {
        "k8s.v1.cni.cncf.io/networks": json.dumps([{"name": "vf-a", "deviceID": "0000:3b:02.1"}, {"name": "vf-b"}])
    }
    device_node.d.handle(req("ADD", "a"))
    assert device_node.adds() == [("net1", "0000:3b:02.1"), ("net2", "0000:3b:02.0")]  # Multus's names: by position
    device_node.pods.notes[POD] = {
        "k8s.v1.cni.cncf.io/networks": json.dumps([{"name": "vf-a", "deviceID": "0000:3b:09.7"}])
    }
    with pytest.raises(DelegateError) as ei:
        device_node.d.handle(req("ADD", "b"))
    assert "deviceID 0000:3b:09.7 is not a device of resource netcomp.io/vf the kubelet gave the pod" in ei.value.msg


def test_a_resource_that_is_a_pool_and_a_kubelet_resource_names_both(device_node: DeviceNode) -> None:
    device_node.checkpoint.write_text(
        json.dumps({"Data": {"PodDeviceEntries": [], "RegisteredDevices": {"x.io/p": ["a"]}}})
    )
    with pytest.raises(DelegateError) as ei:
        device_node.d.handle(req("ADD", "a", "pool"))
    e = ei.value
    assert e.code == 7 and e.network == "pool"
    assert "resource x.io/p is both a VF pool of netcomp.yaml (sriovPools) and a device plugin's resource" in e.msg
    device_node.checkpoint.unlink()
    device_node.d.handle(req("ADD", "a", "pool"))  # a node without that device plugin: the pool's
    assert device_node.adds() == [("net0", "0000:99:00.0")]


def test_a_device_plugins_add_never_reads_the_kubelets_checkpoint(
    device_node: DeviceNode, pod_resources: PodResourcesServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checkpoint (up to 16 MiB of JSON) is read for the pools' conflict check only when a network's
    resource is also a pool of netcomp.yaml: a device plugin's network, answered by PodResources, never."""

    def read(*_: object) -> set[str]:
        raise AssertionError("the checkpoint was read on a device plugin's ADD")

    monkeypatch.setattr(device_node.d.devices.kubelet, "registered", read)
    pod_resources.pods[POD] = {"c1": [(RES, ["0000:3b:02.0"])]}
    device_node.d.handle(req("ADD", "a", "vf-a"))
    assert device_node.adds() == [("net0", "0000:3b:02.0")]


def test_start_up_sweeps_copies_no_record_names(device_node: DeviceNode, pod_resources: PodResourcesServer) -> None:
    pod_resources.pods[POD] = {"c1": [(RES, ["0000:3b:02.0"])]}
    device_node.d.handle(req("ADD", "a", "vf-a"))
    cni = device_node.info / "cni"
    kept = {p.name for p in cni.iterdir()}
    (cni / "vf-a-gone_net0").write_text("{}")  # a DEL that could not remove it
    (cni / "vf-a-a_net7").write_text("{}")  # of a container with a record: not guessed about
    (cni / "othercni-x_net1").write_text("{}")  # another CNI's network
    (cni / ".vf-a-b_net0.netcomp-tmp").write_text("{")  # a copy's write a SIGKILL cut short

    device_node.d.recover()
    assert {p.name for p in cni.iterdir()} == kept | {"vf-a-a_net7", "othercni-x_net1"}


def test_start_up_sweeps_nothing_while_a_record_cannot_be_read(
    device_node: DeviceNode, pod_resources: PodResourcesServer
) -> None:
    """A record that cannot be read (a disk fault, a hand edit) may be the one that names a copy: none is
    removed at start-up then (said in the log), so the copy is there still when the record is restored."""
    pod_resources.pods[POD] = {"c1": [(RES, ["0000:3b:02.0"])]}
    device_node.d.handle(req("ADD", "a", "vf-a"))
    cni = device_node.info / "cni"
    kept = {p.name for p in cni.iterdir()}
    assert kept
    record = device_node.d.records.path("a", "eth0")
    good = record.read_bytes()
    record.write_bytes(b"{not json")

    device_node.d.recover()
    assert {p.name for p in cni.iterdir()} == kept and record.read_bytes() == b"{not json"
    record.write_bytes(good)
    device_node.d.recover()
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
