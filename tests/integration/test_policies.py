"""MultiNetworkPolicy enforced by the node's daemon, end to end: policies made on a real kube-apiserver, pods
attached through the shim to the lab's networks (the bridge definitions team-a/fast and team-a/dual, the native
macvlan storage, the cluster's Network pool), and real TCP connects and UDP echoes between the pods' namespaces
showing what passes and what is dropped. Every check of NetworkPolicy's semantics is here per network: deny-all,
pod and namespace selectors and both, ipBlock less its exceptions, ports by number, by name and by range, egress
to DNS only, IPv6 and dual stack, a policy for one network leaving another open, label edits both ways, a policy
deleted; the rules are in force when the ADD answers, survive a restart unduplicated, stay while the API server is
away (and a new pod a known policy selects gets them), and a daemon killed between a pod's interfaces and its rules
never answered success and leaves nothing; what a hostile tenant can write through the API server (a rule of
hundreds of peers, a network-status of thousands of addresses) is bounded and stops no rule (the shapes the API
server refuses: tests/unit/test_hostile_policies.py). The daemon runs with the packaged ClusterRole's rights
only."""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Iterator
from ipaddress import ip_address
from pathlib import Path
from typing import Any

import pytest

from netcomp.cluster.policywatch import MAX_ADDRESSES, PolicyWatch
from tests.lab.daemonlab import DaemonLab
from tests.lab.kubeapi import ApiServer
from tests.lab.labpods import STATUS, annotated, cni_args, explain, nothing_left, pod
from tests.lab.netlab import ip
from tests.lab.podtraffic import DROPPED, PASSES, Pod, connects, echo
from tests.lab.poll import until

pytestmark = pytest.mark.root
MNP = ("k8s.cni.cncf.io", "v1beta2")
NFT = "/usr/sbin/nft"


def make_policy(custom: Any, name: str, spec: dict[str, Any], net: str) -> None:
    meta = {"name": name, "annotations": {"k8s.v1.cni.cncf.io/policy-for": net}}
    body = {"apiVersion": "k8s.cni.cncf.io/v1beta2", "kind": "MultiNetworkPolicy", "metadata": meta, "spec": spec}
    custom.create_namespaced_custom_object(*MNP, "team-a", "multi-networkpolicies", body)


@contextlib.contextmanager
def policy(custom: Any, dl: DaemonLab, name: str, spec: dict[str, Any], net: str = "fast") -> Iterator[None]:
    """A MultiNetworkPolicy in team-a for `net`, known to the daemon before this returns; deleted after (and
    known to be gone, by whichever daemon serves the lab then)."""

    def known() -> list[str]:
        watch = dl.daemon.cluster.policies if dl.daemon.cluster is not None else None
        assert watch is not None
        return [p.name for p in watch.policies("team-a")]

    make_policy(custom, name, spec, net)
    until(lambda: name in known(), f"the daemon never saw policy {name}")
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            custom.delete_namespaced_custom_object(*MNP, "team-a", "multi-networkpolicies", name)
        until(lambda: name not in known(), f"policy {name} never went")


@contextlib.contextmanager
def sandboxes(dl: DaemonLab, *pods: dict[str, Any]) -> Iterator[list[Pod]]:
    """Each pod's sandbox ADDed in order (a new netns each); DELeted after, in reverse, leaving nothing (on a
    failure, DELeted as far as it goes)."""
    done: list[tuple[str, dict[str, Any]]] = []
    try:
        for p in pods:
            ctr = dl.lab.container()
            done.append((ctr, p))
            rc, res = dl.shim("ADD", ctr, args=cni_args(p, ctr))
            assert rc == 0, res
        yield [Pod(ctr) for ctr, _ in done]
    except BaseException:
        for ctr, p in reversed(done):
            dl.shim("DEL", ctr, args=cni_args(p, ctr))
        raise
    for ctr, p in reversed(done):
        rc, res = dl.shim("DEL", ctr, args=cni_args(p, ctr))
        assert rc == 0, res
        assert table(ctr) == ""  # the namespace's table goes with its interfaces
    for ctr, _ in done:
        nothing_left(dl, ctr)


