"""A real Kubernetes node for the tests: the kubelet (built from Debian's kubernetes source, scripts/
kube-test-bins.sh) and Debian's containerd as its CRI, registered with the tests' kube-apiserver (kubeapi.py),
netcomp as the node's CNI: the shim installed by `netcomp install-shim` is all containerd's CNI bin_dir holds
besides loopback (containerd's own pod loopback) and what the side-by-side benchmark runs directly (bridge,
host-local); its conf_dir holds only the conflist the daemon writes (writeRuntimeConfig). The daemon runs as a
process of the node with a netcomp.yaml whose `kubernetes:` points at the API server, `nodeName` the kubelet's.

Everything lives in the node's own network and mount namespaces (nodens.py) and in a lab dir: containerd with
its own config, root, state and socket (never the package's service; `restrict_oom_score_adj`, since this VM
refuses a negative oom_score_adj, and `netns_mounts_under_state_dir`), the kubelet with its own root dir,
cgroupfs and a cgroup parent of its own, oomScoreAdj 0, the resolv.conf of the lab, the admin token. The
API server (on the machine's loopback) is reached from the node's loopback through kubeapi.reachable_from.

Networks (node_networks and _cluster_objects below): `mgmt`, the node's default network, a bridge (static: the
conflist of bridge_conflist) run in the node's netns; `storage`, macvlan on a veth end of the node; the Network
object `pool` (cluster IPAM, AddressClaims); the NetworkAttachmentDefinitions default/fast (a bridge) and
default/vfdirect (host-device, a VF by its PCI address); the DanmNet default/management (macvlan,
cluster-claimed addresses). A device plugin (deviceplugin.py) offers the VFs of a sysfs-shaped tree as
`netcomp.io/testvf`; each VF is a veth end of the node named as the tree says. Pods use the images of
nodeimages.py, imported with `ctr`. Teardown removes every sandbox through the CRI while the daemon
still serves (so each gets its CNI DEL), then stops everything and checks that no process, mount, netns or
cgroup dir is left."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.lab import nodens, noderuntime
from tests.lab.checkout import NETCOMP
from tests.lab.danm import danmnet
from tests.lab.deviceplugin import RESOURCE, DevicePlugin, VfTree, make_vf_tree
from tests.lab.intents import intent
from tests.lab.kubeapi import BINS, NODE_TOKEN, ApiServer, reachable_from
from tests.lab.kubegrpc import Cri
from tests.lab.netlab import PLUGIN_DIR, ip
from tests.lab.noderuntime import NODE_IP, READY_SECONDS, until_node
from tests.lab.sdnotify import wait_ready

MASTER = "ncm0"  # the macvlan master, a veth end in the node's netns
PF, PF_ADDRESS = "ncpf0", "0000:3b:00.0"
VFS = [("0000:3b:02.0", "ncvf0"), ("0000:3b:02.1", "ncvf1"), ("0000:3b:02.2", "ncvf2")]
HOSTDEV_VF = VFS[2][0]  # the VF the NetworkAttachmentDefinition default/vfdirect names by PCI address
# The plugins containerd may exec itself: its pod loopback, and the bridge conflist the benchmark runs directly.
RUNTIME_PLUGINS = ("loopback", "bridge", "host-local")
BRIDGE = "ncbr0"
DEFAULT_SUBNET = "10.120.0.0/24"


def bridge_conflist(ipam_dir: Path, name: str = "lab-bridge") -> dict[str, Any]:
    """The default network's conflist: what netcomp runs as `mgmt`, and what containerd runs itself in the
    benchmark."""
    ipam = {"type": "host-local", "dataDir": str(ipam_dir), "subnet": DEFAULT_SUBNET}
    return {
        "cniVersion": "1.0.0",
        "name": name,
        "plugins": [{"type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipam": ipam}],
    }


@dataclass
class KubeNode:
    name: str
    base: Path
    ns: nodens.NodeNamespaces
    api: ApiServer
    api_port: int  # the API server on the node's loopback
    admin: Any  # a kubernetes ApiClient with the admin token
    vfs: VfTree
    plugin: DevicePlugin | None = None

    # ------------------------------------------------------------------------------------------------ paths

    @property
    def containerd_socket(self) -> Path:
        return self.base / "containerd" / "containerd.sock"

    @property
    def kubelet_root(self) -> Path:
        """The kubelet's root dir (/var/lib/kubelet in the node)."""
        return self.ns.base / "kubelet"

    @property
    def podresources_socket(self) -> Path:
        """The kubelet's PodResources API (/var/lib/kubelet/pod-resources/kubelet.sock in the node)."""
        return self.kubelet_root / "pod-resources" / "kubelet.sock"

    @property
    def device_plugins(self) -> Path:
        """The kubelet's device-plugins dir (/var/lib/kubelet/device-plugins in the node); its checkpoint file is
        kubelet_internal_checkpoint there."""
        return self.kubelet_root / "device-plugins"

    @property
    def devinfo(self) -> Path:
        """The device-info dir (/run/k8s.cni.cncf.io/devinfo in the node)."""
        return self.ns.base / "devinfo"

    @property
    def cni_conf_dir(self) -> Path:
        return self.base / "cni" / "net.d"

    @property
    def cni_bin_dir(self) -> Path:
        return self.base / "cni" / "bin"

    @property
    def netcomp_dir(self) -> Path:
        return self.base / "netcomp"

    @property
    def netcomp_config(self) -> Path:
        return self.netcomp_dir / "netcomp.yaml"

    @property
    def cache_dir(self) -> Path:
        return self.netcomp_dir / "cache"

    @property
    def hostlocal_dir(self) -> Path:
        return self.netcomp_dir / "host-local"

    @property
    def cri(self) -> Cri:
        return Cri(str(self.containerd_socket))

    # ------------------------------------------------------------------------------------------------ state

    def cache_files(self) -> list[str]:
        """netcomp's attachment records."""
        return sorted(p.name for p in self.cache_dir.glob("*.json")) if self.cache_dir.exists() else []

    def leases(self) -> list[str]:
        """host-local's leases, as network/address."""
        d = self.hostlocal_dir
        return sorted(
            str(p.relative_to(d))
            for p in d.rglob("*")
            if p.is_file() and not p.name.startswith(("last_reserved_ip", "lock"))
        )

    def links(self) -> list[str]:
        """Every link of the node's netns."""
        out = ip("-o", "link", "show", netns=self.ns.netns)
        return sorted(line.split(":")[1].strip().split("@")[0] for line in out.splitlines())

    def veths(self) -> list[str]:
        """The veths of the node's netns that are not the lab's own (those are pods')."""
        out = ip("-o", "link", "show", "type", "veth", netns=self.ns.netns)
        names = [line.split(":")[1].strip().split("@")[0] for line in out.splitlines()]
        return sorted(n for n in names if not n.startswith(("ncm0", "ncnode", "ncvf")))

    def netcomp_cli(self, *args: str) -> str:
        """A netcomp command in the node, against its daemon."""
        return self.ns.run(NETCOMP, *args, "--config", str(self.netcomp_config))

    def kubeconfig(self, path: Path, token: str) -> Path:
        """A kubeconfig for a process of the node: the API server on the node's loopback."""
        return self.api.kubeconfig(path, token, server=f"https://127.0.0.1:{self.api_port}")

    def start_netcomp(self) -> None:
        _start_netcomp(self)

    def restart_netcomp(self) -> None:
        """The daemon stopped (SIGTERM) and started again with the same settings and state."""
        self.ns.stop("netcomp")
        _start_netcomp(self)

    def logs(self) -> str:
        return "\n".join(f"--- {n}\n{self.ns.log(n)}" for n in ("netcomp", "containerd", "kubelet"))


