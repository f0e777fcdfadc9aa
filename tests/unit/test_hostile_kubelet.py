"""What the kubelet's side of a node hands netcomp, written wrong or by someone else: a checkpoint that is not
the kubelet's JSON, device IDs that are paths or carry newlines, a device-info file nested too deep, a checkpoint
that cannot say whether a pod holds a device, and a device-info file a plugin writes itself. Each is a clear
refusal or is treated as the docs say, before any plugin runs; nothing escapes as an internal error.

The node is tests/lab/devicenode.py's (stand-in plugins, the PodResources stand-in of tests/lab)."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

import pytest

from netcomp.cni.invoke import ExecResult
from netcomp.errors import DelegateError
from netcomp.kubelet import devinfo
from netcomp.kubelet.podresources import DEVICE_MANAGER_SOCKET
from tests.lab.devicenode import POD, RES, DeviceNode, req
from tests.lab.hostile import Ignored
from tests.lab.podresources import PodResourcesServer

NESTED = "[" * 40 + "]" * 40  # JSON allows it; no kubelet file nests more than 4 deep


def checkpoint(node: DeviceNode, entries: Any, registered: Any = None) -> None:
    node.checkpoint.write_text(json.dumps({"Data": {"PodDeviceEntries": entries, "RegisteredDevices": registered}}))


def entry(uid: str, ids: Any, resource: str = RES) -> dict[str, Any]:
    return {"PodUID": uid, "ContainerName": "c", "ResourceName": resource, "DeviceIDs": ids, "AllocResp": None}


def kubelet_socket(node: DeviceNode) -> Path:
    """The device manager's socket the kubelet makes beside its checkpoint when it starts (a real one, bound)."""
    path = node.checkpoint.parent / DEVICE_MANAGER_SOCKET
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()
    return path


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ('{"Data": []}', "Data is a list, not an object"),
        ('{"Data": "x"}', "Data is a string, not an object"),
        ('{"Data": ' + NESTED + "}", "nested deeper than 32 levels"),
        ("[]", "the document is a list, not an object"),
        ('{"Data": {"PodDeviceEntries": {"a": 1}}}', "Data.PodDeviceEntries is an object, not a list"),
        ('{"Data": {"PodDeviceEntries": [7]}}', "Data.PodDeviceEntries[0] is a number, not an object"),
        (
            json.dumps({"Data": {"PodDeviceEntries": [entry("u-1", [{"a": 1}])]}}),
            "Data.PodDeviceEntries[0].DeviceIDs[0] is an object, not a string",
        ),
        (
            json.dumps({"Data": {"PodDeviceEntries": [entry("u-1", {"0": "0000:3b:02.0"})]}}),
            "Data.PodDeviceEntries[0].DeviceIDs['0'] is a string, not a list",
        ),
    ],
)
def test_a_checkpoint_that_is_not_the_kubelets_is_a_clear_error(
    device_node: DeviceNode, ignored: Ignored, body: str, said: str
) -> None:
    """PodResources down, and a checkpoint of the wrong shape: code 11 saying what is wrong where, naming the
    network and the resource; ignored as foreign input (counted). A dict among the DeviceIDs never becomes one."""
    device_node.checkpoint.write_text(body)
    with pytest.raises(DelegateError) as ei:
        device_node.d.handle(req("ADD", "a", "vf-a", uid="u-1"))
    e = ei.value
    assert e.code == 11 and e.details == "no plugin was run", e.msg
    assert f"network vf-a takes a device of resource {RES}" in e.msg
    assert f"the kubelet checkpoint {device_node.checkpoint} is not the kubelet's: {said}" in e.msg
    assert device_node.seen == [] and ignored.by == {"checkpoint": 1}
    assert device_node.d.devices.kubelet.registered() == set()  # unknown: nothing registered as far as netcomp knows


def test_a_pool_network_is_served_while_the_checkpoint_is_malformed(device_node: DeviceNode) -> None:
    """The pools' conflict check reads the checkpoint: one that is not the kubelet's names no resource."""
    device_node.checkpoint.write_text('{"Data": "x"}')
    device_node.d.handle(req("ADD", "a", "pool"))
    assert device_node.adds() == [("net0", "0000:99:00.0")]


@pytest.mark.parametrize(
    "bad",
    ["../../etc/passwd", "0000:3b:02.0\n", "{'a': 1}", "x" * 65, "0000:3b:02.9", "vf 1", "", "0000:3b:02.0/x"],
)
def test_a_device_id_that_is_not_one_is_refused_naming_the_resource(
    device_node: DeviceNode, pod_resources: PodResourcesServer, bad: str
) -> None:
    pod_resources.pods[POD] = {"c1": [(RES, ["0000:3b:02.0", bad])], "c2": [("other.io/r", ["../x"])]}
    with pytest.raises(DelegateError) as ei:
        device_node.d.handle(req("ADD", "a", "vf-a"))
    e = ei.value
    assert e.code == 7 and device_node.seen == [] and device_node.d.records.load("a", "eth0") is None
    assert e.msg.startswith(f"pod default/p1: network vf-a takes a device of resource {RES}, and the kubelet ")
    assert repr(bad if len(bad) <= 64 else bad[:64] + "...") in e.msg and "\n" not in e.msg
    assert f"the device plugin that serves {RES}" in e.details


