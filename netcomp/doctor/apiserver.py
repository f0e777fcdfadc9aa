"""The cluster as the daemon meets it: the API server reached with the kubeconfig netcomp.yaml names, every
verb of the packaged ClusterRole that these settings need granted to that identity (asked with
SelfSubjectAccessReview, as `kubectl auth can-i` asks), and this node's Node object. The calls are the
client's, answered as raw JSON (`_preload_content=False`), as the daemon's own are."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from netcomp.doctor.checks import Check, fail, ok, skip
from netcomp.fsutil import read_bounded
from netcomp.settings import KubeSettings, Settings

# Where the packaged ClusterRole is: the Debian package's copy, else the source tree's (a checkout).
RBAC_FILES = (
    Path("/usr/share/netcomp/kubernetes/rbac.yaml"),
    Path(__file__).resolve().parents[2] / "packaging" / "kubernetes" / "rbac.yaml",
)
DANM_GROUPS = ("danm.k8s.io", "danm.io")
MAX_MANIFEST_BYTES = 1 << 20  # the packaged one is a few KiB
# The objects netcomp reads only with a setting on (rbac.yaml's comments say the same); every other rule of the
# ClusterRole is needed always.
NEEDED_WITH: dict[tuple[str, str], Callable[[KubeSettings], bool]] = {
    ("netcomp.io", "networks"): lambda k: k.networks,
    ("k8s.cni.cncf.io", "network-attachment-definitions"): lambda k: k.networkAttachmentDefinitions,
    ("", "services"): lambda k: k.services,
    ("discovery.k8s.io", "endpointslices"): lambda k: k.services,
}
Verb = tuple[str, str, str]  # (API group, resource, verb)


def cluster(settings: Settings, rbac_file: str | None) -> list[Check]:
    kube = settings.kubernetes
    if kube is None:
        return [skip("apiserver", "no cluster (netcomp.yaml has no kubernetes:)")]
    try:
        api = _client(kube)
    except Exception as e:  # the kubernetes client's config errors have no common base
        return [fail("apiserver", f"cannot use kubeconfig {kube.kubeconfig}: {_why(e)}", "fix kubernetes.kubeconfig")]
    from kubernetes import client

    timeout = max(kube.timeout, 5.0)
    try:
        resp: Any = client.VersionApi(api).get_code(_request_timeout=timeout, _preload_content=False)
        version = json.loads(resp.data).get("gitVersion", "?")
    except Exception as e:
        why = _why(e)
        return [
            fail("apiserver", f"{api.configuration.host} does not answer: {why}", _reach_fix(why, kube)),
            skip("rbac", "the API server does not answer"),
            skip("node", "the API server does not answer"),
        ]
    out = [ok("apiserver", f"{api.configuration.host} answers (Kubernetes {version}), kubeconfig {kube.kubeconfig}")]
    out.append(_rbac(api, kube, rbac_file, timeout))
    out.append(_node(api, settings.nodeName, timeout))
    return out


def _client(kube: KubeSettings) -> Any:
    from kubernetes import client, config

    cfg = client.Configuration()
    config.load_kube_config(config_file=kube.kubeconfig, client_configuration=cfg)  # type: ignore[no-untyped-call]
    cfg.retries = 0  # one try: a check says what happened, it does not wait out retries
    return client.ApiClient(cfg)


def _why(e: Exception) -> str:
    status = getattr(e, "status", None)
    if status is not None and getattr(e, "reason", None) is not None:
        return f"{status} {e.reason}"  # type: ignore[attr-defined]
    reason = getattr(e, "reason", None)  # urllib3's MaxRetryError: the connection's own error
    return f"{type(reason or e).__name__}: {reason or e}"[:300]


def _reach_fix(why: str, kube: KubeSettings) -> str:
    if "401" in why:
        return f"the credentials in {kube.kubeconfig} are refused: give it a valid token or certificate"
    return f"check the server address in {kube.kubeconfig} and that this node reaches it"


def needed(rules: list[dict[str, Any]], kube: KubeSettings) -> list[Verb]:
    """The (group, resource, verb) of the ClusterRole's rules these settings need, in the manifest's order."""
    out: list[Verb] = []
    for rule in rules:
        for group in rule.get("apiGroups") or [""]:
            if group in DANM_GROUPS and not (kube.danm and group == kube.danmGroup):
                continue
            for resource in rule.get("resources") or []:
                when = NEEDED_WITH.get((group, resource))
                if when is not None and not when(kube):
                    continue
                out += [(group, resource, verb) for verb in rule.get("verbs") or []]
    return out


def cluster_role(path: Path) -> list[dict[str, Any]]:
    """The rules of the ClusterRole in a manifest (the first of its documents of that kind)."""
    for doc in yaml.safe_load_all(read_bounded(path, MAX_MANIFEST_BYTES)):
        if isinstance(doc, dict) and doc.get("kind") == "ClusterRole":
            return list(doc.get("rules") or [])
    raise ValueError(f"{path} holds no ClusterRole")


def _rbac_file(given: str | None) -> Path | None:
    if given:
        return Path(given)
    return next((p for p in RBAC_FILES if p.is_file()), None)


def _rbac(api: Any, kube: KubeSettings, given: str | None, timeout: float) -> Check:
    path = _rbac_file(given)
    if path is None:
        return skip("rbac", f"no ClusterRole manifest to check against ({', '.join(map(str, RBAC_FILES))}; --rbac)")
    try:
        verbs = needed(cluster_role(path), kube)
    except (OSError, ValueError, yaml.YAMLError) as e:
        return fail("rbac", f"cannot read the ClusterRole in {path}: {e}", "give its manifest with --rbac FILE")
    from kubernetes import client

    auth = client.AuthorizationV1Api(api)
    denied = []
    try:
        for group, resource, verb in verbs:
            body = {"spec": {"resourceAttributes": {"group": group, "resource": resource, "verb": verb}}}
            resp: Any = auth.create_self_subject_access_review(
                body,  # type: ignore[arg-type]  # raw JSON, as the daemon's calls send
                _request_timeout=timeout,
                _preload_content=False,
            )
            if not (json.loads(resp.data).get("status") or {}).get("allowed"):
                denied.append(f"{verb} {resource}" + (f".{group}" if group else ""))
    except Exception as e:
        return fail("rbac", f"cannot ask the API server: {_why(e)}", "see the apiserver check")
    if denied:
        return fail(
            "rbac",
            f"not granted to the identity in {kube.kubeconfig}: {', '.join(denied)} ({len(denied)} of {len(verbs)})",
            f"apply the ClusterRole in {path} and bind it to that identity (docs/kubernetes.md)",
        )
    return ok("rbac", f"the {len(verbs)} verbs these settings need of the ClusterRole in {path} are granted")


def _node(api: Any, node: str, timeout: float) -> Check:
    from kubernetes import client

    try:
        client.CoreV1Api(api).read_node(node, _request_timeout=timeout, _preload_content=False)
    except Exception as e:
        if getattr(e, "status", None) == 404:
            return fail(
                "node",
                f"no Node named {node!r} (nodeName)",
                "set nodeName in netcomp.yaml to this node's name in the cluster (`kubectl get nodes`); the "
                "kubelet registers it when it starts",
            )
        return fail("node", f"cannot read Node {node!r}: {_why(e)}", "see the rbac check")
    return ok("node", f"Node {node!r} exists")