def addr(dl: DaemonLab, p: Pod, ifname: str = "net1", version: int = 4) -> str:
    """The pod's address of that IP version on the interface."""
    found = [a.split("/")[0] for a in dl.lab.addrs(p.ns, ifname)]
    return next(a for a in found if ip_address(a).version == version)


def table(ns: str) -> str:
    """The namespace's whole nftables ruleset, its counters' values left out (traffic changes them)."""
    out = ip("netns", "exec", ns, NFT, "list", "ruleset")
    return re.sub(r"counter packets \d+ bytes \d+", "counter", out)


def labelled(admin: Any, name: str, labels: dict[str, str | None], ns: str = "team-a") -> None:
    from kubernetes import client

    client.CoreV1Api(admin).patch_namespaced_pod(name, ns, {"metadata": {"labels": labels}})


def opens(src: Pod, dst: Pod, to: str, port: int) -> bool:
    """A connect that passes (for `until`: a drop costs the short wait only)."""
    return connects(src, dst, to, port, DROPPED)


def shut(src: Pod, dst: Pod, to: str, port: int) -> bool:
    return not connects(src, dst, to, port, DROPPED)


# ------------------------------------------------------------------------------------------------ ingress


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
        sandboxes(dl, pc, ps, pd) as (client, stranger, db),
    ):
        to_db = addr(dl, db)
        # In force as the ADD answered: no wait.
        assert not connects(stranger, db, to_db, 5001, DROPPED)
        assert connects(client, db, to_db, 5002, PASSES)
        assert connects(db, stranger, addr(dl, stranger), 5003, PASSES)  # egress, and the
        assert connects(client, stranger, addr(dl, stranger), 5004, PASSES)  # stranger: open
        rc, doc = explain(dl, "--pod", "team-a/db")
        assert rc == 0 and doc["policies"]["interfaces"][0]["policies"] == ["team-a/db-from-clients"], doc
        assert doc["policies"]["interfaces"][0]["ingress"] == 1 and doc["policies"]["interfaces"][0]["egress"] is None

        labelled(admin, "stranger", {"role": "client"})
        until(lambda: opens(stranger, db, to_db, 5005), "the stranger's new label never let it in")
        labelled(admin, "stranger", {"role": None})
        until(lambda: shut(stranger, db, to_db, 5006), "its label taken away, it stayed in")
        custom.delete_namespaced_custom_object(*MNP, "team-a", "multi-networkpolicies", "db-from-clients")
        until(lambda: opens(stranger, db, to_db, 5007), "the policy deleted, db stayed shut")


def test_deny_all_ingress_and_the_selected_pods_own_label_edits(
    custom: Any, admin: Any, multus_node: DaemonLab
) -> None:
    """A policy with no ingress rule: nothing comes in to db, TCP or UDP, while its own connections and their
    replies pass. db's label taken away opens it; given back, shuts it again."""
    dl = multus_node
    fast = annotated("fast")
    with (
        policy(custom, dl, "deny-db", {"podSelector": {"matchLabels": {"app": "db"}}, "policyTypes": ["Ingress"]}),
        pod(admin, dl, "web", **fast) as pw,
        pod(admin, dl, "db", labels={"app": "db"}, **fast) as pd,
        sandboxes(dl, pw, pd) as (web, db),
    ):
        to_db, to_web = addr(dl, db), addr(dl, web)
        assert not connects(web, db, to_db, 5101, DROPPED)
        assert echo(web, db, to_db, 5101, DROPPED) == "request dropped"
        assert connects(db, web, to_web, 5102, PASSES)
        assert echo(db, web, to_web, 5102, PASSES) == "echoed"  # the reply to db's own datagram comes in
        labelled(admin, "db", {"app": None})
        until(lambda: opens(web, db, to_db, 5103), "db unlabelled stayed shut")
        assert table(db.ns) == ""
        labelled(admin, "db", {"app": "db"})
        until(lambda: shut(web, db, to_db, 5104), "db labelled again stayed open")