def test_the_checkpoints_device_ids_are_held_to_the_same_form(device_node: DeviceNode) -> None:
    checkpoint(device_node, [entry("u-1", {"0": ["../../etc/passwd"]})])
    with pytest.raises(DelegateError) as ei:
        device_node.d.handle(req("ADD", "a", "vf-a", uid="u-1"))
    assert (
        ei.value.code == 7 and "'../../etc/passwd' is neither a PCI address" in ei.value.msg and device_node.seen == []
    )


def test_a_device_name_of_another_bus_is_taken(device_node: DeviceNode, pod_resources: PodResourcesServer) -> None:
    """An auxiliary device (a Scalable Function) is named by its kernel name, not a PCI address."""
    pod_resources.pods[POD] = {"c1": [(RES, ["mlx5_core.sf.2"])]}
    device_node.d.handle(req("ADD", "a", "default/hd"))
    assert device_node.adds() == [("net0", "mlx5_core.sf.2")] * 2  # host-device and tuning


@pytest.mark.parametrize("written", ["before", "after", "none"])
def test_with_only_the_checkpoint_a_pod_holding_no_device_is_refused_once_it_is_current(
    device_node: DeviceNode, written: str
) -> None:
    """PodResources down. The kubelet writes its checkpoint when it gives a pod devices, before the pod's
    sandbox exists: one written since the kubelet made its device manager socket (it is the running kubelet's)
    and not listing the pod says the pod holds none (code 7, as PodResources would). One written before that
    socket, or with no socket beside it, cannot say: code 11, naming the resource and why."""
    checkpoint(device_node, [entry("u-2", ["0000:3b:09.0"])], {RES: ["0000:3b:09.0"]})
    if written != "none":
        sock = kubelet_socket(device_node)
        ctime = os.stat(sock).st_ctime_ns
        when = ctime + 10**9 if written == "before" else ctime - 10**9  # the socket made before / after the file
        os.utime(device_node.checkpoint, ns=(when, when))
    with pytest.raises(DelegateError) as ei:
        device_node.d.handle(req("ADD", "a", "vf-a", uid="u-1"))
    e = ei.value
    assert device_node.seen == []
    if written == "before":
        assert e.code == 7
        assert (
            e.msg == f"pod default/p1: network vf-a takes a device of resource {RES}, and the kubelet gave the pod none"
        )
        return
    assert e.code == 11 and f"network vf-a takes a device of resource {RES}" in e.msg
    assert f"the checkpoint {device_node.checkpoint} does not know pod uid u-1, and " in e.msg
    if written == "after":
        assert "it was last written before the kubelet made its device manager socket" in e.msg
    else:
        assert f"no kubelet device manager socket {device_node.checkpoint.parent / DEVICE_MANAGER_SOCKET}" in e.msg


def test_a_pod_the_current_checkpoint_lists_gets_its_devices(device_node: DeviceNode) -> None:
    checkpoint(device_node, [entry("u-1", ["0000:3b:02.3"])])
    kubelet_socket(device_node)
    device_node.d.handle(req("ADD", "a", "vf-a", uid="u-1"))
    assert device_node.adds() == [("net0", "0000:3b:02.3")]


def test_a_device_info_file_nested_too_deep_is_treated_as_missing(
    device_node: DeviceNode, pod_resources: PodResourcesServer, ignored: Ignored
) -> None:
    """Deeper than the stdlib's parser can go (it would raise RecursionError), in a file under the size bound."""
    pod_resources.pods[POD] = {"c1": [(RES, ["0000:3b:02.0"])]}
    dp = devinfo.dp_path(str(device_node.info), RES, "0000:3b:02.0")
    dp.parent.mkdir(parents=True)
    dp.write_text("[" * 30000 + "]" * 30000)
    device_node.d.handle(req("ADD", "a", "vf-a"))
    entry_ = device_node.d.records.load("a", "eth0")
    assert entry_ is not None and entry_.attachments[0].device is not None
    assert entry_.attachments[0].device["info"] == {
        "type": "pci",
        "version": "1.1.0",
        "pci": {"pci-address": "0000:3b:02.0"},
    }
    assert ignored.by == {"device-info": 1}


def test_a_device_info_file_a_plugin_writes_itself_is_recorded_first_and_removed_by_del(
    device_node: DeviceNode, pod_resources: PodResourcesServer
) -> None:
    """A device of no device-info file and no PCI address: nothing to copy, and the plugin declaring
    CNIDeviceInfoFile writes its own there (sriov-cni does). The path is in the write-ahead record before the
    plugin runs, so the DEL (or a restart's undo) removes the file."""
    pod_resources.pods[POD] = {"c1": [(RES, ["mlx5_core.sf.2"])]}
    plain = device_node.plugin
    named_first: list[str] = []

    def writing(argv: Any, env: Any, stdin: bytes, timeout: float) -> ExecResult:
        conf = json.loads(stdin) if env["CNI_COMMAND"] == "ADD" else {}
        path = (conf.get("runtimeConfig") or {}).get("CNIDeviceInfoFile")
        if path:
            recorded = device_node.d.records.load("a", "eth0")
            assert recorded is not None and recorded.attachments[0].device is not None
            named_first.append(recorded.attachments[0].device["file"])
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text('{"type": "auxiliary", "version": "1.1.0"}')
        return plain(argv, env, stdin, timeout)

    device_node.plugin = writing  # type: ignore[method-assign]
    device_node.d = device_node.delegator()
    device_node.d.handle(req("ADD", "a", "default/hd"))
    copy = device_node.info / "cni" / "default-hd-a_net0"
    assert named_first == [str(copy)] and copy.exists()
    device_node.d.handle(req("DEL", "a"))
    assert not copy.exists()
