"""A hostile tenant's MultiNetworkPolicy and pod on a real kube-apiserver, read by the node's daemon: what the API
server lets a tenant write (a rule of hundreds of peers, a network-status listing thousands of addresses) is
bounded and said once, and the node's follower goes on: a policy made after them is in force, with real traffic.
The shapes the API server refuses (labels that are not strings, policyTypes that are lists) are the unit tests'
(tests/unit/test_hostile_policies.py)."""

from __future__ import annotations

import json
import logging
import re
from typing import Any

import pytest

from netcomp.cluster.policywatch import MAX_ADDRESSES, PolicyWatch
from tests.integration.test_policies import addr, policy, sandboxes, shut, table
from tests.lab.daemonlab import DaemonLab
from tests.lab.labpods import STATUS, annotated, pod
from tests.lab.poll import until

pytestmark = pytest.mark.root


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