def test_from_a_namespace_selector_and_from_a_namespace_and_pod_selector_together(
    custom: Any, admin: Any, multus_node: DaemonLab
) -> None:
    """On the node's own macvlan network storage (a policy names it bare), which pods of both teams join: from
    namespaces labelled team=b lets every team-b pod in and no team-a one; with a podSelector beside it, only
    team-b's clients. The namespace's label taken away shuts its pods out."""
    from kubernetes import client

    dl = multus_node
    core = client.CoreV1Api(admin)
    team_b = {"namespaceSelector": {"matchLabels": {"team": "b"}}}
    both = {**team_b, "podSelector": {"matchLabels": {"role": "client"}}}
    storage = annotated("storage")
    core.patch_namespace("team-b", {"metadata": {"labels": {"team": "b"}}})
    try:
        with (
            pod(admin, dl, "db", labels={"app": "db"}, **storage) as pd,
            pod(admin, dl, "b-client", ns="team-b", labels={"role": "client"}, **storage) as pbc,
            pod(admin, dl, "b-other", ns="team-b", **storage) as pbo,
            pod(admin, dl, "a-client", labels={"role": "client"}, **storage) as pac,
            sandboxes(dl, pd, pbc, pbo, pac) as (db, b_client, b_other, a_client),
        ):
            to_db = addr(dl, db)
            spec: dict[str, Any] = {"podSelector": {"matchLabels": {"app": "db"}}, "policyTypes": ["Ingress"]}
            with policy(custom, dl, "from-team-b", {**spec, "ingress": [{"from": [team_b]}]}, net="storage"):
                until(lambda: shut(a_client, db, to_db, 5201), "team-a's client stayed in")
                until(lambda: opens(b_client, db, to_db, 5202), "team-b's client never got in")
                assert connects(b_other, db, to_db, 5203, PASSES)
            until(lambda: opens(a_client, db, to_db, 5204), "the policy deleted, db stayed shut")
            with policy(custom, dl, "from-b-clients", {**spec, "ingress": [{"from": [both]}]}, net="storage"):
                until(lambda: shut(b_other, db, to_db, 5205), "team-b's other pod stayed in")
                assert connects(b_client, db, to_db, 5206, PASSES)
                assert not connects(a_client, db, to_db, 5207, DROPPED)  # a client, not of team-b
                core.patch_namespace("team-b", {"metadata": {"labels": {"team": None}}})
                until(lambda: shut(b_client, db, to_db, 5208), "team-b's label taken away, its client stayed in")
    finally:
        core.patch_namespace("team-b", {"metadata": {"labels": {"team": None}}})


def test_from_an_ip_block_less_its_exception(custom: Any, admin: Any, multus_node: DaemonLab) -> None:
    """from ipBlock 10.89.0.0/16 except the stranger's address: the client's connects pass, the stranger's do
    not (addresses, not pods: neither has a label)."""
    dl = multus_node
    fast = annotated("fast")
    with (
        pod(admin, dl, "client", **fast) as pc,
        pod(admin, dl, "stranger", **fast) as ps,
        pod(admin, dl, "db", labels={"app": "db"}, **fast) as pd,
        sandboxes(dl, pc, ps, pd) as (client, stranger, db),
    ):
        to_db = addr(dl, db)
        block = {"ipBlock": {"cidr": "10.89.0.0/16", "except": [f"{addr(dl, stranger)}/32"]}}
        spec = {"podSelector": {"matchLabels": {"app": "db"}}, "ingress": [{"from": [block]}]}
        with policy(custom, dl, "db-from-block", spec):
            until(lambda: shut(stranger, db, to_db, 5301), "the excepted address stayed in")
            assert connects(client, db, to_db, 5302, PASSES)