def require() -> None:
    """Skip, saying why, where the node cannot run."""
    if os.geteuid() != 0:
        pytest.skip("needs root (namespaces, containerd, the kubelet)")
    missing = [str(BINS / b) for b in ("kubelet", "pause", "kube-apiserver", "etcd") if not (BINS / b).exists()]
    missing += [b for b in ("containerd", "ctr", "runc", "containerd-shim-runc-v2", "nsenter") if not shutil.which(b)]
    missing += [p for p in ("/bin/busybox", f"{PLUGIN_DIR}/bridge") if not Path(p).exists()]
    if missing:
        pytest.skip(f"a node needs {', '.join(missing)} (`make setup kube-bins` as root)")


@contextlib.contextmanager
def kube_node(
    base: Path, api: ApiServer, *, device_plugin: bool = True, settings: dict[str, Any] | None = None
) -> Iterator[KubeNode]:
    """The node, Ready, its device plugin registered (unless `device_plugin` is false); `settings`: more of
    netcomp.yaml's (over the lab's; its `kubernetes` keys over the lab's `kubernetes` keys)."""
    require()
    from kubernetes import config

    token = secrets.token_hex(4)
    base.mkdir(parents=True, exist_ok=True)
    vfs = make_vf_tree(base / "sys", PF, PF_ADDRESS, VFS)
    ns = nodens.create(base / "node", f"nc-node-{token}", f"/nctest-{token}", vfs.pci_devices)
    node: KubeNode | None = None
    failed = True
    try:
        _links(ns.netns)
        with reachable_from(ns.netns, int(api.url.rsplit(":", 1)[1])) as port:
            admin = config.new_client_from_config(config_file=str(api.admin_kubeconfig))
            node = KubeNode(f"nc-node-{token}", base, ns, api, port, admin, vfs)
            _cluster_objects(node)
            _write_netcomp(node, settings or {})
            node.start_netcomp()
            out = node.netcomp_dir / "out"
            until_node(lambda: all((out / f"{n}.conflist").exists() for n in COMPILED), "the networks compiled", node)
            noderuntime.start_containerd(node)
            noderuntime.start_kubelet(node)
            if device_plugin:
                # The VF default/vfdirect names by address is the node's own, not the plugin's to give.
                served = [a for a, _ in VFS if a != HOSTDEV_VF]
                node.plugin = DevicePlugin(node.device_plugins, node.devinfo, vfs, ids=served)
                node.plugin.start()
                noderuntime.wait_allocatable(node, node.plugin.resource)
            try:
                yield node
            finally:
                _drain(node)
        failed = False
    finally:
        if node is not None and node.plugin is not None:
            node.plugin.stop()
        left = nodens.destroy(ns)
        if left and not failed:
            raise AssertionError("the node left: " + "; ".join(left))


