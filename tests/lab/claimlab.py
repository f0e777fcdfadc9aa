"""The IPAMClaim tests' cluster (tests/integration/test_ipam_claims*.py): the packaged IPAMClaim CRD served, a
claim made and read, a pod as KubeVirt's virt-launcher is, ADD and DEL through a node's shim, and what the blocks
record of a claim's addresses."""

from __future__ import annotations

import contextlib
import ipaddress
from collections.abc import Iterator
from typing import Any

from netcomp.ipam.ipamclaimapi import GROUP, PLURAL, VERSION
from tests.lab.addrs import BLOCKS
from tests.lab.checkout import ROOT
from tests.lab.daemonlab import DaemonLab
from tests.lab.kubeapi import ApiServer
from tests.lab.labpods import NETWORKS, cni_args
from tests.lab.poll import until

CLAIMS = (GROUP, VERSION, "team-a", PLURAL)


def serve_claim_crd(admin: Any) -> None:
    """The packaged IPAMClaim CRD, served."""
    from kubernetes import client, utils

    utils.create_from_yaml(admin, str(ROOT / "packaging" / "kubernetes" / "ipamclaims-crd.yaml"))
    ext = client.ApiextensionsV1Api(admin)

    def served() -> bool:
        conds = ext.read_custom_resource_definition(f"{PLURAL}.{GROUP}").status.conditions or []
        return any(c.type == "Established" and c.status == "True" for c in conds)

    until(served, "the IPAMClaim CRD served", 30)


@contextlib.contextmanager
def ipam_claim(custom: Any, name: str, net: str, interface: str = "net1") -> Iterator[dict[str, Any]]:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "IPAMClaim", "metadata": {"name": name},
            "spec": {"network": net, "interface": interface}}  # fmt: skip
    made = custom.create_namespaced_custom_object(GROUP, VERSION, "team-a", PLURAL, body)
    try:
        yield made
    finally:
        with contextlib.suppress(Exception):
            custom.patch_namespaced_custom_object(*CLAIMS, name, {"metadata": {"finalizers": []}})
            custom.delete_namespaced_custom_object(*CLAIMS, name)


def read_claim(custom: Any, name: str) -> dict[str, Any]:
    got: dict[str, Any] = custom.get_namespaced_custom_object(*CLAIMS, name)
    return got


def owned_by(custom: Any, name: str, pod: str | None) -> bool:
    """Whether the claim's status.ownerPod names `pod` (None: it names none)."""
    return read_claim(custom, name)["status"].get("ownerPod") == ({"name": pod} if pod else None)


@contextlib.contextmanager
def launcher(
    core: Any, name: str, node: str, claim: str, net: str, controller: str = "vmi-a"
) -> Iterator[dict[str, Any]]:
    """A pod as KubeVirt's virt-launcher is, for these tests: on `node`, owned by `controller` (a uid), asking
    for `net` on net1 with the claim."""
    element = f'[{{"name": "{net}", "interface": "net1", "ipam-claim-reference": "{claim}"}}]'
    owner = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance", "name": "vm-a", "uid": controller,
             "controller": True}  # fmt: skip
    body = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": {NETWORKS: element}, "ownerReferences": [owner]},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "registry.invalid/none"}]}}  # fmt: skip
    made = core.create_namespaced_pod("team-a", body)
    try:
        yield {"ns": "team-a", "name": name, "uid": made.metadata.uid}
    finally:
        with contextlib.suppress(Exception):
            core.delete_namespaced_pod(name, "team-a", grace_period_seconds=0)


def add(dl: DaemonLab, p: dict[str, Any]) -> tuple[str, int, Any]:
    ctr = dl.lab.container()
    rc, res = dl.shim("ADD", ctr, args=cni_args(p, ctr), ready_timeout=30)
    return ctr, rc, res


def delete(dl: DaemonLab, ctr: str, p: dict[str, Any]) -> None:
    rc, res = dl.shim("DEL", ctr, args=cni_args(p, ctr), ready_timeout=30)
    assert rc == 0, res
    assert dl.lab.links(ctr) == ["lo"]


def gone(core: Any, p: dict[str, Any]) -> None:
    from kubernetes.client.exceptions import ApiException

    core.delete_namespaced_pod(p["name"], "team-a", grace_period_seconds=0)

    def absent() -> bool:
        try:
            core.read_namespaced_pod(p["name"], "team-a")
        except ApiException as e:
            return e.status == 404
        return False

    until(absent, f"pod {p['name']} gone", 30)


def block_entry(custom: Any, net: str, address: str) -> dict[str, Any] | None:
    """The `used` or `lent` entry of the address in the block it lies in, as the cluster records it."""
    for b in custom.list_cluster_custom_object(*BLOCKS)["items"]:
        spec = b["spec"]
        if spec["network"] == net and ipaddress.ip_address(address) in ipaddress.ip_network(spec["cidr"]):
            got: dict[str, Any] | None = (spec.get("used") or {}).get(address) or (spec.get("lent") or {}).get(address)
            return got
    return None


def add_while_away(api: ApiServer, dl: DaemonLab, pod: Any) -> tuple[str, int, Any]:
    """add(dl, pod) with the API server stopped, started again whatever the ADD did."""
    api.stop_apiserver()
    try:
        return add(dl, pod)
    finally:
        api.start_apiserver()


def claim_gone(custom: Any, name: str) -> bool:
    from kubernetes.client.exceptions import ApiException

    try:
        read_claim(custom, name)
    except ApiException as e:
        return e.status == 404
    return False


def claim_entries(custom: Any, uid: str) -> list[str]:
    """The addresses the blocks record as held by the claim of `uid`, used or lent."""
    out = []
    for b in custom.list_cluster_custom_object(*BLOCKS)["items"]:
        for part in ("used", "lent"):
            out += [a for a, doc in (b["spec"].get(part) or {}).items() if doc.get("containerID") == f"ipamclaim-{uid}"]
    return out
