"""Loads netcomp.yaml, the node's settings: every key has a default, and an unknown key is an error with its
position."""

from __future__ import annotations

import socket as _socket
from pathlib import Path
from typing import Annotated, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from netcomp import names, paths
from netcomp.cni.spec import DEFAULT_VERSION
from netcomp.errors import Diagnostic, IntentError, SourceLocation
from netcomp.fsutil import read_bounded
from netcomp.intent.source import load_documents
from netcomp.paths import Root

MAX_SETTINGS_BYTES = 1 << 20  # netcomp.yaml is a few hundred bytes
# The versions a compiled conflist may declare (0.3.0 is read, not written).
CniVersion = Literal["0.3.1", "0.4.0", "1.0.0", "1.1.0"]
DNS_LABEL = f"^{names.DNS_LABEL}$"  # a namespace's name
# What a pod may ask of an attachment besides which network and interface (Multus's network selection element).
PodField = Literal[
    "ips",
    "mac",
    "default-route",
    "cni-args",
    "portMappings",
    "bandwidth",
    "deviceID",
    "infiniband-guid",
    "ipam-claim-reference",
]
POD_FIELDS: tuple[PodField, ...] = get_args(PodField)


class SriovPool(BaseModel):
    """A VF pool: the VFs of these physical functions (optionally only those bound to one of these drivers)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pfNames: list[str] = Field(min_length=1, description="Physical functions whose VFs form the pool")
    drivers: list[str] = Field(default_factory=list, description="Only VFs bound to one of these drivers")


class KubeletSettings(BaseModel):
    """Where the kubelet says which devices its device plugins gave a pod (networks of a device-plugin resource)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    podResourcesSocket: str = Field(
        default=paths.POD_RESOURCES_SOCKET, description="The kubelet's PodResources API (v1) socket"
    )
    checkpoint: str = Field(
        default=paths.KUBELET_CHECKPOINT,
        description="The kubelet device manager's checkpoint file: read when the PodResources API cannot answer",
    )
    timeout: float = Field(default=2.0, gt=0, description="Seconds the PodResources API may take to answer")