def _links(netns: str) -> None:
    """The node's own links: an address for the kubelet (it refuses a loopback node IP), the macvlan master, and
    a veth per VF of the tree, named as the tree says (host-device moves that end into a pod)."""
    pairs = [("ncnode0", "ncnode1"), (MASTER, f"{MASTER}p"), *((vf, f"{vf}p") for _, vf in VFS)]
    for a, b in pairs:
        ip("link", "add", a, "type", "veth", "peer", "name", b, netns=netns)
        ip("link", "set", a, "up", netns=netns)
        ip("link", "set", b, "up", netns=netns)
    ip("addr", "add", f"{NODE_IP}/24", "dev", "ncnode0", netns=netns)


# ------------------------------------------------------------------------------------------------- netcomp


def node_networks(hostlocal: Path) -> dict[str, str]:
    """The node's own intents (file name -> spec): the default network and a macvlan one."""
    return {
        "10-mgmt.yaml": "{type: static, networkID: lab-bridge}",
        "20-storage.yaml": f"{{type: macvlan, hostDevice: {MASTER}, interfacePrefix: stor, ipam: {{type: host-local, "
        f"dataDir: {hostlocal}, subnet: 10.121.0.0/24}}}}",
    }


def _cluster_objects(node: KubeNode) -> None:
    from kubernetes import client

    custom = client.CustomObjectsApi(node.admin)
    hl = str(node.hostlocal_dir)
    pool: dict[str, Any] = {"type": "macvlan", "hostDevice": MASTER}
    pool["ipam"] = {"type": "cluster", "subnet": "10.124.0.0/24"}
    obj = {"apiVersion": "netcomp.io/v1", "kind": "Network", "metadata": {"name": "pool"}, "spec": pool}
    custom.create_cluster_custom_object("netcomp.io", "v1", "networks", obj)
    fast = {
        "cniVersion": "1.0.0",
        "name": "fast",
        "type": "bridge",
        "bridge": "ncfast0",
        "isGateway": True,
        "ipam": {"type": "host-local", "dataDir": hl, "subnet": "10.125.0.0/24"},
    }
    nad = {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": "fast", "namespace": "default"},
        "spec": {"config": json.dumps(fast)},
    }
    custom.create_namespaced_custom_object("k8s.cni.cncf.io", "v1", "default", "network-attachment-definitions", nad)
    # host-device finds a VF's link by its PCI address in /sys/bus/pci/devices/<address>/net (the tree's, bound
    # there in the node), as sriov-cni finds a VF's.
    vfdirect = {
        "cniVersion": "1.0.0",
        "name": "vfdirect",
        "type": "host-device",
        "pciBusID": HOSTDEV_VF,
        "ipam": {"type": "host-local", "dataDir": hl, "subnet": "10.127.0.0/24"},
    }
    nad = {**nad, "metadata": {"name": "vfdirect", "namespace": "default"}, "spec": {"config": json.dumps(vfdirect)}}
    custom.create_namespaced_custom_object("k8s.cni.cncf.io", "v1", "default", "network-attachment-definitions", nad)
    # The device plugin's VFs: netcomp hands the pod's own (the kubelet's PodResources says which) to host-device,
    # the stand-in for sriov-cni, as pciBusID, as Multus does for a definition with this annotation.
    vfnet = {
        "cniVersion": "1.0.0",
        "name": "vfnet",
        "type": "host-device",
        "ipam": {"type": "host-local", "dataDir": hl, "subnet": "10.128.0.0/24"},
    }
    meta = {"name": "vfnet", "namespace": "default", "annotations": {"k8s.v1.cni.cncf.io/resourceName": RESOURCE}}
    nad = {**nad, "metadata": meta, "spec": {"config": json.dumps(vfnet)}}
    custom.create_namespaced_custom_object("k8s.cni.cncf.io", "v1", "default", "network-attachment-definitions", nad)
    management = danmnet("management", "default", "10.126.0.0/24", host_device=MASTER, container_prefix="dm")
    custom.create_namespaced_custom_object("danm.k8s.io", "v1", "default", "danmnets", management)


