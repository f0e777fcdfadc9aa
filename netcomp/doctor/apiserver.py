"""Checks the cluster as the daemon meets it: the API server reached with netcomp.yaml's kubeconfig, every verb of
the packaged ClusterRole these settings need granted (SelfSubjectAccessReview, as `kubectl auth can-i` asks), and
this node's Node. It calls through the daemon's own client and says failures in the daemon's words."""

from __future__ import annotations

import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from netcomp.doctor.checks import Check, fail, ok, skip
from netcomp.fsutil import read_bounded
from netcomp.kube.apiclient import Api
from netcomp.kube.apierrors import ApiException, one_line
from netcomp.kube.kubeconfig import KubeConfigError
from netcomp.settings import KubeSettings, Settings

# Where the packaged ClusterRole is: the Debian package's copy, else the source tree's (a checkout).
RBAC_FILES = (
    Path("/usr/share/netcomp/kubernetes/rbac.yaml"),
    Path(__file__).resolve().parents[2] / "packaging" / "kubernetes" / "rbac.yaml",
)
DANM_GROUPS = ("danm.k8s.io", "danm.io")
MAX_MANIFEST_BYTES = 1 << 20  # the packaged one is a few KiB
# The objects netcomp reads only with a setting on (as rbac.yaml's comments say); every other rule is always needed.
NEEDED_WITH: dict[tuple[str, str], Callable[[KubeSettings], bool]] = {
    ("netcomp.io", "networks"): lambda k: k.networks,
    ("k8s.cni.cncf.io", "network-attachment-definitions"): lambda k: k.networkAttachmentDefinitions,
    ("", "services"): lambda k: k.services,
    ("discovery.k8s.io", "endpointslices"): lambda k: k.services,
    ("k8s.cni.cncf.io", "multi-networkpolicies"): lambda k: k.policies,
    ("", "namespaces"): lambda k: k.policies,
}
Verb = tuple[str, str, str]  # (API group, resource, verb)
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
# What the client raises for a failed call (Unreachable is an OSError), and for an answer that is not JSON.
CALL_ERRORS = (ApiException, OSError, ValueError)


def cluster(settings: Settings, rbac_file: str | None) -> list[Check]:
    kube = settings.kubernetes
    if kube is None:
        return [skip("apiserver", "no cluster (netcomp.yaml has no kubernetes:)")]
    try:
        api = Api(kube.kubeconfig)
    except KubeConfigError as e:
        return [fail("apiserver", f"cannot use kubeconfig {kube.kubeconfig}: {e}", "fix kubernetes.kubeconfig")]
    timeout = max(kube.timeout, 5.0)
    try:
        doc = api.call("GET", "/version", timeout=timeout).json()
        version = doc.get("gitVersion", "?") if isinstance(doc, dict) else "?"
    except CALL_ERRORS as e:
        found = one_line(e) if isinstance(e, OSError) else f"{api.server()} answers GET /version with {one_line(e)}"
        return [
            fail("apiserver", found, _reach_fix(e, kube)),
            skip("rbac", "the API server does not answer"),
            skip("node", "the API server does not answer"),
            *(
                [
                    skip(
                        "policies",
                        "the API server does not answer: the MultiNetworkPolicy rules in force in the pods "
                        "stay as last known; a change to a policy, a namespace's or a pod's labels is not known "
                        "until it answers",
                    )
                ]
                if kube.policies
                else []
            ),
        ]
    return [
        ok("apiserver", f"{api.server()} answers (Kubernetes {version}), kubeconfig {kube.kubeconfig}"),
        _rbac(api, kube, rbac_file, timeout),
        _node(api, settings.nodeName, timeout),
    ]


def _reach_fix(e: Exception, kube: KubeSettings) -> str:
    if isinstance(e, ApiException) and e.status == 401:
        return f"give {kube.kubeconfig} a token or client certificate the API server accepts"
    cause = e.__cause__  # the client's transport error; urllib3's, from the library's transport, has a reason
    if isinstance(cause, ssl.SSLError) or isinstance(getattr(cause, "reason", None), ssl.SSLError):
        return (
            f"give {kube.kubeconfig} the CA that signed the API server's certificate (certificate-authority or "
            "certificate-authority-data), and the name on that certificate (tls-server-name) if its address is "
            "not one"
        )
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


def _rbac(api: Api, kube: KubeSettings, given: str | None, timeout: float) -> Check:
    path = Path(given) if given else next((p for p in RBAC_FILES if p.is_file()), None)
    if path is None:
        return skip("rbac", f"no ClusterRole manifest to check against ({', '.join(map(str, RBAC_FILES))}; --rbac)")
    try:
        verbs = needed(cluster_role(path), kube)
    except (OSError, ValueError, yaml.YAMLError) as e:
        return fail("rbac", f"cannot read the ClusterRole in {path}: {e}", "give its manifest with --rbac FILE")
    denied = []
    try:
        for group, resource, verb in verbs:
            review = {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": {"group": group, "resource": resource, "verb": verb}},
            }
            doc = api.call("POST", ACCESS_REVIEWS, body=review, timeout=timeout).json()
            if not (isinstance(doc, dict) and (doc.get("status") or {}).get("allowed")):
                denied.append(f"{verb} {resource}" + (f".{group}" if group else ""))
    except CALL_ERRORS as e:
        return fail("rbac", f"cannot ask the API server: {one_line(e)}", "see the apiserver check")
    if denied:
        return fail(
            "rbac",
            f"not granted to the identity in {kube.kubeconfig}: {', '.join(denied)} ({len(denied)} of {len(verbs)})",
            f"apply the ClusterRole in {path} and bind it to that identity (docs/kubernetes.md)",
        )
    return ok("rbac", f"the {len(verbs)} verbs these settings need of the ClusterRole in {path} are granted")


def _node(api: Api, node: str, timeout: float) -> Check:
    try:
        api.core().read_node(node, _request_timeout=timeout, _preload_content=False)
    except CALL_ERRORS as e:
        if isinstance(e, ApiException) and e.status == 404:
            return fail(
                "node",
                f"no Node named {node!r} (nodeName)",
                "set nodeName in netcomp.yaml to this node's name in the cluster (`kubectl get nodes`); the "
                "kubelet registers it when it starts",
            )
        return fail("node", f"cannot read Node {node!r}: {one_line(e)}", "see the rbac check")
    return ok("node", f"Node {node!r} exists")