class KubeSettings(BaseModel):
    """The cluster as a source of intents and of the networks pods ask for. Absent: a node with no cluster."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kubeconfig: str = Field(
        default=paths.KUBECONFIG, description="Credentials for the API server (kubeconfig file, root-only)"
    )
    networks: bool = Field(default=True, description="Read the cluster's Network objects (netcomp.io/v1) as intents")
    networkAttachmentDefinitions: bool = Field(
        default=False,
        description="Read the cluster's NetworkAttachmentDefinitions (k8s.cni.cncf.io/v1, Multus's) as intents",
    )
    danm: bool = Field(
        default=False,
        description="Read the cluster's DanmNets, TenantNetworks, ClusterNetworks and TenantConfigs (DANM's) as "
        "intents",
    )
    danmGroup: Literal["danm.k8s.io", "danm.io"] = Field(
        default="danm.k8s.io", description="DANM's API group: danm.k8s.io, or danm.io since DANM 4.3"
    )
    podNetworks: bool = Field(
        default=True, description="Add the networks a pod asks for in its k8s.v1.cni.cncf.io/networks annotation"
    )
    hotplug: bool = Field(
        default=True,
        description="Follow edits of a running pod's network annotations: attach what an edit adds, detach what "
        "it removes (as Multus's dynamic networks controller does); needs podNetworks",
    )
    networkStatus: bool = Field(
        default=True, description="Write the pod's k8s.v1.cni.cncf.io/network-status annotation after ADD"
    )
    events: bool = Field(
        default=True,
        description="Record events on pods as Multus does: an AddedInterface naming the interfaces an ADD added, "
        "a warning when an ADD fails",
    )
    policies: bool = Field(
        default=True,
        description="Enforce MultiNetworkPolicies (k8s.cni.cncf.io) on the pods' interfaces with nftables, where the "
        "API server serves them: a selected pod's rules are in force before its ADD answers",
    )
    namespaceIsolation: bool = Field(
        default=False,
        description="A pod may use only the NetworkAttachmentDefinitions of its own namespace and of "
        "globalNamespaces (Multus's option of the same name)",
    )
    globalNamespaces: list[Annotated[str, StringConstraints(pattern=DNS_LABEL, max_length=63)]] = Field(
        default_factory=lambda: ["default"],
        description="With namespaceIsolation: namespaces whose definitions every pod may use",
    )
    multusNamespace: str = Field(
        default="kube-system",
        pattern=DNS_LABEL,
        max_length=63,
        description="Where a pod's v1.multus-cni.io/default-network annotation finds a definition it names "
        "without a namespace (Multus's option of the same name)",
    )
    podFields: list[PodField] = Field(
        default_factory=lambda: list(POD_FIELDS),
        description="The fields of Multus's network selection element a pod may use on this node (name, "
        "namespace and interface always); one left out is refused naming it",
    )
    services: bool = Field(
        default=True,
        description="Write an EndpointSlice per Service on a secondary network (DANM's danm.k8s.io/selector and "
        "network annotations, or netcomp.io/selector and netcomp.io/network) with this node's pods' addresses on it",
    )
    serviceLabelSelector: str = Field(
        default="",
        max_length=1024,
        description="With services: follow only the Services with these labels (a label selector, as kubectl -l "
        "takes it; the API server filters them); empty: every Service of the cluster",
    )
    timeout: float = Field(default=5.0, gt=0, description="Seconds an API call on the ADD path may take")
    ipamGC: bool = Field(
        default=False,
        description="This node frees other nodes' address claims whose node or pod is gone, and removes their "
        "EndpointSlices whose Node or pods are gone (one node of the cluster is enough; `netcomp ipam gc` does it "
        "once anywhere)",
    )


class Settings(BaseModel):
    """Where netcomp reads and writes, and how it compiles. Paths are absolute and resolved under --root."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    intentDirs: list[str] = Field(
        default_factory=lambda: list(paths.INTENT_DIRS),
        description="Intent dirs, lowest precedence first; a file name in a later dir "
        "shadows the same name in an earlier one",
    )
    outputDir: str = Field(default=paths.OUTPUT_DIR, description="Where compiled <network>.conflist files go")
    staticDirs: list[str] = Field(
        default_factory=lambda: list(paths.STATIC_DIRS),
        description="Where static networkIDs are looked up, first match wins",
    )
    templateDir: str = Field(
        default=paths.TEMPLATE_DIR, description="Admin overrides of the backend templates (<type>.json.j2)"
    )
    pluginDirs: list[str] = Field(
        default_factory=lambda: list(paths.PLUGIN_DIRS),
        description="CNI plugin binaries, searched in order by plain name",
    )
    cniVersion: CniVersion = Field(default=DEFAULT_VERSION, description="cniVersion of compiled conflists")
    # Delegation (the daemon)
    defaultNetwork: str | None = Field(
        default=None, description="The network every container joins, on the runtime's CNI_IFNAME"
    )
    socket: str = Field(default=paths.SOCKET, description="The daemon's unix socket (its dir is made 0700)")
    cacheDir: str = Field(default=paths.CACHE_DIR, description="What each ADD used and got, for DEL and CHECK")
    runtimeConfDir: str = Field(default=paths.RUNTIME_CONF_DIR, description="The container runtime's CNI conf dir")
    writeRuntimeConfig: bool = Field(
        default=False, description="Write 00-netcomp.conflist (the shim's config) into runtimeConfDir"
    )
    maxInFlight: int = Field(default=64, ge=1, description="Requests served at once; more wait in the queue")
    maxQueued: int = Field(
        default=1024, ge=0, description="Requests waiting for one of maxInFlight; beyond, CNI code 11 at once"
    )
    queueTimeout: float = Field(
        default=30.0, gt=0, description="Seconds a request may wait in the queue before it gets CNI code 11"
    )
    maxConnections: int = Field(default=1024, ge=1, description="Connections open at once; beyond, refused")
    maxConnectionsPerPeer: int = Field(
        default=64, ge=1, description="Connections one client process may hold open at once; beyond, refused"
    )
    headerTimeout: float = Field(
        default=5.0, gt=0, description="Seconds a client has to send its whole request once connected"
    )
    allowedUids: list[int] = Field(default_factory=lambda: [0], description="Peer uids allowed on the socket")
    pluginTimeout: float = Field(default=60.0, gt=0, description="Seconds a delegate plugin may run")
    compileTimeout: float = Field(
        default=60.0,
        gt=0,
        description="Seconds a compile (a reload, an edit) may run before the daemon reports itself not ready",
    )
    maxRequestBytes: int = Field(default=1024 * 1024, ge=1024, description="Largest request body accepted")
    # SR-IOV
    sriovPools: dict[str, SriovPool] = Field(
        default_factory=dict, description="VF pools by resourceName (what sriov networks ask for)"
    )
    sysfsRoot: str = Field(default="/sys", description="Where sysfs is (VF discovery)")
    kubelet: KubeletSettings = Field(
        default_factory=KubeletSettings,
        description="The kubelet's record of the devices it gave pods: networks whose resourceName is not one of "
        "sriovPools take their device from it",
    )
    deviceInfoDir: str = Field(
        default=paths.DEVICE_INFO_DIR,
        description="The device-info files of the device-info spec: device plugins' in dp/, netcomp's copy per "
        "attachment in cni/",
    )
    # Addresses (ipam: {type: cluster})
    nodeName: str = Field(
        default_factory=lambda: _socket.gethostname().lower(),  # as Kubernetes spells a Node's name
        min_length=1,
        max_length=253,
        pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
        description="This node's name in address claims (default: the hostname); with a cluster, the name of its "
        "Node object",
    )
    ipamDir: str = Field(default=paths.IPAM_DIR, description="Where a node without a cluster keeps its address claims")
    ipamGrace: float = Field(
        default=60.0,
        gt=0,
        description="Seconds an address claim of this node that nothing records is kept before it is freed (a "
        "daemon killed between claiming and recording leaves one)",
    )
    # Kubernetes
    kubernetes: KubeSettings | None = Field(
        default=None, description="The cluster, when the node has one (intents as objects, pod annotations)"
    )
    clusterIntentDir: str = Field(
        default=paths.CLUSTER_INTENT_DIR,
        description="Where the cluster's Network objects are written as intent files: the lowest layer, so a "
        "node's own file of the same name overrides one",
    )

    def intent_layers(self) -> list[str]:
        """The intent dirs, lowest precedence first: the cluster's objects (when read) under the node's own."""
        kube = self.kubernetes
        if kube is not None and (kube.networks or kube.networkAttachmentDefinitions or kube.danm):
            return [self.clusterIntentDir, *self.intentDirs]
        return list(self.intentDirs)

    def rooted(self, root: Root) -> Settings:
        """The same settings with netcomp's own paths resolved under root (a no-op for the real root). The plugin
        dirs are not: plugins are the host's binaries and run against the host's kernel."""
        if root.path == Path("/"):
            return self
        one = ("outputDir", "templateDir", "socket", "cacheDir", "runtimeConfDir", "clusterIntentDir", "ipamDir")
        many = ("intentDirs", "staticDirs")
        update: dict[str, object] = {k: str(root(getattr(self, k))) for k in one}
        update.update({k: [str(root(p)) for p in getattr(self, k)] for k in many})
        if self.kubernetes is not None:
            update["kubernetes"] = self.kubernetes.model_copy(
                update={"kubeconfig": str(root(self.kubernetes.kubeconfig))}
            )
        return self.model_copy(update=update)


def load_settings(path: str | Path | None, root: Root | None = None) -> Settings:
    """Read netcomp.yaml (default location under root when path is None). A missing default file means
    defaults; a missing file named explicitly is an error."""
    p = Path(path) if path is not None else (root or Root())(paths.CONFIG_FILE)
    try:
        raw = read_bounded(p, MAX_SETTINGS_BYTES)
    except FileNotFoundError:
        if path is not None:
            raise IntentError([Diagnostic("config file not found", SourceLocation(str(p)))]) from None
        return Settings()
    except OSError as e:
        raise IntentError([Diagnostic(f"cannot read config file: {e.strerror}", SourceLocation(str(p)))]) from None
    docs = load_documents(str(p), raw)
    if not docs:
        return Settings()
    if len(docs) > 1:
        raise IntentError([docs[1].diagnostic("netcomp.yaml must hold one document", ())])
    try:
        return Settings.model_validate(docs[0].data)
    except ValidationError as e:
        # Imported for errors only: it brings the intent models, which a daemon whose plan comes from the plan
        # cache never needs.
        from netcomp.intent.validation import pydantic_diagnostics

        raise IntentError(pydantic_diagnostics(docs[0], e)) from None
