"""A device plugin's devices taken by the real host-device plugin, in real network namespaces: the daemon asks the
kubelet which devices the pod holds, hands them to the pod's networks in order, and the plugin moves exactly
those links into the container; device-info copies are written beside them and removed by DEL, also when the
daemon is killed mid-ADD.

No SR-IOV hardware and no PCI devices here: each "VF" is a veth end in the lab's host netns, and the daemon (with
the plugins it runs) sees a PCI tree of the test's in its own mount namespace, bound over /sys/bus/pci/devices,
where `<address>/net/<link>` names the link host-device moves, as sysfs does for a real VF. The kubelet's
PodResources API is a stand-in (tests/lab/podresources.py) serving the pod's devices: the real kubelet
gives them in tests/integration/test_kubelet_node.py."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

import pytest

from netcomp.kubelet.podresources import DEVICE_MANAGER_SOCKET
from tests.lab.intents import intent
from tests.lab.netlab import Lab, ip
from tests.lab.podresources import PodResourcesServer, podresources
from tests.lab.procdaemon import ProcNode, proc_node

pytestmark = pytest.mark.root
RES = "netcomp.io/testvf"
VFS = {"0000:3b:02.0": "vf0", "0000:3b:02.1": "vf1", "0000:3b:02.2": "vf2"}
POD_ARGS = "K8S_POD_NAMESPACE=default;K8S_POD_NAME=p1;K8S_POD_UID=u-1"


def pci_tree(base: Path) -> Path:
    """<tree>/<address>/net/<link> and a driver link, as /sys/bus/pci/devices has them for a VF."""
    tree = base / "pci" / "devices"
    driver = base / "pci" / "drivers" / "iavf"
    driver.mkdir(parents=True)
    for addr, link in VFS.items():
        (tree / addr / "net" / link).mkdir(parents=True)
        os.symlink(driver, tree / addr / "driver")
    return tree


def setup(base: Path, lb: Lab) -> None:
    for link in VFS.values():
        ip("link", "add", link, "type", "veth", "peer", "name", f"{link}p", netns=lb.host)
    (base / "static.d" / "hd.conflist").write_text(
        json.dumps({"cniVersion": "1.0.0", "name": "hd", "plugins": [{"type": "host-device"}]})
    )
    for name in ("vf-a", "vf-b"):
        spec = f"{{type: static, networkID: hd, resourceName: {RES}}}"
        (base / "networks.d" / f"80-{name}.yaml").write_text(intent(name, spec))
    dp = base / "devinfo" / "dp"
    dp.mkdir(parents=True)
    for addr in VFS:
        info = {"type": "pci", "version": "1.1.0", "pci": {"pci-address": addr, "pf-pci-address": "0000:3b:00.0"}}
        (dp / f"netcomp.io-testvf-{addr}-device.json").write_text(json.dumps(info))


def node(base: Path) -> Any:
    tree = pci_tree(base)
    settings = {
        "defaultNetwork": None,
        "kubelet": {"podResourcesSocket": str(base / "pod-resources.sock"), "checkpoint": str(base / "ckpt"),
                    "timeout": 2},
        "deviceInfoDir": str(base / "devinfo"),
    }  # fmt: skip
    bind = ["/bin/sh", "-c", 'mount --bind "$0" /sys/bus/pci/devices && exec "$@"', str(tree)]
    return proc_node(base, extra=settings, setup=setup, inner=bind)


def mac(netns: str, dev: str) -> str:
    return ip("-o", "link", "show", "dev", dev, netns=netns).split("link/ether ")[1].split()[0]


def host_links(n: ProcNode) -> set[str]:
    return {x for x in n.lab.links(n.lab.host) if x in VFS.values()}


def copies(base: Path) -> list[str]:
    d = base / "devinfo" / "cni"
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


@pytest.fixture
def kubelet(tmp_path: Path) -> Any:
    """The kubelet's PodResources API (a stand-in): pod default/p1 holds 02.1 in its container c, 02.0 in d."""
    state = PodResourcesServer()
    state.pods[("default", "p1")] = {"c": [(RES, ["0000:3b:02.1"])], "d": [(RES, ["0000:3b:02.0"])]}
    with podresources(str(tmp_path / "pod-resources.sock"), state):
        yield state


