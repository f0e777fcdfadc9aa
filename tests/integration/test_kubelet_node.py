"""Pods on a real node: the kubelet (built from Debian's kubernetes 1.20 source) and Debian's containerd 1.6 as
its CRI, registered with the tests' kube-apiserver, netcomp's installed shim as the node's only CNI plugin
(kubenode.py; one node for the module). Each pod is posted to the API server as a user posts it, runs because
the kubelet ran it, and is read back three ways that must agree: the network-status netcomp wrote on it, the
pod's own network namespace (its pause process's, found through containerd's CRI), and what the kubelet and
containerd report (the pod IP, the sandbox IP). Each is deleted as kubectl deletes; once the kubelet has stopped
its sandbox (containerd runs the CNI DEL first) nothing of netcomp's is left: no attachment record, no host-local
lease, no AddressClaim, no veth in the node's netns, no netns of the sandbox; the last test waits until the API
server, containerd and the kubelet (its pod dirs, PodResources) have nothing of any pod either.
A plain pod, Multus's annotation, DANM's, a network with cluster IPAM, a pod holding a device of the tests'
device plugin (deviceplugin.py), a VF's link moved into a pod by host-device, ten pods at once."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

import pytest

from tests.lab.addrs import BLOCKS, CLAIMS
from tests.lab.danm import DANM
from tests.lab.kubegrpc import pod_devices
from tests.lab.kubenode import DEFAULT_SUBNET, VFS, KubeNode
from tests.lab.labpods import NETWORKS
from tests.lab.nodepods import (
    delete,
    gone,
    interfaces,
    manifest,
    network_status,
    posted,
    running,
    with_status,
)

pytestmark = pytest.mark.root


def recorded(node: KubeNode, network: str, address: str) -> dict[str, Any]:
    """The cluster's record of an address the node gave: its entry in an AddressBlock of the network, which the
    daemon writes behind its answer, waited for with a watch from the list's version (or an AddressClaim)."""
    from kubernetes import client, watch

    custom = client.CustomObjectsApi(node.admin)
    for c in custom.list_cluster_custom_object(*CLAIMS)["items"]:
        if (c["spec"]["network"], c["spec"]["address"]) == (network, address):
            return dict(c["spec"])
    listed = custom.list_cluster_custom_object(*BLOCKS)

    def entry(block: dict[str, Any]) -> dict[str, Any] | None:
        spec = block["spec"]
        used = spec.get("used") or {}
        if spec["network"] != network or address not in used:
            return None
        return {"network": network, "address": address, "node": spec["node"], **used[address]}

    for b in listed["items"]:
        if (got := entry(b)) is not None:
            return got
    w = watch.Watch()
    rv = listed["metadata"]["resourceVersion"]
    for event in w.stream(custom.list_cluster_custom_object, *BLOCKS, resource_version=rv, timeout_seconds=60):
        if (got := entry(event["object"])) is not None:
            w.stop()
            return got
    raise AssertionError(f"no record of {address} on network {network} within 60 s")