COMPILED = ("mgmt", "storage", "pool", "default.fast", "default.vfdirect", "default.vfnet", "default.management")


def _write_netcomp(node: KubeNode, extra: dict[str, Any]) -> None:
    """netcomp.yaml, the node's intents, and the shim installed in containerd's CNI bin_dir."""
    d = node.netcomp_dir
    for sub in ("networks.d", "static.d", "out", "cache", "cluster.d", "ipam", "templates"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    (d / "run").mkdir(mode=0o700, exist_ok=True)
    node.hostlocal_dir.mkdir(parents=True, exist_ok=True)
    (d / "static.d" / "lab-bridge.conflist").write_text(json.dumps(bridge_conflist(node.hostlocal_dir)))
    for fname, spec in node_networks(node.hostlocal_dir).items():
        name = fname[3:-5]
        (d / "networks.d" / fname).write_text(intent(name, spec))
    settings = {
        "intentDirs": [str(d / "networks.d")],
        "outputDir": str(d / "out"),
        "staticDirs": [str(d / "static.d")],
        "templateDir": str(d / "templates"),
        "pluginDirs": [PLUGIN_DIR],
        "defaultNetwork": "mgmt",
        "socket": str(d / "run" / "netcomp.sock"),
        "cacheDir": str(node.cache_dir),
        "runtimeConfDir": str(node.cni_conf_dir),
        "writeRuntimeConfig": True,
        "nodeName": node.name,
        "ipamDir": str(d / "ipam"),
        "clusterIntentDir": str(d / "cluster.d"),
        **extra,
        "kubernetes": {
            "kubeconfig": str(node.kubeconfig(d / "kubeconfig", NODE_TOKEN)),
            "networkAttachmentDefinitions": True,
            "danm": True,
            "timeout": 10,
            **extra.get("kubernetes", {}),
        },
    }
    node.netcomp_config.write_text(yaml.safe_dump(settings))
    node.cni_conf_dir.mkdir(parents=True, exist_ok=True)
    node.cni_bin_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [NETCOMP, "install-shim", "--cni-bin-dir", str(node.cni_bin_dir), "--shim-dir", str(node.base / "cni/shim")],
        check=True,
        capture_output=True,
        timeout=120,
    )
    for plugin in RUNTIME_PLUGINS:
        (node.cni_bin_dir / plugin).symlink_to(Path(PLUGIN_DIR) / plugin)


def _start_netcomp(node: KubeNode) -> None:
    """The daemon, as a process of the node; returns once it has said READY=1 (as to systemd)."""
    d = node.netcomp_dir
    notify_path = d / "notify.sock"
    notify_path.unlink(missing_ok=True)
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(notify_path))
    try:
        argv = [NETCOMP, "daemon", "--config", str(node.netcomp_config), "--state", str(d / "state.json")]
        proc = node.ns.start("netcomp", argv, {"NOTIFY_SOCKET": str(notify_path)})
        wait_ready(notify, proc, READY_SECONDS, lambda: node.ns.log("netcomp"))
    finally:
        notify.close()


# ------------------------------------------------------------------------------------------------- teardown


def _drain(node: KubeNode) -> None:
    """The kubelet stopped, then every sandbox stopped and removed through the CRI while netcomp serves (each
    gets its CNI DEL), then the rest stopped."""
    node.ns.stop("kubelet")
    with contextlib.suppress(Exception):
        for sid in node.cri.sandbox_ids():
            node.cri.stop_and_remove(sid)
    node.ns.stop("netcomp")
    node.ns.stop("containerd")
