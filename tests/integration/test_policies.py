"""MultiNetworkPolicy enforced by the node's daemon, end to end: policies made on a real kube-apiserver, pods
attached through the shim to the lab's bridge definition (team-a/fast), and real TCP connects between the pods'
namespaces showing what passes and what is dropped: the rules are in force when the ADD answers, follow a
policy's deletion and a peer's label edit, and an ADD whose rules cannot be written fails naming the policy and
leaves nothing. The daemon runs with the packaged ClusterRole's rights only."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from tests.lab.daemonlab import DaemonLab
from tests.lab.labpods import annotated, attach, cni_args, detach, explain, nothing_left, pod
from tests.lab.podtraffic import DROPPED, PASSES, Pod, connects
from tests.lab.poll import until

pytestmark = pytest.mark.root
MNP = ("k8s.cni.cncf.io", "v1beta2")


@contextlib.contextmanager
def policy(custom: Any, dl: DaemonLab, name: str, spec: dict[str, Any], net: str = "fast") -> Iterator[None]:
    """A MultiNetworkPolicy in team-a for `net`, known to the daemon before this returns; deleted after."""
    meta = {"name": name, "annotations": {"k8s.v1.cni.cncf.io/policy-for": net}}
    body = {"apiVersion": "k8s.cni.cncf.io/v1beta2", "kind": "MultiNetworkPolicy", "metadata": meta, "spec": spec}
    custom.create_namespaced_custom_object(*MNP, "team-a", "multi-networkpolicies", body)
    watch = dl.daemon.cluster.policies if dl.daemon.cluster is not None else None
    assert watch is not None
    until(lambda: watch.counts()["policies"] >= 1 and any(p.name == name for p in watch.policies("team-a")),
          f"the daemon never saw policy {name}")  # fmt: skip
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            custom.delete_namespaced_custom_object(*MNP, "team-a", "multi-networkpolicies", name)
        until(lambda: all(p.name != name for p in watch.policies("team-a")), f"policy {name} never went")


def fast_addr(dl: DaemonLab, ctr: str) -> str:
    return dl.lab.addrs(ctr, "net1")[0].split("/")[0]


def test_a_selected_pod_is_protected_when_its_add_answers_and_follows_the_policy(
    custom: Any, admin: Any, multus_node: DaemonLab
) -> None:
    """db takes connections on team-a/fast from role=client pods only, from its ADD's answer on; a stranger's
    label edit lets it in; the policy deleted opens db again. Its own outbound traffic (egress is not isolated)
    and the stranger's own interface stay open."""
    dl = multus_node
    spec = {"podSelector": {"matchLabels": {"app": "db"}}, "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}]}]}  # fmt: skip
    fast = annotated("fast")
    with (
        policy(custom, dl, "db-from-clients", spec),
        pod(admin, dl, "client", labels={"role": "client"}, **fast) as pc,
        pod(admin, dl, "stranger", **fast) as ps,
        pod(admin, dl, "db", labels={"app": "db"}, **fast) as pd,
    ):
        client, rc, res = attach(dl, pc)
        assert rc == 0, res
        stranger, rc, res = attach(dl, ps)
        assert rc == 0, res
        db, rc, res = attach(dl, pd)
        assert rc == 0, res
        to_db = fast_addr(dl, db)
        # In force as the ADD answered: no wait.
        assert not connects(Pod(stranger), Pod(db), to_db, 5001, DROPPED)
        assert connects(Pod(client), Pod(db), to_db, 5002, PASSES)
        assert connects(Pod(db), Pod(stranger), fast_addr(dl, stranger), 5003, PASSES)  # egress, and the
        assert connects(Pod(client), Pod(stranger), fast_addr(dl, stranger), 5004, PASSES)  # stranger: open
        rc, doc = explain(dl, "--pod", "team-a/db")
        assert rc == 0 and doc["policies"]["interfaces"][0]["policies"] == ["team-a/db-from-clients"], doc
        assert doc["policies"]["interfaces"][0]["ingress"] == 1 and doc["policies"]["interfaces"][0]["egress"] is None

        from kubernetes import client as k8s

        k8s.CoreV1Api(admin).patch_namespaced_pod("stranger", "team-a", {"metadata": {"labels": {"role": "client"}}})
        until(
            lambda: connects(Pod(stranger), Pod(db), to_db, 5005, DROPPED), "the stranger's new label never let it in"
        )
        k8s.CoreV1Api(admin).patch_namespaced_pod("stranger", "team-a", {"metadata": {"labels": {"role": None}}})
        until(lambda: not connects(Pod(stranger), Pod(db), to_db, 5006, DROPPED), "its label taken away, it stayed in")
        custom.delete_namespaced_custom_object(*MNP, "team-a", "multi-networkpolicies", "db-from-clients")
        until(lambda: connects(Pod(stranger), Pod(db), to_db, 5007, DROPPED), "the policy deleted, db stayed shut")
        for ctr, p in ((db, pd), (stranger, ps), (client, pc)):
            rc, res = dl.shim("DEL", ctr, args=cni_args(p, ctr))
            assert rc == 0, res
        for ctr in (db, stranger, client):
            nothing_left(dl, ctr)


def test_an_add_whose_rules_cannot_be_written_fails_naming_the_policy_and_leaves_nothing(
    custom: Any, admin: Any, multus_node: DaemonLab
) -> None:
    """nft missing: the ADD of a pod a policy selects fails with a CNI error naming the policy, rolled back; a pod
    no policy selects is attached as ever."""
    dl = multus_node
    enforcer = dl.daemon.delegator.policies
    assert enforcer is not None
    fast = annotated("fast")
    with (
        policy(custom, dl, "deny-db", {"podSelector": {"matchLabels": {"app": "db"}}, "policyTypes": ["Ingress"]}),
        pod(admin, dl, "db", labels={"app": "db"}, **fast) as pd,
        pod(admin, dl, "web", **fast) as pw,
    ):
        real, enforcer.nft_path = enforcer.nft_path, "/nonexistent/nft"
        try:
            db = dl.lab.container()
            rc, res = dl.shim("ADD", db, args=cni_args(pd, db))
            assert rc != 0 and "team-a/deny-db" in res["msg"] and "nft" in res["msg"], res
            nothing_left(dl, db)
            web, rc, res = attach(dl, pw)
            assert rc == 0, res
            detach(dl, web, pw)
        finally:
            enforcer.nft_path = real