def attached(node: KubeNode, pod: Any, expected: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """The pod's network-status is `expected` ((network, interface) each, in order), its namespace has exactly
    those interfaces with the addresses and MACs the status says, and the kubelet's pod IP is the default
    network's. The status entries."""
    pod = with_status(node, pod)
    status = network_status(pod)
    assert [(s["name"], s["interface"]) for s in status] == expected, status
    seen = interfaces(node, pod)
    assert sorted(seen) == sorted(i for _, i in expected), seen
    for s in status:
        assert seen[s["interface"]] == {"mac": s["mac"], "ips": s["ips"]}, (s, seen)
    (default,) = [s for s in status if s.get("default")]
    assert pod.status.pod_ip == default["ips"][0]
    return status


def nothing_in_use(node: KubeNode) -> bool:
    """No address in use in the cluster's record (AddressClaims, the blocks' entries), which the daemon brings to
    what its records say behind its answers: waited for with a watch from the list's version."""
    from kubernetes import client, watch

    custom = client.CustomObjectsApi(node.admin)
    if custom.list_cluster_custom_object(*CLAIMS)["items"]:
        return False
    listed = custom.list_cluster_custom_object(*BLOCKS)
    busy = {b["metadata"]["name"] for b in listed["items"] if b["spec"].get("used")}
    if not busy:
        return True
    w = watch.Watch()
    rv = listed["metadata"]["resourceVersion"]
    for event in w.stream(custom.list_cluster_custom_object, *BLOCKS, resource_version=rv, timeout_seconds=60):
        name = event["object"]["metadata"]["name"]
        if event["type"] == "DELETED" or not event["object"]["spec"].get("used"):
            busy.discard(name)
        else:
            busy.add(name)
        if not busy:
            w.stop()
            return True
    return False


def nothing_left(node: KubeNode) -> None:
    """Nothing of any pod's: and the VFs' links are the node's again."""
    assert node.cache_files() == []
    assert node.leases() == []
    assert nothing_in_use(node)
    assert node.veths() == []
    assert {vf for _, vf in VFS} <= set(node.links())
    assert json.loads(node.netcomp_cli("attachments", "-o", "json"))["containers"] == []
    copies = node.devinfo / "cni"
    assert not copies.exists() or list(copies.iterdir()) == []  # every device-info copy removed by its DEL


def record(node: KubeNode, pod: Any) -> dict[str, Any]:
    """netcomp's record of the pod's sandbox (`netcomp attachments`), which is the sandbox containerd runs."""
    (sandbox,) = node.cri.sandboxes(pod.metadata.uid)
    doc = json.loads(node.netcomp_cli("attachments", "-o", "json"))
    (entry,) = [c for c in doc["containers"] if c["containerID"] == sandbox.id]
    assert entry["netns"] == sandbox.netns
    return dict(entry)


PLUGIN_RESOURCE = "netcomp.io/testvf"
# The single-pod scenarios, posted at once: their starts overlap, and so do their deletes (the kubelet removes a
# deleted pod from the API server at its next status sync, up to 10 s later).
SCENARIOS: dict[str, dict[str, Any]] = {
    "plain": {},
    "multus": {"annotations": {NETWORKS: "storage@st9, fast"}},
    "danm": {"annotations": {DANM: json.dumps([{"network": "management", "ip": "dynamic"}])}},
    "pooled": {"annotations": {NETWORKS: "pool"}},
    "vf": {"limits": {PLUGIN_RESOURCE: "1"}},
    "hostdev": {"annotations": {NETWORKS: "vfdirect@vf0"}},
    "sriov": {"limits": {PLUGIN_RESOURCE: "1"}, "annotations": {NETWORKS: "vfnet"}},
}


@pytest.fixture(scope="module")
def pods(kubenode: KubeNode) -> dict[str, Any]:
    """The scenarios' pods, Running (test_the_pods_are_deleted_with_nothing_left deletes them; the node's
    teardown removes whatever a failure leaves)."""
    return running(kubenode, *(manifest(kubenode, name, **kw) for name, kw in SCENARIOS.items()))


def test_the_node_runs_netcomp_as_its_only_cni(kubenode: KubeNode) -> None:
    """containerd's CNI dirs: the conflist netcomp's daemon wrote, and the shim beside the runtime's own plugins."""
    assert [p.name for p in kubenode.cni_conf_dir.iterdir()] == ["00-netcomp.conflist"]
    conf = json.loads((kubenode.cni_conf_dir / "00-netcomp.conflist").read_text())
    assert [p["type"] for p in conf["plugins"]] == ["netcomp"]
    assert sorted(p.name for p in kubenode.cni_bin_dir.iterdir()) == ["bridge", "host-local", "loopback", "netcomp"]


def test_a_plain_pod_joins_the_default_network(kubenode: KubeNode, pods: dict[str, Any]) -> None:
    pod = pods["plain"]
    status = attached(kubenode, pod, [("mgmt", "eth0")])
    address = status[0]["ips"][0]
    assert ipaddress.ip_address(address) in ipaddress.ip_network(DEFAULT_SUBNET)
    (sandbox,) = kubenode.cri.sandboxes(pod.metadata.uid)
    assert sandbox.ready and sandbox.ip == address  # containerd's view: the result of netcomp's ADD
    assert f"mgmt/{address}" in kubenode.leases()
    assert [(n["name"], n["interface"], n["ips"]) for n in record(kubenode, pod)["networks"]] == [
        ("mgmt", "eth0", [address])
    ]


def test_a_pod_with_multus_annotation(kubenode: KubeNode, pods: dict[str, Any]) -> None:
    """Names, a network of the node and a NetworkAttachmentDefinition of the pod's namespace."""
    pod = pods["multus"]
    status = attached(kubenode, pod, [("mgmt", "eth0"), ("storage", "st9"), ("default/fast", "net2")])
    assert status[1]["ips"][0].startswith("10.121.0.") and status[2]["ips"][0].startswith("10.125.0.")
    leases = [f"storage/{status[1]['ips'][0]}", f"default.fast/{status[2]['ips'][0]}"]
    assert set(leases) <= set(kubenode.leases())
    assert [n["interface"] for n in record(kubenode, pod)["networks"]] == ["eth0", "st9", "net2"]


def test_a_pod_with_danm_annotation(kubenode: KubeNode, pods: dict[str, Any]) -> None:
    """DANM's first connection takes the default network's place, on the runtime's interface; its dynamic
    address is claimed for the cluster."""
    pod = pods["danm"]
    status = attached(kubenode, pod, [("default/management", "eth0")])
    address = status[0]["ips"][0]
    assert address.startswith("10.126.0.")
    assert recorded(kubenode, "default.management", address)["node"] == kubenode.name


def test_a_pod_on_a_cluster_ipam_network(kubenode: KubeNode, pods: dict[str, Any]) -> None:
    pod = pods["pooled"]
    status = attached(kubenode, pod, [("mgmt", "eth0"), ("pool", "net1")])
    spec = recorded(kubenode, "pool", status[1]["ips"][0])
    assert spec["node"] == kubenode.name
    assert spec["pod"] == {"name": "pooled", "namespace": "default", "uid": pod.metadata.uid}


def test_a_pod_holding_a_device_of_the_device_plugin(kubenode: KubeNode, pods: dict[str, Any]) -> None:
    """Admitted by the kubelet with a device of the plugin's resource, which the kubelet's PodResources API
    names, and whose device-info file the plugin wrote at Allocate."""
    plugin = kubenode.plugin
    assert plugin is not None and plugin.resource == PLUGIN_RESOURCE
    (device,) = pod_devices(str(kubenode.podresources_socket))[("default", "vf")]["c"][plugin.resource]
    assert device in plugin.device_ids and [device] in plugin.allocations
    info = json.loads(plugin.devinfo_file(device).read_text())
    pci = {"pci-address": device, "pf-pci-address": kubenode.vfs.pf_address}
    assert info == {"type": "pci", "version": "1.1.0", "pci": pci}
    attached(kubenode, pods["vf"], [("mgmt", "eth0")])


def test_a_vf_moved_into_a_pod_by_host_device(kubenode: KubeNode, pods: dict[str, Any]) -> None:
    """host-device, the stand-in for sriov-cni, finds the VF's link by its PCI address in the node's sysfs (the
    lab's tree, bound there) and moves it into the pod under the name the pod asks for."""
    status = attached(kubenode, pods["hostdev"], [("mgmt", "eth0"), ("default/vfdirect", "vf0")])
    assert status[1]["ips"][0].startswith("10.127.0.")
    assert "ncvf2" not in kubenode.links()


def test_an_sriov_pod_gets_the_vf_the_kubelet_gave_it(kubenode: KubeNode, pods: dict[str, Any]) -> None:
    """The SR-IOV way: the pod asks for a VF in its resources and for the network in its annotation; netcomp
    takes the device the kubelet gave it (PodResources), hands it to the definition's plugin (host-device, the
    stand-in for sriov-cni, by pciBusID) which moves exactly that VF's link into the pod, copies the device
    plugin's device-info beside it and reports it in network-status."""
    pod = pods["sriov"]
    plugin = kubenode.plugin
    assert plugin is not None
    (device,) = pod_devices(str(kubenode.podresources_socket))[("default", "sriov")]["c"][PLUGIN_RESOURCE]
    link = dict(VFS)[device]
    status = attached(kubenode, pod, [("mgmt", "eth0"), ("default/vfnet", "net1")])
    assert status[1]["ips"][0].startswith("10.128.0.")
    assert link not in kubenode.links()  # moved into the pod
    info = json.loads(plugin.devinfo_file(device).read_text())
    assert status[1]["device-info"] == info
    (sandbox,) = kubenode.cri.sandboxes(pod.metadata.uid)
    copy = kubenode.devinfo / "cni" / f"default-vfnet-{sandbox.id}_net1"
    assert json.loads(copy.read_text()) == info
    (net,) = [n for n in record(kubenode, pod)["networks"] if n["interface"] == "net1"]
    assert net["device"] == {"resource": PLUGIN_RESOURCE, "id": device}


def test_the_kubelets_checkpoint_alone_says_what_podresources_says(kubenode: KubeNode, pods: dict[str, Any]) -> None:
    """With PodResources as if down, the real kubelet's checkpoint is read: it was written since the kubelet made
    its device manager socket (its device plugin registered, and it gave pods devices at admission), so it is
    current, and it gives each pod what PodResources gives, a pod holding no device none (not "try later")."""
    from netcomp.kubelet.podresources import DEVICE_MANAGER_SOCKET, Kubelet

    ckpt = kubenode.device_plugins / "kubelet_internal_checkpoint"
    assert (kubenode.device_plugins / DEVICE_MANAGER_SOCKET).is_socket()
    alone = Kubelet(str(kubenode.base / "no-podresources.sock"), str(ckpt), 1)
    live = pod_devices(str(kubenode.podresources_socket))
    for name, pod in pods.items():
        got = alone.pod_devices("default", name, pod.metadata.uid)
        want: dict[str, set[str]] = {}
        for held in live.get(("default", name), {}).values():
            for r, ids in held.items():
                want.setdefault(r, set()).update(ids)
        assert (got.source, dict(got.devices), dict(got.bad)) == (
            "checkpoint",
            {r: tuple(sorted(i)) for r, i in want.items()},
            {},
        )
    assert any(dict(alone.pod_devices("default", n, p.metadata.uid).devices) for n, p in pods.items())


def test_the_pods_are_deleted_with_nothing_left(kubenode: KubeNode, pods: dict[str, Any]) -> None:
    """All at once: the kubelet stops each sandbox, and containerd's CNI DEL through the shim removes everything
    netcomp made for it."""
    assert len([s for p in pods.values() for s in kubenode.cri.sandboxes(p.metadata.uid) if s.ready]) == len(pods)
    delete(kubenode, pods.values())
    nothing_left(kubenode)
    assert not any(s.ready for p in pods.values() for s in kubenode.cri.sandboxes(p.metadata.uid))


def test_ten_pods_at_once(kubenode: KubeNode) -> None:
    names = [f"many-{i}" for i in range(10)]
    with posted(kubenode, *(manifest(kubenode, n, annotations={NETWORKS: "storage"}) for n in names)) as pods:
        addresses = []
        for n in names:
            status = attached(kubenode, pods[n], [("mgmt", "eth0"), ("storage", "net1")])
            addresses += [s["ips"][0] for s in status]
        assert len(set(addresses)) == 20
        assert len(kubenode.leases()) == 20 and len(kubenode.cache_files()) == 10 and len(kubenode.veths()) == 10
    nothing_left(kubenode)


def test_the_kubelet_removes_every_deleted_pod(kubenode: KubeNode, pods: dict[str, Any]) -> None:
    """The API server, containerd and the kubelet have nothing left of any pod of the module (the kubelet's
    container GC, once a minute, may be what removes the last of them); no CNI request meanwhile left anything
    behind either."""
    from kubernetes import client

    left = client.CoreV1Api(kubenode.admin).list_namespaced_pod("default").items
    delete(kubenode, [p for p in left if p.metadata.deletion_timestamp is None])  # what a failed test left
    gone(kubenode, [*pods.values(), *left])
    assert kubenode.cri.sandbox_ids() == []
    assert pod_devices(str(kubenode.podresources_socket)) == {}
    nothing_left(kubenode)