def test_each_network_gets_the_pods_own_device_and_del_gives_it_back(
    tmp_path: Path, kubelet: PodResourcesServer
) -> None:
    with node(tmp_path) as n:
        macs = {link: mac(n.lab.host, link) for link in VFS.values()}
        ctr = n.lab.container()
        code, out = n.shim("ADD", ctr, args=f"{POD_ARGS};NETCOMP_NETWORKS=vf-a,vf-b", ifname="net0")
        assert code == 0, out
        # Sorted device IDs in the networks' order: vf-a the pod's 02.0 (vf0), vf-b its 02.1 (vf1); vf2 untouched.
        assert (mac(ctr, "net0"), mac(ctr, "net1")) == (macs["vf0"], macs["vf1"])
        assert host_links(n) == {"vf2"}
        assert copies(tmp_path) == ["vf-a-ctr-" + ctr + "_net0", "vf-b-ctr-" + ctr + "_net1"]
        info = json.loads((tmp_path / "devinfo" / "cni" / f"vf-b-ctr-{ctr}_net1").read_text())
        assert info["pci"] == {"pci-address": "0000:3b:02.1", "pf-pci-address": "0000:3b:00.0"}
        n.restart()  # the record, not a new answer of the kubelet, says what DEL gives back
        kubelet.pods.clear()
        code, out = n.shim("DEL", ctr, ifname="net0")
        assert code == 0, out
        assert host_links(n) == set(VFS.values()) and copies(tmp_path) == [] and n.cache_files() == []


def test_refusals_run_no_plugin(tmp_path: Path, kubelet: PodResourcesServer) -> None:
    """A pod that holds one device asks for two networks of its resource; a pod that holds none; a request
    naming no pod: each refused before anything runs, the links where they were."""
    with node(tmp_path) as n:
        kubelet.pods[("default", "p1")] = {"c": [(RES, ["0000:3b:02.0"])]}
        ctr = n.lab.container()
        code, out = n.shim("ADD", ctr, args=f"{POD_ARGS};NETCOMP_NETWORKS=vf-a,vf-b", ifname="net0")
        assert code == 1 and out["code"] == 7
        assert (
            "2 networks (vf-a, vf-b) take a device of resource netcomp.io/testvf, and the kubelet gave the pod 1"
            in (out["msg"])
        )
        kubelet.pods[("default", "p1")] = {"c": []}
        code, out = n.shim("ADD", ctr, args=f"{POD_ARGS};NETCOMP_NETWORKS=vf-a", ifname="net0")
        assert code == 1 and out["msg"] == (
            "pod default/p1: network vf-a takes a device of resource netcomp.io/testvf, and the kubelet gave the "
            "pod none"
        )
        code, out = n.shim("ADD", ctr, args="NETCOMP_NETWORKS=vf-a", ifname="net0")
        assert code == 1 and "the request names no pod" in out["msg"]
        assert host_links(n) == set(VFS.values()) and copies(tmp_path) == [] and n.cache_files() == []


def test_a_device_id_that_is_not_one_is_refused(tmp_path: Path, kubelet: PodResourcesServer) -> None:
    """The kubelet passes on what the device plugin said: a path among the pod's IDs refuses the resource (code
    7, named), before any plugin runs."""
    with node(tmp_path) as n:
        kubelet.pods[("default", "p1")] = {"c": [(RES, ["0000:3b:02.0", "../../../etc/passwd"])]}
        ctr = n.lab.container()
        code, out = n.shim("ADD", ctr, args=f"{POD_ARGS};NETCOMP_NETWORKS=vf-a", ifname="net0")
        assert code == 1 and out["code"] == 7, out
        assert out["msg"].startswith(f"pod default/p1: network vf-a takes a device of resource {RES}, and the ")
        assert "'../../../etc/passwd' is neither a PCI address" in out["msg"]
        assert host_links(n) == set(VFS.values()) and copies(tmp_path) == [] and n.cache_files() == []


