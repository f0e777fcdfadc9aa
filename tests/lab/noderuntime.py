"""The node's container runtime and kubelet (kubenode.py composes them): containerd with a config of its own
(root, state, socket, CNI dirs, the sandbox image; never the package's service or its defaults) and the kubelet
1.20 with a config made for a node in namespaces of its own. Each start returns once the part is ready: containerd
answering with the images imported, the Node Ready, a device plugin's resource allocatable."""

from __future__ import annotations

import subprocess
from typing import TYPE_CHECKING, Any

import yaml

from tests.lab import nodeimages, nodens
from tests.lab.kubeapi import ADMIN_TOKEN, BINS
from tests.lab.poll import until

if TYPE_CHECKING:
    from tests.lab.kubenode import KubeNode

READY_SECONDS = 120
NODE_IP = "10.255.0.1"  # the kubelet's node IP: an address of a link of the node (it refuses a loopback one)


def until_node(cond: Any, what: str, node: KubeNode, timeout: float = READY_SECONDS) -> None:
    until(cond, lambda: f"not within {timeout}s: {what}\n{node.logs()}", timeout, 0.2)


def containerd_config(node: KubeNode) -> str:
    c = node.base / "containerd"
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{c / "root"}"
state = "{c / "state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]

[grpc]
  address = "{node.containerd_socket}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{c / "opt"}"

[{cri}]
  sandbox_image = "{nodeimages.PAUSE_IMAGE}"
  # Some VMs refuse a negative oom_score_adj (runc then fails every sandbox: "can't get final child's PID from
  # pipe: EOF"); restricted, containerd never asks for less than its own.
  restrict_oom_score_adj = true
  # The pods' network namespaces under the state dir, not /run/netns.
  netns_mounts_under_state_dir = true
  enable_selinux = false
  [{cri}.cni]
    bin_dir = "{node.cni_bin_dir}"
    conf_dir = "{node.cni_conf_dir}"
    max_conf_num = 1
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
"""


def start_containerd(node: KubeNode) -> None:
    c = node.base / "containerd"
    c.mkdir(exist_ok=True)
    (c / "config.toml").write_text(containerd_config(node))
    node.ns.start("containerd", ["containerd", "--config", str(c / "config.toml")])
    ctr = ["ctr", "--address", str(node.containerd_socket), "--namespace", "k8s.io"]

    def up() -> bool:
        return subprocess.run([*ctr, "version"], capture_output=True, timeout=30, check=False).returncode == 0

    until_node(up, "containerd answers", node)
    for archive in nodeimages.build(node.base / "images"):
        subprocess.run([*ctr, "images", "import", str(archive)], check=True, capture_output=True, timeout=120)


# ------------------------------------------------------------------------------------------------- kubelet


def kubelet_config(node: KubeNode) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "cgroupDriver": "cgroupfs",  # no systemd runs these machines
        # The pods' cgroups under one parent of this node's (nodens.py removes it), no QoS tree to set up.
        "cgroupsPerQOS": False,
        "cgroupRoot": node.ns.cgroup,
        "enforceNodeAllocatable": [],
        "failSwapOn": False,
        "makeIPTablesUtilChains": False,  # no kube-proxy, no service traffic here
        "oomScoreAdj": 0,  # not -999: see restrict_oom_score_adj above
        "address": "127.0.0.1",
        "healthzBindAddress": "127.0.0.1",
        "readOnlyPort": 0,
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "resolvConf": str(node.base / "kubelet" / "resolv.conf"),
        # A lab dir on a shared disk: no eviction for disk space, and the images (imported, never pullable) never
        # collected.
        "evictionHard": {"memory.available": "1Mi"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        # The node's status (Ready, a device plugin's resource) reaches the API server within a second.
        "nodeStatusUpdateFrequency": "1s",
        # 1.20's client limits (5 requests a second, bursts of 10) make ten pods starting at once wait for the
        # kubelet's own status writes; these are the defaults of later kubelets (1.27).
        "kubeAPIQPS": 50,
        "kubeAPIBurst": 100,
    }


def start_kubelet(node: KubeNode) -> None:
    k = node.base / "kubelet"
    k.mkdir()
    (k / "resolv.conf").write_text("nameserver 127.0.0.1\n")
    (k / "config.yaml").write_text(yaml.safe_dump(kubelet_config(node)))
    argv = [
        str(BINS / "kubelet"),
        f"--config={k / 'config.yaml'}",
        f"--kubeconfig={node.kubeconfig(k / 'kubeconfig', ADMIN_TOKEN)}",
        f"--root-dir={nodens.KUBELET_ROOT}",  # node.kubelet_root, bound there
        f"--hostname-override={node.name}",
        f"--node-ip={NODE_IP}",
        "--container-runtime=remote",
        f"--container-runtime-endpoint=unix://{node.containerd_socket}",
        "--v=2",
    ]
    node.ns.start("kubelet", argv)
    from kubernetes import client

    core = client.CoreV1Api(node.admin)

    def ready() -> bool:
        try:
            n = core.read_node(node.name)
        except client.ApiException:
            return False
        return any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])

    until_node(ready, f"the Node {node.name} Ready", node)


def wait_allocatable(node: KubeNode, resource: str) -> None:
    from kubernetes import client

    core = client.CoreV1Api(node.admin)
    allocatable = lambda: resource in (core.read_node(node.name).status.allocatable or {})  # noqa: E731
    until_node(allocatable, f"{resource} allocatable", node)
