"""Names every default location netcomp uses, resolved under a root (netplan's --root-dir), so that tests, dry runs
and self-contained trees never touch the real system."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# Intent directories in increasing precedence: a file in a later dir shadows the same file name in an earlier one.
INTENT_DIRS = ("/usr/lib/netcomp/networks.d", "/etc/netcomp/networks.d", "/run/netcomp/networks.d")
CONFIG_FILE = "/etc/netcomp/netcomp.yaml"
OUTPUT_DIR = "/run/netcomp/networks"
STATIC_DIRS = ("/etc/netcomp/static.d", "/etc/cni/net.d")
TEMPLATE_DIR = "/etc/netcomp/templates"
PLUGIN_DIRS = ("/usr/lib/cni", "/opt/cni/bin")
RUNTIME_CONF_DIR = "/etc/cni/net.d"
SOCKET = "/run/netcomp/netcomp.sock"
CACHE_DIR = "/var/lib/netcomp/cache"
# The address claims of a node without a cluster (ipam/localstore.py).
IPAM_DIR = "/var/lib/netcomp/ipam"
# The last good settings and networks (daemon/state.py): a restart with broken inputs runs with them.
STATE_FILE = "/var/lib/netcomp/state.json"
CLUSTER_INTENT_DIR = "/var/lib/netcomp/cluster.d"
KUBECONFIG = "/etc/netcomp/kubeconfig"
# The kubelet's record of the devices its device plugins gave pods, and the device-info spec's files.
POD_RESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
KUBELET_CHECKPOINT = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
DEVICE_INFO_DIR = "/var/run/k8s.cni.cncf.io/devinfo"


@dataclass(frozen=True, slots=True)
class Root:
    """A filesystem root; `Root("/")` is the real system."""

    path: Path = Path("/")

    def __call__(self, p: str | os.PathLike[str]) -> Path:
        """Resolve an absolute or relative path under the root. Relative paths stay relative to the cwd."""
        pp = Path(p)
        if not pp.is_absolute() or self.path == Path("/"):
            return pp
        return self.path / pp.relative_to("/")