def test_a_port_a_named_port_and_a_port_range(custom: Any, admin: Any, multus_node: DaemonLab) -> None:
    """Ingress to db on TCP 5410, on its container's port named http (8080), on TCP 6000-6010 (endPort) and
    on UDP 5410: each passes, its neighbours and the other protocol do not."""
    dl = multus_node
    fast = annotated("fast")
    ports = [{"protocol": "TCP", "port": 5410}, {"protocol": "TCP", "port": "http"},
             {"protocol": "TCP", "port": 6000, "endPort": 6010}, {"protocol": "UDP", "port": 5410}]  # fmt: skip
    spec = {"podSelector": {"matchLabels": {"app": "db"}}, "ingress": [{"ports": ports}]}
    with (
        policy(custom, dl, "db-ports", spec),
        pod(admin, dl, "web", **fast) as pw,
        pod(admin, dl, "db", labels={"app": "db"}, ports={"http": 8080}, **fast) as pd,
        sandboxes(dl, pw, pd) as (web, db),
    ):
        to_db = addr(dl, db)
        for port in (5410, 8080, 6000, 6005, 6010):
            assert connects(web, db, to_db, port, PASSES), (port, table(db.ns))
        for port in (5411, 8081, 5999, 6011):
            assert not connects(web, db, to_db, port, DROPPED), port
        assert echo(web, db, to_db, 5410, PASSES) == "echoed"
        assert echo(web, db, to_db, 6000, DROPPED) == "request dropped"  # the range is TCP's only


def test_ipv6_and_dual_stack(custom: Any, admin: Any, multus_node: DaemonLab) -> None:
    """On team-a/dual (an IPv4 and an IPv6 address each): the client's connects pass to both of db's addresses,
    the stranger's to neither; the peer's addresses of both families are in db's rules, and neighbour
    discovery passes (an IPv6 connect needs it)."""
    dl = multus_node
    dual = annotated("dual")
    spec = {"podSelector": {"matchLabels": {"app": "db"}},
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}]}]}  # fmt: skip
    with (
        policy(custom, dl, "db-dual", spec, net="dual"),
        pod(admin, dl, "client", labels={"role": "client"}, **dual) as pc,
        pod(admin, dl, "stranger", **dual) as ps,
        pod(admin, dl, "db", labels={"app": "db"}, **dual) as pd,
        sandboxes(dl, pc, ps, pd) as (client, stranger, db),
    ):
        for version, port in ((6, 5501), (4, 5502)):
            to_db = addr(dl, db, version=version)
            assert connects(client, db, to_db, port, PASSES), version
            assert not connects(stranger, db, to_db, port + 10, DROPPED), version
            assert connects(db, stranger, addr(dl, stranger, version=version), port + 20, PASSES), version
        rules = table(db.ns)
        assert addr(dl, client, version=6) in rules and addr(dl, client) in rules, rules


def test_a_policy_for_a_cluster_network_leaves_the_pods_other_network_open(
    custom: Any, admin: Any, multus_node: DaemonLab
) -> None:
    """A deny-all policy for the cluster's Network pool (cluster-scoped, named bare): db's pool interface is shut,
    its team-a/fast interface stays open to the same stranger."""
    dl = multus_node
    both = annotated("fast, pool")
    with (
        policy(custom, dl, "deny-db-pool", {"podSelector": {"matchLabels": {"app": "db"}}}, net="pool"),
        pod(admin, dl, "stranger", **both) as ps,
        pod(admin, dl, "db", labels={"app": "db"}, **both) as pd,
        sandboxes(dl, ps, pd) as (stranger, db),
    ):
        assert not connects(stranger, db, addr(dl, db, "net2"), 5601, DROPPED)
        assert connects(stranger, db, addr(dl, db, "net1"), 5602, PASSES)
        assert "in_net2" in table(db.ns) and "in_net1" not in table(db.ns)


# ------------------------------------------------------------------------------------------------ egress


