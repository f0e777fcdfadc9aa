"""The cluster, when the node has one (netcomp.yaml `kubernetes:`). The only importer of `kubernetes`, which is
loaded when the daemon starts with a cluster configured (its import alone costs about 0.4 s).

- **Network objects as intents.** The cluster's `networks.netcomp.io` objects are listed and watched, and each
  is written as `<name>.yaml` in clusterIntentDir (atomically, only when its spec changed; removed with the
  object). That dir is the lowest intent layer, so the files are compiled, validated with positions and
  watched like any other intent, and a node's own file of the same name overrides the cluster's. When the API
  server is away the files stay: the node keeps serving the networks it knew.
- **Pods.** On ADD, a pod named in CNI_ARGS (kubelet's K8S_POD_NAMESPACE / K8S_POD_NAME) is read for its
  `k8s.v1.cni.cncf.io/networks` annotation; after ADD its `k8s.v1.cni.cncf.io/network-status` annotation is
  written (best-effort, after the answer)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

import yaml

from netcomp.config import KubeSettings
from netcomp.daemon.metrics import Metrics
from netcomp.delegate.select import NETWORK_STATUS, POD_NETWORKS, PodRef
from netcomp.errors import HostError
from netcomp.fsutil import atomic_write

log = logging.getLogger("netcomp.kube")
GROUP, VERSION, PLURAL = "netcomp.io", "v1", "networks"
WATCH_SECONDS = 60  # a watch is renewed this often (from the last resourceVersion seen)
MAX_BACKOFF = 30.0


class Cluster:
    def __init__(self, kube: KubeSettings, cluster_dir: Path, metrics: Metrics) -> None:
        from kubernetes import client, config  # lazily: see the module docstring

        self.kube = kube
        self.dir = cluster_dir
        self.metrics = metrics
        try:
            self.api_client = config.new_client_from_config(config_file=kube.kubeconfig)
        except (OSError, config.ConfigException, ValueError, TypeError, KeyError) as e:
            raise HostError(f"cannot use kubeconfig {kube.kubeconfig}: {e}") from None
        self.core: Any = client.CoreV1Api(self.api_client)
        self.custom: Any = client.CustomObjectsApi(self.api_client)
        self.synced = threading.Event()  # the first list of Network objects is on disk
        self.last_error: str | None = None
        self.objects = 0

    # ------------------------------------------------------------------------------------- Network objects

    def run(self, stop: threading.Event) -> None:
        """List and watch Network objects until stop is set; on any error, back off and list again."""
        from kubernetes.client.exceptions import ApiException

        rv: str | None = None
        backoff = 1.0
        while not stop.is_set():
            try:
                if rv is None:
                    rv = self._relist()
                    backoff = 1.0
                rv = self._watch(rv, stop)
            except ApiException as e:
                rv = None
                if e.status == 410:  # our resourceVersion is too old for a watch: list again, at once
                    continue
                self._failed("watch Network objects", f"{e.status} {e.reason}")
                stop.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)
            except Exception as e:  # the API server away (connection refused, timeouts, TLS): try again later
                rv = None
                self._failed("watch Network objects", f"{type(e).__name__}: {e}")
                stop.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)

    def _relist(self) -> str:
        doc: dict[str, Any] = self.custom.list_cluster_custom_object(
            GROUP, VERSION, PLURAL, _request_timeout=max(self.kube.timeout, 30)
        )
        names = set()
        for obj in doc.get("items") or []:
            name = self._write(obj)
            if name:
                names.add(name)
        for path in self._files():
            if path.stem not in names:
                self._remove(path.stem)
        self.objects = len(names)
        self.last_error = None
        self.synced.set()
        log.info("cluster: %d Network objects", len(names))
        return str(doc.get("metadata", {}).get("resourceVersion") or "")

    def _watch(self, rv: str, stop: threading.Event) -> str:
        from kubernetes import watch

        w = watch.Watch()
        try:
            for event in w.stream(
                self.custom.list_cluster_custom_object,
                GROUP,
                VERSION,
                PLURAL,
                resource_version=rv,
                timeout_seconds=WATCH_SECONDS,
                _request_timeout=WATCH_SECONDS + 10,
            ):
                if stop.is_set():
                    break
                obj: dict[str, Any] = event.get("object") or {}
                rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                kind = event.get("type")
                if kind in ("ADDED", "MODIFIED"):
                    self._write(obj)
                elif kind == "DELETED":
                    name = (obj.get("metadata") or {}).get("name")
                    if isinstance(name, str) and _safe_name(name):
                        self._remove(name)
                self.objects = len(self._files())
        finally:
            w.stop()
        return rv

    def _files(self) -> list[Path]:
        try:
            return sorted(p for p in self.dir.iterdir() if p.suffix == ".yaml" and not p.name.startswith("."))
        except FileNotFoundError:
            return []

    def _write(self, obj: dict[str, Any]) -> str | None:
        meta = obj.get("metadata") or {}
        name = meta.get("name")
        if not isinstance(name, str) or not _safe_name(name):
            log.warning("cluster: ignoring a Network object without a usable name: %r", name)
            return None
        data = render(obj)
        path = self.dir / f"{name}.yaml"
        with contextlib.suppress(FileNotFoundError):
            if path.read_bytes() == data:
                return name
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o755)
        atomic_write(path, data, mode=0o644)
        log.info("cluster: Network %s (generation %s) written to %s", name, meta.get("generation", "?"), path)
        return name

    def _remove(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.dir / f"{name}.yaml")
            log.info("cluster: Network %s is gone; removed %s", name, self.dir / f"{name}.yaml")

    def _failed(self, what: str, why: str) -> None:
        self.metrics.kube_errors.labels(what.split()[0]).inc()
        if why != self.last_error:  # one line per distinct failure, not one per retry
            log.error("cluster: cannot %s: %s (keeping the %d networks known)", what, why, len(self._files()))
        self.last_error = why

    def status(self) -> dict[str, Any]:
        return {"synced": self.synced.is_set(), "networks": self.objects, "lastError": self.last_error}

    # ------------------------------------------------------------------------------------------------ pods

    def networks_annotation(self, pod: PodRef) -> str | None:
        if not self.kube.podNetworks:
            return None
        from kubernetes.client.exceptions import ApiException

        try:
            # Raw JSON: the client's model classes would cost milliseconds per pod on the ADD path.
            resp: Any = self.core.read_namespaced_pod(
                pod.name, pod.namespace, _request_timeout=self.kube.timeout, _preload_content=False
            )
            status = int(getattr(resp, "status", 200))
            if not 200 <= status < 300:
                raise ApiException(status=status, reason=str(getattr(resp, "reason", "")))
            doc = json.loads(resp.data)
        except ApiException as e:
            if e.status == 404:
                log.warning("pod %s is not known to the API server: only the networks asked for otherwise", pod)
                return None
            self.metrics.kube_errors.labels("read").inc()
            raise HostError(f"{e.status} {e.reason}") from None
        except Exception as e:
            self.metrics.kube_errors.labels("read").inc()
            raise HostError(f"{type(e).__name__}: {e}") from None
        value = ((doc.get("metadata") or {}).get("annotations") or {}).get(POD_NETWORKS)
        return value if isinstance(value, str) else None

    def report(self, pod: PodRef, status: list[dict[str, Any]]) -> None:
        if not self.kube.networkStatus:
            return
        body = {"metadata": {"annotations": {NETWORK_STATUS: json.dumps(status, indent=2)}}}
        try:
            self.core.patch_namespaced_pod(pod.name, pod.namespace, body, _request_timeout=self.kube.timeout)
        except Exception as e:  # best-effort: the pod is attached; only its annotation is missing
            self.metrics.kube_errors.labels("patch").inc()
            log.warning("cannot write %s of pod %s: %s", NETWORK_STATUS, pod, getattr(e, "reason", None) or e)


def render(obj: dict[str, Any]) -> bytes:
    """A Network object as an intent file: only what the compiler reads, and a header saying where it is from
    (no resourceVersion: the file changes when the spec does, not when a label or the status does)."""
    meta = obj.get("metadata") or {}
    doc = {
        "apiVersion": obj.get("apiVersion", f"{GROUP}/{VERSION}"),
        "kind": obj.get("kind", "Network"),
        "metadata": {"name": meta.get("name")},
        "spec": obj.get("spec"),
    }
    header = (
        f"# The cluster's Network {meta.get('name')!r} ({PLURAL}.{GROUP}, generation {meta.get('generation', '?')}),\n"
        "# written by netcomp: edit the object (kubectl edit networks.netcomp.io), not this file.\n"
    )
    return (header + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)).encode()


def _safe_name(name: str) -> bool:
    """A Kubernetes object name is a DNS subdomain: no '/', so it is a plain file name; refuse anything else."""
    return bool(name) and "/" not in name and "\0" not in name and not name.startswith(".") and len(name) <= 253