def test_podresources_down_the_kubelets_current_checkpoint_answers(tmp_path: Path) -> None:
    """No PodResources socket; the checkpoint written since the kubelet made its device manager socket beside
    it: the pod it lists gets its VF, a pod it does not list holds none (code 7, not "try again")."""
    with node(tmp_path) as n:
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(str(tmp_path / DEVICE_MANAGER_SOCKET))
        entry = {"PodUID": "u-1", "ContainerName": "c", "ResourceName": RES, "DeviceIDs": {"0": ["0000:3b:02.2"]}}
        ckpt = tmp_path / "ckpt"
        ckpt.write_text(json.dumps({"Data": {"PodDeviceEntries": [entry], "RegisteredDevices": {RES: list(VFS)}}}))
        after = os.stat(tmp_path / DEVICE_MANAGER_SOCKET).st_ctime_ns + 10**9
        os.utime(ckpt, ns=(after, after))
        ctr = n.lab.container()
        code, out = n.shim("ADD", ctr, args=f"{POD_ARGS};NETCOMP_NETWORKS=vf-a", ifname="net0")
        assert code == 0, out
        assert host_links(n) == {"vf0", "vf1"}
        other = n.lab.container()
        args = "K8S_POD_NAMESPACE=default;K8S_POD_NAME=p2;K8S_POD_UID=u-2;NETCOMP_NETWORKS=vf-a"
        code, out = n.shim("ADD", other, args=args, ifname="net0")
        assert (
            code == 1
            and out["code"] == 7
            and out["msg"]
            == (f"pod default/p2: network vf-a takes a device of resource {RES}, and the kubelet gave the pod none")
        )
        code, out = n.shim("DEL", ctr, ifname="net0")
        assert code == 0, out
        assert host_links(n) == set(VFS.values()) and n.cache_files() == []


def test_killed_before_the_outcome_is_recorded_the_restart_undoes_it(
    tmp_path: Path, kubelet: PodResourcesServer
) -> None:
    """SIGKILL with both devices in the container and half of the record that says so written: the runtime was
    never told, so the daemon that starts again undoes both attachments (the links back on the host) and removes
    their device-info copies; the runtime's retried ADD then succeeds."""
    with node(tmp_path) as n:
        ctr = n.lab.container()
        n.restart(NETCOMP_CRASH_AT="mid-outcome")
        args = f"{POD_ARGS};NETCOMP_NETWORKS=vf-a,vf-b"
        code, out = n.shim("ADD", ctr, args=args, ifname="net0", ready_timeout=2)
        assert code == 1 and out["code"] == 11  # the daemon died mid-request: try again
        assert len(copies(tmp_path)) == 2 and len(n.cache_files()) == 1 and host_links(n) == {"vf2"}
        n.start()
        assert copies(tmp_path) == [] and n.cache_files() == [] and host_links(n) == set(VFS.values())
        code, out = n.shim("ADD", ctr, args=args, ifname="net0")
        assert code == 0, out
        assert copies(tmp_path) == [f"vf-a-ctr-{ctr}_net0", f"vf-b-ctr-{ctr}_net1"]
        assert n.shim("DEL", ctr, ifname="net0")[0] == 0
        assert host_links(n) == set(VFS.values()) and copies(tmp_path) == []


def test_killed_after_the_write_ahead_the_undo_of_what_never_ran_completes(
    tmp_path: Path, kubelet: PodResourcesServer
) -> None:
    """SIGKILL once the record and the device-info copies are written, before any plugin ran. host-device's DEL of
    an interface it never moved fails ("failed to find net0"): the undo still completes, as nothing of those
    attachments is in the namespace, and the copies go; the runtime's retried ADD then succeeds."""
    with node(tmp_path) as n:
        ctr = n.lab.container()
        n.restart(NETCOMP_CRASH_AT="after-write-ahead")
        args = f"{POD_ARGS};NETCOMP_NETWORKS=vf-a,vf-b"
        code, out = n.shim("ADD", ctr, args=args, ifname="net0", ready_timeout=2)
        assert code == 1 and out["code"] == 11
        assert len(copies(tmp_path)) == 2 and len(n.cache_files()) == 1 and host_links(n) == set(VFS.values())
        n.start()
        assert copies(tmp_path) == [] and n.cache_files() == [] and host_links(n) == set(VFS.values())
        assert "failed to find" in n.logs() and "forgotten" in n.logs()
        code, out = n.shim("ADD", ctr, args=args, ifname="net0")
        assert code == 0, out
        assert n.shim("DEL", ctr, ifname="net0")[0] == 0
        assert host_links(n) == set(VFS.values()) and copies(tmp_path) == [] and n.cache_files() == []