def test_egress_denied_but_dns(custom: Any, admin: Any, multus_node: DaemonLab) -> None:
    """app may send to UDP and TCP port 53 only: a DNS query's datagram and its answer pass, another port's do
    not, and a TCP connect to 53 passes where one to 80 does not; what comes in to app stays open."""
    dl = multus_node
    fast = annotated("fast")
    dns = [{"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}]
    spec = {"podSelector": {"matchLabels": {"app": "app"}}, "policyTypes": ["Egress"], "egress": dns}
    with (
        policy(custom, dl, "app-dns-only", spec),
        pod(admin, dl, "resolver", **fast) as pr,
        pod(admin, dl, "app", labels={"app": "app"}, **fast) as pa,
        sandboxes(dl, pr, pa) as (resolver, app),
    ):
        to_resolver = addr(dl, resolver)
        assert echo(app, resolver, to_resolver, 53, PASSES) == "echoed"
        assert echo(app, resolver, to_resolver, 5353, DROPPED) == "request dropped"
        assert connects(app, resolver, to_resolver, 53, PASSES)
        assert not connects(app, resolver, to_resolver, 80, DROPPED)
        assert connects(resolver, app, addr(dl, app), 5701, PASSES)


def test_egress_to_a_named_port_of_a_peer_on_this_node(custom: Any, admin: Any, multus_node: DaemonLab) -> None:
    """web may send to the pods labelled app=db on their port named pg, resolved from db's own container (this
    node's pod, known from its ADD): attached after web, db becomes reachable there and nowhere else."""
    dl = multus_node
    fast = annotated("fast")
    to_pg = [{"to": [{"podSelector": {"matchLabels": {"app": "db"}}}], "ports": [{"protocol": "TCP", "port": "pg"}]}]
    spec = {"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Egress"], "egress": to_pg}
    with (
        policy(custom, dl, "web-to-pg", spec),
        pod(admin, dl, "web", labels={"app": "web"}, **fast) as pw,
        pod(admin, dl, "other", ports={"pg": 5432}, **fast) as po,
        pod(admin, dl, "db", labels={"app": "db"}, ports={"pg": 5432}, **fast) as pd,
        sandboxes(dl, pw, po, pd) as (web, other, db),
    ):
        to_db = addr(dl, db)
        until(lambda: opens(web, db, to_db, 5432), "db's pg port never opened to web")
        assert not connects(web, db, to_db, 5433, DROPPED)
        assert not connects(web, other, addr(dl, other), 5432, DROPPED)  # pg, but not app=db


# ------------------------------------------------------------------------------------------------ faults


def test_a_restarted_daemon_keeps_the_rules_and_duplicates_none(
    custom: Any, admin: Any, multus_node: DaemonLab
) -> None:
    """A new daemon on the same dirs recomputes db's table from the records and the cluster: the kernel keeps it
    meanwhile, and afterwards the namespace holds one table with the same rules as before, in force. A pod the
    policy selects, ADDed as soon as the new daemon serves, has its table when the ADD answers."""
    dl = multus_node
    fast = annotated("fast")
    spec = {"podSelector": {"matchLabels": {"app": "db"}},
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}]}]}  # fmt: skip
    with (
        policy(custom, dl, "db-from-clients", spec),
        pod(admin, dl, "client", labels={"role": "client"}, **fast) as pc,
        pod(admin, dl, "db", labels={"app": "db"}, **fast) as pd,
        pod(admin, dl, "db2", labels={"app": "db"}, **fast) as pd2,
        sandboxes(dl, pc, pd) as (client, db),
    ):
        before = table(db.ns)
        assert before.count("table inet netcomp") == 1 and addr(dl, client) in before, before
        dl.restart(follow=True)
        db2 = dl.lab.container()
        rc, res = dl.shim("ADD", db2, args=cni_args(pd2, db2))
        assert rc == 0 and "table inet netcomp" in table(db2), res
        enforcer = dl.daemon.delegator.policies
        assert enforcer is not None
        until(lambda: enforcer.tables == 2, "the restarted daemon never took db's table on")
        assert table(db.ns) == before
        assert connects(client, db, addr(dl, db), 5801, PASSES)
        assert table(client.ns) == ""
        until(lambda: opens(client, Pod(db2), addr(dl, Pod(db2)), 5802), "the client never got in to db2")
        rc, res = dl.shim("DEL", db2, args=cni_args(pd2, db2))
        assert rc == 0 and table(db2) == "", res


