"""The cluster, when the node has one (netcomp.yaml `kubernetes:`): its network objects (netcomp's Networks, and
Multus's and DANM's kinds when asked) are followed into files in clusterIntentDir, the lowest intent layer, which
stay while the API server is away. The node's pods, its Node and its EndpointSlices are followed from here too
(podwatch.py, nodewatch.py, services.py). docs/kubernetes.md, "Network objects"."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import yaml

from netcomp.cluster.nodewatch import NodeWatch
from netcomp.cluster.podwatch import PodWatch
from netcomp.cluster.policywatch import PolicyWatch
from netcomp.cluster.services import ServiceSlices
from netcomp.errors import Diagnostic, HostError
from netcomp.fsutil import atomic_write, read_bounded
from netcomp.intent import nad
from netcomp.intent.source import MAX_BYTES
from netcomp.kube.apierrors import ApiException, one_line
from netcomp.kube.following import Backoff, Follower, Wakeup
from netcomp.metrics import Metrics
from netcomp.records.files import Records
from netcomp.settings import KubeSettings

log = logging.getLogger("netcomp.kube")
WATCH_SECONDS = 60  # a watch is renewed this often (from the last resourceVersion seen)


@dataclass(frozen=True)
class Kind:
    """A kind of cluster object followed into intent files, `<name><suffix>` (a namespaced one's
    `<namespace>.<name><suffix>`) in the cluster dir: each kind's suffix is its own, so files never meet."""

    label: str
    group: str
    version: str
    plural: str
    namespaced: bool
    suffix: str = ".yaml"
    kind: str = "Network"  # the object's kind (events name it)

    def file_name(self, meta: dict[str, Any]) -> str | None:
        """The object's file in the cluster dir, or None when its name cannot be one. A Network's name and a
        namespace have no dots, so no two objects' files meet."""
        name, ns = meta.get("name"), meta.get("namespace")
        if not isinstance(name, str) or not _safe_name(name):
            return None
        if not self.namespaced:
            return f"{name}{self.suffix}" if self.suffix != ".yaml" or "." not in name else None
        ok = isinstance(ns, str) and ns and "." not in ns and _safe_name(ns)
        return f"{ns}.{name}{self.suffix}" if ok else None

    def owns(self, file_name: str) -> bool:
        return file_name.endswith(self.suffix) and not any(
            len(k.suffix) > len(self.suffix) and file_name.endswith(k.suffix) for k in ALL_KINDS
        )

    def render(self, obj: dict[str, Any]) -> bytes:
        """An object as an intent file: all but its status and the metadata the API server keeps (the uid stays:
        it tells an object made again from the old one), under a header saying where it is from (without the
        resourceVersion, so that a change of a label or the status leaves the file as it is)."""
        meta = obj.get("metadata") or {}
        keep: dict[str, Any] = {"name": meta.get("name")}
        if self.namespaced:
            keep["namespace"] = meta.get("namespace")
        if meta.get("uid"):
            keep["uid"] = meta["uid"]
        notes = {k: v for k, v in (meta.get("annotations") or {}).items() if k == nad.RESOURCE_NAME}
        if notes:
            keep["annotations"] = notes  # the device plugin resource its plugins take a device of
        doc = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": keep}
        doc.update({k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata", "status")})
        ref = f"{meta.get('namespace')}/{meta.get('name')}" if self.namespaced else repr(meta.get("name"))
        header = (
            f"# The cluster's {obj.get('kind')} {ref} ({self.plural}.{self.group}, generation "
            f"{meta.get('generation', '?')}),\n# written by netcomp: edit the object, not this file.\n"
        )
        return (header + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)).encode()


NETWORKS = Kind("Network objects", "netcomp.io", "v1", "networks", namespaced=False)
NADS = Kind(
    "NetworkAttachmentDefinitions",
    "k8s.cni.cncf.io",
    "v1",
    "network-attachment-definitions",
    True,
    ".nad.yaml",
    "NetworkAttachmentDefinition",
)


def danm_kinds(group: str) -> list[Kind]:
    """DANM's kinds, in its group (danm.k8s.io, or danm.io since DANM 4.3)."""
    return [
        Kind("DanmNets", group, "v1", "danmnets", True, ".danmnet.yaml", "DanmNet"),
        Kind("TenantNetworks", group, "v1", "tenantnetworks", True, ".tenantnetwork.yaml", "TenantNetwork"),
        Kind("ClusterNetworks", group, "v1", "clusternetworks", False, ".clusternetwork.yaml", "ClusterNetwork"),
        Kind("TenantConfigs", group, "v1", "tenantconfigs", False, ".tenantconfig.yaml", "TenantConfig"),
    ]


ALL_KINDS = [NETWORKS, NADS, *danm_kinds("danm.k8s.io")]  # the suffixes, for owns()
DANM_PLURALS = [k.plural for k in danm_kinds("danm.k8s.io")]


class Cluster:
    def __init__(
        self,
        kube: KubeSettings,
        cluster_dir: Path,
        metrics: Metrics,
        node: str,
        cache: Records | None = None,
        backoff: Callable[[], Backoff] | None = None,
    ) -> None:
        """`cache`: the attachments' records, which EndpointSlices hold (services.py); `backoff` makes each
        follower's Backoff."""
        from netcomp.kube.apiclient import Api, Handle
        from netcomp.kube.kubeconfig import KubeConfigError

        self.kube, self.dir, self.metrics = kube, cluster_dir, metrics
        try:
            api = Api(kube.kubeconfig)
        except KubeConfigError as e:
            raise HostError(f"cannot use kubeconfig {kube.kubeconfig}: {e}") from None
        self.core: Any = api.core()
        self.custom: Any = api.custom()
        backoff = backoff or functools.partial(Backoff, wakeup=Wakeup())  # one Wakeup for the server's followers
        kinds = [NETWORKS] if kube.networks else []
        kinds += [NADS] if kube.networkAttachmentDefinitions else []
        kinds += danm_kinds(kube.danmGroup) if kube.danm else []
        # The IPAM's stores' followers back off on these too, and their status_error is said with the others'.
        self.reporting: list[Callable[[], str | None]] = []
        self.handle = Handle(self.core, self.custom, kube.timeout, backoff, self.reporting, metrics)
        self.followers = [_Follower(self, k, backoff()) for k in kinds]
        self.pods = PodWatch(self.core, kube, node, metrics, one_line, backoff())
        self.node = NodeWatch(self.core, node, one_line, backoff())
        self.policies: PolicyWatch | None = None
        if kube.policies:
            self.policies = PolicyWatch(self.core, self.custom, kube.timeout, metrics, one_line, backoff)
            self.reporting.append(self.policies.status_error)
        self.slices: ServiceSlices | None = None
        if kube.services and cache is not None:
            self.slices = ServiceSlices(self.core, self.custom, kube, node, metrics, self.pods, cache, backoff)
        self._reported: dict[str, str] = {}  # file -> the error an event was recorded for

    def start(self, stop: threading.Event) -> None:
        if self.slices is not None:
            self.slices.start(stop)  # first: it listens to the pods' follower
        self.pods.start(stop)
        self.node.start(stop)
        if self.policies is not None:
            self.policies.start(stop)
        for f in self.followers:
            threading.Thread(target=f.follow, args=(stop,), name=f"kube-{f.kind.plural}", daemon=True).start()

    def wait_synced(self, timeout: float) -> bool:
        """Until every kind followed has been listed once (or timeout)."""
        deadline = time.monotonic() + timeout
        return all(f.synced.wait(max(0.0, deadline - time.monotonic())) for f in self.followers)

    @property
    def synced(self) -> bool:
        return all(f.synced.is_set() for f in self.followers)

    def files(self) -> list[Path]:
        try:
            return sorted(p for p in self.dir.iterdir() if p.suffix == ".yaml" and not p.name.startswith("."))
        except FileNotFoundError:
            return []

    def report_problems(self, diagnostics: list[Diagnostic]) -> None:
        """A Warning event (FailedCompile) on each object whose copy in the cluster dir has errors, once per
        distinct message: `kubectl describe` shows why a node does not serve it."""
        cdir = str(self.dir).rstrip("/") + "/"
        now: dict[str, str] = {}
        for d in diagnostics:
            at = d.location
            if d.is_error and at is not None and at.file and at.file.startswith(cdir) and at.file not in now:
                now[at.file] = f"{Path(at.file).name}:{at.line}:{at.column}: {d.message}"
        for f, message in now.items():
            if self._reported.get(f) == message:
                continue
            involved = self._object_of(Path(f).name)
            if involved is not None:
                self.pods.object_event(involved, "Warning", "FailedCompile", f"node {self.pods.node}: {message}")
        self._reported = now

    def _object_of(self, file_name: str) -> dict[str, Any] | None:
        for f in self.followers:
            if not f.kind.owns(file_name):
                continue
            stem = file_name[: -len(f.kind.suffix)]
            ns, name = stem.split(".", 1) if f.kind.namespaced else ("", stem)
            out = {"apiVersion": f"{f.kind.group}/{f.kind.version}", "kind": f.kind.kind, "name": name,
                   "namespace": ns, "uid": f.uids.get(file_name)}  # fmt: skip
            return {k: v for k, v in out.items() if v}
        return None

    def tenant_network_exists(self, claim: Any) -> bool:
        """Whether the TenantNetwork an id claim names is still there (the same object, when the claim knows its
        uid). True when the API server cannot say: a claim is never freed on a guess."""
        ns, _, name = str(claim.network).partition("/")
        try:
            obj = self.custom.get_namespaced_custom_object(
                self.kube.danmGroup, "v1", ns, "tenantnetworks", name, _request_timeout=self.kube.timeout
            )
        except Exception as e:
            return not (isinstance(e, ApiException) and e.status == 404)
        uid = str((obj.get("metadata") or {}).get("uid") or "")
        return not claim.network_uid or not uid or uid == claim.network_uid

    def status(self) -> dict[str, Any]:
        counts = {f.kind.plural: f.objects for f in self.followers}
        sayers = [f.status_error for f in (*self.followers, self.pods, self.node)] + self.reporting
        errors = [why for say in sayers if (why := say())]
        return {
            "synced": self.synced,
            "networks": counts.get(NETWORKS.plural, 0),
            "attachmentDefinitions": counts.get(NADS.plural, 0),
            **({"danm": {k: counts.get(k, 0) for k in DANM_PLURALS}} if self.kube.danm else {}),
            "pods": self.pods.known() if self.kube.podNetworks else None,
            "podsSynced": self.pods.synced.is_set() if self.kube.podNetworks else None,
            "lastError": errors[0] if errors else None,
            "endpointSlices": self.slices.status() if self.slices is not None else None,
        }


def _safe_name(name: str) -> bool:
    """A Kubernetes object name is a DNS subdomain: no '/', so it is a plain file name; refuse anything else."""
    return bool(name) and "/" not in name and "\0" not in name and not name.startswith(".") and len(name) <= 253


class _Follower(Follower):
    """One kind of object, each written into the cluster dir; the files stay while the API server is away."""

    def __init__(self, cluster: Cluster, kind: Kind, backoff: Backoff) -> None:
        super().__init__(kind.label, cluster.custom, "list_cluster_custom_object", kind.group, kind.version,
                         kind.plural, explain=one_line, backoff=backoff, timeout=max(cluster.kube.timeout, 30),
                         loads=orjson.loads, metrics=cluster.metrics, seconds=WATCH_SECONDS)  # fmt: skip
        self.cluster, self.kind = cluster, kind
        self.objects = 0  # in the cluster dir
        self.uids: dict[str, str] = {}  # file name -> the uid of its object (events name it)

    def api_why(self, e: Any) -> str:
        missing = f" (is the {self.kind.plural}.{self.kind.group} CRD installed?)" if e.status == 404 else ""
        return f"{e.status} {e.reason}{missing}"

    def meanwhile(self) -> str:
        return f" (keeping the {len(self._files())} known)"

    def listed(self, items: list[Any]) -> None:
        names = {name for obj in items if (name := self._write(obj))}
        for path in self._files():
            if path.name not in names:
                self._remove(path.name)
        self.objects = len(names)
        log.info("cluster: %d %s", len(names), self.kind.label)

    def seen(self, kind: str, obj: dict[str, Any]) -> None:
        if kind != "DELETED":
            self._write(obj)
        elif name := self.kind.file_name(obj.get("metadata") or {}):
            self._remove(name)
        self.objects = len(self._files())

    def _files(self) -> list[Path]:
        return [p for p in self.cluster.files() if self.kind.owns(p.name)]

    def _write(self, obj: dict[str, Any]) -> str | None:
        meta = obj.get("metadata") or {}
        name = self.kind.file_name(meta)
        if name is None:
            log.warning("cluster: ignoring %s %r: its name cannot be a network's", self.kind.label, meta.get("name"))
            return None
        data = self.kind.render(obj)
        path = self.cluster.dir / name
        if meta.get("uid"):
            self.uids[name] = str(meta["uid"])
        with contextlib.suppress(FileNotFoundError):
            if read_bounded(path, MAX_BYTES, follow=False) == data:
                return name
        self.cluster.dir.mkdir(parents=True, exist_ok=True, mode=0o755)
        atomic_write(path, data, mode=0o644)
        log.info("cluster: %s (generation %s) written to %s", name, meta.get("generation", "?"), path)
        return name

    def _remove(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.cluster.dir / name)
            log.info("cluster: its object is gone; removed %s", self.cluster.dir / name)