@pytest.mark.parametrize("point", ["after-policy-ahead", "before-policy"])
def test_a_daemon_killed_between_the_interfaces_and_the_rules_never_answered_and_the_restart_undoes_it(
    api: ApiServer, custom: Any, admin: Any, tmp_path: Path, point: str
) -> None:
    """SIGKILL at after-policy-ahead (db's table written while its delegates run, the ADD not done) or at
    before-policy (db's interfaces are in its namespace, the ADD has not waited for its rules). The runtime was
    never told success; the daemon that starts again undoes the ADD and nothing is left, the table written ahead
    neither; the runtime's ADD again answers with the rules in force (a stranger's connect is dropped at
    once)."""
    from tests.lab.procdaemon import kube_proc_node

    node = "node-p"
    storage = annotated("storage")
    make_policy(custom, "deny-db", {"podSelector": {"matchLabels": {"app": "db"}}}, "storage")
    try:
        with (
            pod(admin, node, "db", labels={"app": "db"}, **storage) as pd,
            pod(admin, node, "stranger", **storage) as ps,
            kube_proc_node(api, tmp_path, node, env={"NETCOMP_CRASH_AT": point}) as n,
        ):
            db = n.lab.container()
            rc, res = n.shim("ADD", db, args=cni_args(pd, db), ready_timeout=2)
            assert rc == 1 and res["code"] == 11, res  # the daemon died mid-request: try again
            assert n.proc is not None and n.proc.wait(timeout=60) == -9, n.logs()
            assert f"killing the daemon at {point}" in n.logs()
            if point == "before-policy":
                assert sorted(n.lab.links(db)) == ["eth0", "lo", "net1"]
            else:
                assert "table inet netcomp" in table(db)
            n.env.pop("NETCOMP_CRASH_AT")
            n.start()
            assert n.lab.links(db) == ["lo"] and table(db) == "", n.logs()
            assert n.cache_files() == [] and n.leases() == [], n.logs()
            rc, res = n.shim("ADD", db, args=cni_args(pd, db))
            assert rc == 0, res
            assert "table inet netcomp" in table(db), n.logs()
            stranger = n.lab.container()
            rc, res = n.shim("ADD", stranger, args=cni_args(ps, stranger))
            assert rc == 0, res
            to_db = next(a.split("/")[0] for a in n.lab.addrs(db, "net1") if "." in a)
            assert not connects(Pod(stranger), Pod(db), to_db, 5901, DROPPED)
            for ctr, p in ((stranger, ps), (db, pd)):
                assert n.shim("DEL", ctr, args=cni_args(p, ctr))[0] == 0
            assert n.lab.links(db) == ["lo"] and table(db) == "" and n.cache_files() == [] and n.leases() == []
    finally:
        custom.delete_namespaced_custom_object(*MNP, "team-a", "multi-networkpolicies", "deny-db")


# ------------------------------------------------------------------------------------------------ errors


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
            with sandboxes(dl, pw):
                pass
        finally:
            enforcer.nft_path = real


def test_with_the_api_server_away_the_rules_stay_and_a_new_selected_pod_gets_them(
    api: ApiServer, custom: Any, admin: Any, multus_node: DaemonLab, caplog: pytest.LogCaptureFixture
) -> None:
    """kube-apiserver stopped: db's table stays as it was and in force; db2 (its object seen by the node before)
    ADDed meanwhile gets the policy it knows, with the peers it knows; the log and the daemon's status say that
    changes made meanwhile are not known; `netcomp doctor` says so too."""
    from netcomp.doctor.apiserver import cluster

    dl = multus_node
    fast = annotated("fast")
    spec = {"podSelector": {"matchLabels": {"app": "db"}}, "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}]}]}  # fmt: skip
    assert dl.daemon.cluster is not None and dl.daemon.cluster.policies is not None
    watch, pods = dl.daemon.cluster.policies, dl.daemon.cluster.pods
    with (
        policy(custom, dl, "db-away", spec),
        pod(admin, dl, "client", labels={"role": "client"}, **fast) as pc,
        pod(admin, dl, "stranger", **fast) as ps,
        pod(admin, dl, "db", labels={"app": "db"}, **fast) as pd,
        pod(admin, dl, "db2", labels={"app": "db"}, **fast) as pd2,
        sandboxes(dl, pc, ps, pd) as (client, stranger, db),
    ):
        until(lambda: pods.has("team-a", "db2"), "the node's pod watch never saw db2")
        until(lambda: watch.pod("team-a", "client") is not None, "the policy watch never saw the client's address")
        before = table(db.ns)
        api.stop_apiserver()
        db2 = dl.lab.container()
        try:
            until(lambda: "cannot follow" in (watch.status_error() or ""), "the daemon's status never said so")
            until(lambda: "MultiNetworkPolicies made meanwhile is not known" in caplog.text, "the log never said so")
            checks = {c.name: c for c in cluster(dl.settings, None)}
            assert "stay as last known" in checks["policies"].found, checks
            assert table(db.ns) == before
            assert not connects(stranger, db, addr(dl, db), 6001, DROPPED)
            assert connects(client, db, addr(dl, db), 6002, PASSES)
            rc, res = dl.shim("ADD", db2, args=cni_args(pd2, db2))
            assert rc == 0 and "table inet netcomp" in table(db2), res
            to_db2 = addr(dl, Pod(db2))
            assert not connects(stranger, Pod(db2), to_db2, 6003, DROPPED)
            assert connects(client, Pod(db2), to_db2, 6004, PASSES)
        finally:
            api.start_apiserver()
        rc, res = dl.shim("DEL", db2, args=cni_args(pd2, db2))
        assert rc == 0 and table(db2) == "", res


# ------------------------------------------------------------------------------------------------ hostile


def test_a_huge_rule_and_a_forged_network_status_are_bounded_and_stop_no_rule(
    custom: Any, admin: Any, multus_node: DaemonLab, caplog: pytest.LogCaptureFixture
) -> None:
    """In team-a: a policy whose first rule has 300 peers (past a rule's 256: left out and said once, its other
    rule kept), and a pod of another node whose network-status claims 3,000 addresses on team-a/fast (a tenant
    may edit its pod's annotations). The pod counts with 64 of them; db, which lets that pod's addresses in, has
    64 of them in its set, and web (none of them) is shut out."""
    dl = multus_node
    fast = annotated("fast")
    many = [f"10.89.{100 + i // 120}.{2 * (i % 120) + 1}" for i in range(3000)]  # none adjacent: no range merges
    huge = {"podSelector": {"matchLabels": {"app": "nobody"}}, "ingress": [{"from": [{"podSelector": {}}] * 300}, {}]}
    allow = {"podSelector": {"matchLabels": {"app": "db"}},
             "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "liar"}}}]}]}  # fmt: skip
    forged = {STATUS: json.dumps([{"name": "team-a/fast", "interface": "net1", "ips": many}])}
    with (
        caplog.at_level(logging.WARNING, "netcomp.foreign"),
        policy(custom, dl, "huge", huge),
        pod(admin, "elsewhere", "liar", labels={"role": "liar"}, **forged),
        pod(admin, dl, "web", **fast) as pw,
        pod(admin, dl, "db", labels={"app": "db"}, **fast) as pd,
        sandboxes(dl, pw, pd) as (web, db),
        policy(custom, dl, "db-from-liar", allow),
    ):
        assert dl.daemon.cluster is not None
        watch: PolicyWatch = dl.daemon.cluster.policies
        (kept,) = [p for p in watch.policies("team-a") if p.name == "huge"]
        assert kept.ingress is not None and len(kept.ingress) == 1
        liar = watch.pod("team-a", "liar")
        assert liar is not None and len(liar.addresses["team-a/fast"]) == MAX_ADDRESSES
        until(lambda: shut(web, db, addr(dl, db), 5901), "web was never shut out of db")
        until(lambda: len(re.findall(r"10\.89\.1\d\d\.\d+", table(db.ns))) == MAX_ADDRESSES,
              "db's set never held the liar's first 64 addresses")  # fmt: skip
    said = [r.getMessage() for r in caplog.records if "team-a/" in r.getMessage()]
    assert sum("MultiNetworkPolicy team-a/huge" in s and "300 peers: more than 256 peers in a rule" in s
               for s in said) == 1, said  # fmt: skip
    assert sum("Pod team-a/liar" in s and f"more than {MAX_ADDRESSES} addresses on team-a/fast" in s
               for s in said) == 1, said  # fmt: skip
