"""MultiNetworkPolicies, namespaces and pods' metadata are tenants' input: whatever shape they have, the policy
reader (policy/mnp.py) raises its own PolicyError or leaves a rule out naming the field, and the node's follower
(cluster/policywatch.py) skips a bad object, says it once (foreign.ignore) and keeps every other one of the list
or the watch. What one policy and one network-status can make is bounded. A seeded fuzz (hypothesis) and a table
of the shapes a hostile review tried."""

from __future__ import annotations

import ipaddress
import json
from ipaddress import ip_address
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from netcomp.cluster import policywatch
from netcomp.cluster.policywatch import MAX_ADDRESSES, PolicyWatch, _Namespaces, _Pods, _Policies
from netcomp.kube.following import Backoff
from netcomp.metrics import Metrics
from netcomp.pods.multus import NETWORK_STATUS
from netcomp.policy import mnp
from netcomp.policy.mnp import POLICY_FOR, POLICY_LIMITS, RULE_LIMITS, PolicyError, parse
from tests.lab.hostile import JSON, counting, nested

_SELECTOR = st.fixed_dictionaries(
    {},
    optional={
        "matchLabels": JSON | st.dictionaries(st.text(max_size=3), JSON, max_size=3),
        "matchExpressions": JSON
        | st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "key": JSON | st.just("k"),
                    "operator": JSON | st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt"]),
                    "values": JSON | st.lists(JSON, max_size=2),
                },
            ),
            max_size=3,
        ),
    },
)
_PORT = JSON | st.fixed_dictionaries(
    {}, optional={"protocol": JSON | st.sampled_from(["TCP", "udp"]), "port": JSON, "endPort": JSON}
)
_BLOCK = st.fixed_dictionaries({}, optional={"cidr": JSON | st.just("10.0.0.0/8"), "except": JSON})
_PEER = JSON | st.fixed_dictionaries(
    {}, optional={"podSelector": JSON | _SELECTOR, "namespaceSelector": JSON | _SELECTOR, "ipBlock": JSON | _BLOCK}
)
_RULE = JSON | st.fixed_dictionaries(
    {},
    optional={k: JSON | st.lists(v, max_size=3) for k, v in (("from", _PEER), ("to", _PEER), ("ports", _PORT))},
)
_SPEC = JSON | st.fixed_dictionaries(
    {},
    optional={
        "podSelector": JSON | _SELECTOR,
        "policyTypes": JSON | st.lists(JSON | st.sampled_from(["Ingress", "Egress"]), max_size=3),
        "ingress": JSON | st.lists(_RULE, max_size=3),
        "egress": JSON | st.lists(_RULE, max_size=3),
    },
)
_META = JSON | st.fixed_dictionaries(
    {"namespace": st.just("a") | JSON, "name": st.just("p") | JSON},
    optional={"annotations": JSON | st.fixed_dictionaries({POLICY_FOR: st.just("n") | JSON})},
)
POLICIES = JSON | st.fixed_dictionaries({"metadata": _META}, optional={"spec": _SPEC})


@settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck))
@given(POLICIES)
def test_any_shape_of_policy_is_read_or_refused_with_policy_error_only(obj: Any) -> None:
    try:
        got = parse(obj)
    except PolicyError as e:
        assert "\n" not in str(e) and len(str(e)) < 400
        return
    assert all(isinstance(p, str) and len(p) < 400 for p in got.problems)


def policy(spec: Any, notes: Any = None) -> dict[str, Any]:
    return {"metadata": {"namespace": "a", "name": "p", "annotations": notes or {POLICY_FOR: "n"}}, "spec": spec}


@pytest.mark.parametrize(
    "obj, words",
    [
        (policy({"policyTypes": [["Ingress"]]}), "policyTypes"),
        (policy({"policyTypes": [{"a": 1}, "Egress"]}), "policyTypes"),
        (policy({"policyTypes": "Ingress"}), "policyTypes"),
        (policy({}, notes=["x"]), "annotations are not a map"),
        (policy({}, notes="policy-for"), "annotations are not a map"),
        (policy({"podSelector": {"matchExpressions": [{"key": "k", "operator": "In", "values": "v"}]}}), "podSelector"),
        (policy({"podSelector": {"matchExpressions": [{"key": "k", "operator": "Near"}]}}), "podSelector"),
        (policy({"podSelector": ["app"]}), "podSelector"),
        ({"metadata": {"namespace": "a", "name": ["p"]}}, "not a namespaced object with a name"),
        (policy({"podSelector": nested(40)}), "deeper than 32"),
    ],
)
def test_a_policy_of_a_wrong_shape_is_refused_naming_the_field(obj: Any, words: str) -> None:
    with pytest.raises(PolicyError, match=words):
        parse(obj)


@pytest.mark.parametrize(
    "rule, words",
    [
        ({"ports": [{"port": [80]}]}, "port 0: port is a number or a name"),
        ({"ports": [{"protocol": ["TCP"], "port": 80}]}, "port 0: protocol"),
        ({"ports": [{"port": 80, "endPort": "90"}]}, "endPort"),
        ({"ports": "80"}, "ports are not a list"),
        ({"ports": [{"port": "\u0663"}]}, "port 0: '\u0663' is not a port's name"),  # an Arabic-Indic 3: no port 3
        ({"ports": [{"port": "\uff18\uff10"}]}, "port 0: '\uff18\uff10' is not a port's name"),  # a full-width 80
        ({"ports": [{"port": "\u00b2"}]}, "port 0: '\u00b2' is not a port's name"),
        (
            {"from": [{"podSelector": {"matchExpressions": [{"key": "k", "operator": "In", "values": 3}]}}]},
            "peer 0: its podSelector is not a label selector",
        ),
        (
            {"from": [{"namespaceSelector": {"matchExpressions": [{"key": "k", "operator": "Like"}]}}]},
            "peer 0: its namespaceSelector",
        ),
        ({"from": [{"namespaceSelector": "team"}]}, "peer 0: its namespaceSelector is not"),
    ],
)
def test_a_rule_of_a_wrong_shape_is_left_out_naming_the_field(rule: dict[str, Any], words: str) -> None:
    got = parse(policy({"ingress": [rule, {}]}))
    assert got.ingress is not None and len(got.ingress) == 1  # the good rule stays; the pods stay isolated
    assert len(got.problems) == 1 and got.problems[0].startswith("ingress[0] is left out") and words in got.problems[0]


def _blocks(n: int) -> list[dict[str, Any]]:
    """n peers, each an ipBlock making 64 prefixes (a /64 less one address)."""
    return [{"ipBlock": {"cidr": f"fd00:{i:x}::/64", "except": [f"fd00:{i:x}::1/128"]}} for i in range(n)]


def test_what_a_rule_and_a_policy_make_is_bounded_naming_the_limit() -> None:
    """A rule past RULE_LIMITS, or one that would take the policy's rules past POLICY_LIMITS, is left out and
    said with the limit; the rules before it stay."""
    pods: dict[str, Any] = {"podSelector": {}}
    too_many = parse(policy({"ingress": [{"from": [pods] * 257}, {"ports": [{"port": 1}] * 257}, {}]}))
    assert too_many.ingress is not None and len(too_many.ingress) == 1
    assert "257 peers: more than 256 peers in a rule" in too_many.problems[0]
    assert "257 ports: more than 256 ports in a rule" in too_many.problems[1]
    five = parse(policy({"ingress": [{"from": [pods] * 250}] * 3, "egress": [{"to": [pods] * 250}] * 2}))
    assert five.ingress is not None and five.egress is not None and (len(five.ingress), len(five.egress)) == (3, 1)
    assert five.problems == ("egress[1] is left out: 250 peers: more than 1024 peers in all of a policy's rules",)
    per_rule = RULE_LIMITS["prefixes"] // 64
    big = parse(policy({"ingress": [{"from": _blocks(per_rule + 1)}]}))
    assert big.problems == ("ingress[0] is left out: peer 64: ipBlock less its exceptions makes more than 4096 "
                            "prefixes in a rule",)  # fmt: skip
    full = parse(policy({"ingress": [{"from": _blocks(per_rule)}] * 2 + [{"from": _blocks(1)}]}))
    assert full.ingress is not None and len(full.ingress) == 2
    assert sum(len(p.block or ()) for r in full.ingress for p in r.peers) == POLICY_LIMITS["prefixes"]
    assert "more than 8192 prefixes in all of a policy's rules" in full.problems[0]


def test_a_policy_past_every_limit_works_out_no_more_than_its_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each peer's 128 exceptions cut a /8 into about 3,000 prefixes, so each rule is left out at its second
    peer: that cost 0.5 s of CPU a rule (the exceptions cut one by one over what was left, and a rule left out was
    worked out in full), 3.9 s for 8 rules on every node at each read. What is worked out in all now stops at the
    policy's limit, whatever the rules left out, each gap between exceptions summarized once."""
    made: list[Any] = []
    summarize = mnp.summarize_address_range  # type: ignore[attr-defined]

    def counted(first: Any, last: Any) -> Any:
        for net in summarize(first, last):
            made.append(net)
            yield net

    monkeypatch.setattr(mnp, "summarize_address_range", counted)
    peer = {"ipBlock": {"cidr": "10.0.0.0/8", "except": [f"10.{i}.{i}.{i}/32" for i in range(128)]}}
    got = parse(policy({"ingress": [{"from": [peer] * 2}] * 256, "egress": [{"to": [peer] * 2}] * 256}))
    assert got.ingress == () and got.egress == () and len(got.problems) == 512
    assert len(made) <= POLICY_LIMITS["prefixes"] + 4


def _watch() -> PolicyWatch:
    return PolicyWatch(None, None, 5.0, Metrics(), str, Backoff)


def pod(name: str, labels: Any = None, notes: Any = None, **meta: Any) -> dict[str, Any]:
    return {"metadata": {"namespace": "a", "name": name, "labels": labels or {}, "annotations": notes or {}, **meta}}


def status(*entries: Any) -> dict[str, str]:
    return {NETWORK_STATUS: json.dumps(list(entries))}


BAD_PODS: list[Any] = [
    pod("labels-list", labels=["app"]),
    pod("label-int", labels={"app": 1}),
    pod("notes-list", notes=["x"]),
    {"metadata": ["a", "b"]},
    {"spec": {}},
    "pod",
    {"metadata": {"namespace": ["a"], "name": "ns-list"}},
]


def test_a_pod_list_with_bad_objects_keeps_every_good_one_and_says_each_once() -> None:
    w = _watch()
    good = pod("web", {"app": "web"}, status({"name": "a/net", "ips": ["10.0.0.1"]}))
    pages = {"items": [*BAD_PODS, good], "metadata": {"resourceVersion": "7"}}

    class Core:
        def list_pod_for_all_namespaces(self, **kw: Any) -> Any:
            return type("R", (), {"data": json.dumps(pages).encode()})()

    follower = _Pods(w, "pods", Core(), "list_pod_for_all_namespaces")
    with counting() as ignored:
        assert follower._relist() == "7"
        assert ignored.by == {"Pod": len(BAD_PODS) - 3}  # a page holds objects only; three have no name alike
        follower._relist()  # listed again: said once
        assert ignored.by == {"Pod": len(BAD_PODS) - 3}
    assert [p.name for p in w.pods("a")] == ["web"] and w.pod("a", "web").addresses == {  # type: ignore[union-attr]
        "a/net": (ip_address("10.0.0.1"),)
    }


def test_a_watched_pod_that_turns_bad_is_known_no_more_and_the_watch_goes_on() -> None:
    w = _watch()
    pods = _Pods(w, "pods", None, "x")
    with counting() as ignored:
        pods.seen("ADDED", pod("web", {"app": "web"}))
        for bad in BAD_PODS:
            pods.seen("MODIFIED", bad)
        pods.seen("ADDED", pod("db", {"app": "db"}))
        assert sorted(p.name for p in w.pods("a")) == ["db", "web"]
        pods.seen("MODIFIED", pod("web", {"app": ["web"]}))
        assert [p.name for p in w.pods("a")] == ["db"] and ignored.by["Pod"] == len(BAD_PODS) - 3 + 1
        for rv in range(50):  # its writer's edits and its deletion: said once per object and reason
            pods.seen("MODIFIED", pod("db", ["x"], uid="u-db", resourceVersion=str(rv)))
        pods.seen("DELETED", pod("db", ["x"], uid="u-db", resourceVersion="51"))
        assert list(w.pods("a")) == [] and ignored.by["Pod"] == len(BAD_PODS) - 3 + 2


def test_namespaces_and_policies_with_bad_objects_keep_every_good_one() -> None:
    w = _watch()
    spaces = _Namespaces(w, "namespaces", None, "x")
    with counting() as ignored:
        spaces.listed([{"metadata": {"name": ["x"]}}, {"metadata": {"name": "b", "labels": {"t": 1}}}, "ns",
                       {"metadata": {"name": "a", "labels": {"t": "x"}}}])  # fmt: skip
        assert list(w.namespaces()) == ["a"] and ignored.by == {"Namespace": 2}  # the two without a name said once
        spaces.seen("MODIFIED", {"metadata": {"name": "a", "labels": ["t"]}})
        assert list(w.namespaces()) == []
        policies = _Policies(w, "policies", None, "x")
        bad = [policy({}, notes=["x"]), policy({"policyTypes": [["Ingress"]]}), {"metadata": 5}, None]
        w.on_change = lambda spaces: None
        w._start_others = lambda: None  # type: ignore[method-assign]  # no follower threads here
        policies.listed([*bad, policy({"podSelector": {}})])
        assert [p.ref for p in w.every_policy()] == ["a/p"] and ignored.by["MultiNetworkPolicy"] == 3
        policies.seen("MODIFIED", policy({"policyTypes": "x"}))
        assert list(w.every_policy()) == []


def test_a_network_status_gives_each_address_once_and_at_most_max_addresses_a_network() -> None:
    """A forged annotation listing thousands of addresses (as much as its 64 KiB bound holds), or one address
    thousands of times, never becomes thousands of set elements; more than the bound is said."""
    w = _watch()
    many = [f"10.{i // 250}.{i % 250}.1" for i in range(4000)]
    with counting() as ignored:
        forged = w.read_pod(pod("forged", notes=status({"name": "a/net", "ips": many})))
        repeated = w.read_pod(pod("repeated", notes=status(*[{"name": "a/net", "ips": ["10.0.0.1"]}] * 1000)))
        assert ignored.by == {"Pod": 1}
    assert forged is not None and len(forged.addresses["a/net"]) == MAX_ADDRESSES
    assert repeated is not None and repeated.addresses == {"a/net": (ip_address("10.0.0.1"),)}
    huge = w.read_pod(pod("huge", notes={NETWORK_STATUS: json.dumps([{"name": "n", "ips": ["10.0.0.1"] * 100_000}])}))
    assert huge is not None and huge.addresses == {}


@pytest.mark.parametrize(
    "note, words",
    [
        ('{"name": "n"}', "not a list"),
        ("[1, 2]", "network-status[0] is left out"),
        ('[{"name": ["n"], "ips": ["10.0.0.1"]}]', "network-status[0] is left out"),
        ('[{"name": "n", "ips": "10.0.0.1"}]', "network-status[0] is left out"),
        ('[{"name": "n", "ips": [167772161]}]', "167772161 is not an address"),
        ("[" * 40 + "]" * 40, "nested"),
    ],
)
def test_a_network_status_of_a_wrong_shape_is_said_and_gives_no_address(note: str, words: str) -> None:
    with counting() as ignored:
        got = _watch().read_pod(pod("web", {"app": "web"}, {NETWORK_STATUS: note}))
        assert got is not None and got.addresses == {} and ignored.by == {"Pod": 1}


def test_label_sets_shared_among_pods_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pods made and gone with labels of their own leave nothing behind past the bound."""
    monkeypatch.setattr(policywatch, "MAX_LABELSETS", 8)
    w = _watch()
    for i in range(50):
        w.read_pod(pod(f"p{i}", {"run": str(i)}))
    assert 0 < len(w._labelsets) <= 8


def test_every_kind_is_listed_a_page_at_a_time_and_a_page_is_garbage_before_the_next_is_asked() -> None:
    """The list asks for pages of policywatch.PAGE objects and follows the continue token; every page's policies
    are kept, and the resourceVersion watched from is the list's."""
    w = _watch()
    w.on_change = lambda spaces: None
    w._start_others = lambda: None  # type: ignore[method-assign]  # no follower threads here
    docs = [
        {"items": [_named(f"p{i}") for i in range(3)], "metadata": {"resourceVersion": "9", "continue": "t1"}},
        {"items": [_named("p3"), {"metadata": 5}], "metadata": {"resourceVersion": "9"}},
    ]
    asked: list[dict[str, Any]] = []

    class Custom:
        def list_cluster_custom_object(self, *args: Any, **kw: Any) -> Any:
            asked.append(kw)
            return type("R", (), {"data": json.dumps(docs[len(asked) - 1]).encode()})()

    follower = _Policies(w, "policies", Custom(), "list_cluster_custom_object", "g", "v", "p")
    with counting():
        assert follower._relist() == "9"
    assert [(kw["limit"], kw["_continue"]) for kw in asked] == [(policywatch.PAGE, None), (policywatch.PAGE, "t1")]
    assert sorted(p.name for p in w.every_policy()) == ["p0", "p1", "p2", "p3"]


def _named(name: str, ns: str = "a", peer: Any = None) -> dict[str, Any]:
    obj = policy({"podSelector": {"matchLabels": {"app": "db"}},
                  "ingress": [{"from": [peer or {"podSelector": {"matchLabels": {"role": "client"}}}],
                               "ports": [{"port": 80}]}]})  # fmt: skip
    obj["metadata"] = {**obj["metadata"], "name": name, "namespace": ns}
    return obj


def test_equal_parts_of_policies_are_one_object_but_a_rule_is_its_policys_own() -> None:
    """Selectors, peers, ports and prefixes equal across policies are kept once; a Rule never is, since
    resolve.py keeps a rule's addresses by its object and a podSelector alone picks in its own namespace."""
    block = {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.9.0.0/16"]}}
    a, b, c = parse(_named("x")), parse(_named("y", ns="other")), parse(_named("z", peer=block))
    d = parse(_named("w", peer=block))
    assert a.pods is b.pods and a.ingress and b.ingress and c.ingress and d.ingress
    assert a.ingress[0].peers is b.ingress[0].peers and a.ingress[0].ports is b.ingress[0].ports
    assert a.ingress[0] == b.ingress[0] and a.ingress[0] is not b.ingress[0]
    assert c.ingress[0].peers[0].block is d.ingress[0].peers[0].block and len(c.ingress[0].peers[0].block or ()) > 1
    assert (
        not hasattr(a, "__dict__")
        and not hasattr(a.pods, "__dict__")
        and not hasattr(a.pods.requirements[0], "__dict__")
    )


@pytest.mark.parametrize(
    "note, words",
    [
        ("a/b/c", "'a/b/c' is not a network's"),
        ("n, ,m", "'' is not a network's"),
        ("n,", "'' is not a network's"),
        ("ns /n", "'ns /n' is not a network's"),
        ("Team/N", "is not a network's"),
        ("ñet", "is not a network's"),
        ("n." + "a" * 300, "is not a network's"),
        (",".join(["n"] * 65), "more than 64 networks"),
        ("x," * 50_000, "more than 64 networks"),
    ],
)
def test_a_policy_for_annotation_that_names_no_network_selects_nothing_saying_why(note: str, words: str) -> None:
    with pytest.raises(PolicyError, match=words) as e:
        parse(policy({}, notes={POLICY_FOR: note}))
    assert len(str(e.value)) < 200


def test_a_policy_for_annotation_of_64_names_with_spaces_is_read() -> None:
    """At most 64 networks, counted as written (a bare name is for two names network-status may give)."""
    got = parse(policy({}, notes={POLICY_FOR: " , ".join(f"n{i}" for i in range(64))}))
    assert len(got.networks) == 128 and {"a/n0", "n0", "a/n63", "n63"} <= set(got.networks)
    assert parse(policy({}, notes={POLICY_FOR: " b/n ,n,b/n "})).networks == ("b/n", "a/n", "n")


def test_a_policy_of_many_peers_across_a_big_cluster_looks_at_a_bounded_number_of_pods(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A tenant's policy of 2 rules of 256 peers, each the pods of every namespace with a label of its own: each
    peer's selector was matched against every pod of the cluster, 1M matches a round here (with 1,024 peers and
    30,000 pods, about 40 s of CPU at each sync of the node's rules, every other tenant's change waiting behind
    it, and inside the ADD of each pod it selects). Past MAX_LOOKS pods and namespaces its rules pick no pod,
    said once; another tenant's policy of the same round still picks its peers."""
    from netcomp.kube import labels
    from netcomp.policy import resolve
    from netcomp.policy.podrules import Allow
    from netcomp.policy.resolve import Interface, LocalPod, Peers, PodInfo, pod_rules
    from tests.lab.policyview import Cluster

    storage = Interface("net1", "a.storage", "a/storage")

    monkeypatch.setattr(resolve, "MAX_LOOKS", 20_000)
    matched = [0]
    matches = labels.Selector.matches

    def counted(self: labels.Selector, got: Any) -> bool:
        matched[0] += 1
        return matches(self, got)

    monkeypatch.setattr(labels.Selector, "matches", counted)
    many = [{"namespaceSelector": {}, "podSelector": {"matchExpressions": [{"key": f"k{j}", "operator": "Exists"}]}}
            for j in range(512)]  # fmt: skip
    net = {POLICY_FOR: "a/storage"}
    hostile = parse(policy({"podSelector": {}, "ingress": [{"from": many[:256]}, {"from": many[256:]}]}, net))
    clients = {"namespaceSelector": {}, "podSelector": {"matchLabels": {"role": "client"}}}
    honest = parse({"metadata": {"namespace": "b", "name": "q", "annotations": net},
                    "spec": {"podSelector": {}, "ingress": [{"from": [clients]}]}})  # fmt: skip
    pods = [PodInfo(f"n{i % 40}", f"p{i}", {"role": "client" if i == 7 else "x"},
                    {"a/storage": (ip_address(f"10.1.{i // 250}.{i % 250}"),)}) for i in range(2000)]  # fmt: skip
    cluster = Cluster([hostile, honest], {f"n{i}": {} for i in range(40)} | {"a": {}, "b": {}}, pods)
    with counting() as ignored:
        for _ in range(2):
            peers = Peers(cluster)
            web = PodInfo("a", "web", {}, {})
            assert pod_rules(LocalPod(web, (storage,)), peers).rules.interfaces[0].ingress == ()
            assert matched[0] <= 20_000 + 100
            other = PodInfo("b", "db", {}, {})
            assert pod_rules(LocalPod(other, (storage,)), peers).rules.interfaces[0].ingress == (
                Allow((ipaddress.ip_network("10.1.0.7/32"),)),
            )
            matched[0] = 0
        assert ignored.by == {"MultiNetworkPolicy": 1}


def _in(n: int, key: str = "k") -> dict[str, Any]:
    return {"matchExpressions": [{"key": key, "operator": "In", "values": [f"v{i}" for i in range(n)]}]}


def test_the_values_of_a_policys_selectors_are_bounded() -> None:
    """A selector's In holds any number of values (the API server bounds only the object's size): one policy of
    250,000 values (2.4 MB of JSON) kept about 21 MB on every node, a string and a set slot each. A rule whose
    selectors hold more than RULE_LIMITS' values, or would take the policy's past POLICY_LIMITS', is left out
    and said; a podSelector past the policy's selects nothing."""
    per_rule = RULE_LIMITS["values"]
    big = parse(policy({"ingress": [{"from": [{"podSelector": _in(per_rule + 1)}]}, {}]}))
    assert big.ingress is not None and len(big.ingress) == 1
    assert big.problems == (f"ingress[0] is left out: peer 0: its selectors hold {per_rule + 1} values: more than "
                            f"{per_rule} values in a rule",)  # fmt: skip
    both = {"podSelector": _in(per_rule // 2), "namespaceSelector": _in(per_rule // 2 + 1, "t")}
    assert "more than 1024 values in a rule" in parse(policy({"ingress": [{"from": [both]}]})).problems[0]
    rules = [{"to": [{"podSelector": _in(per_rule)}]}] * (POLICY_LIMITS["values"] // per_rule + 1)
    full = parse(policy({"egress": rules}))
    assert full.egress is not None and len(full.egress) == POLICY_LIMITS["values"] // per_rule
    assert full.problems[-1].endswith(f"more than {POLICY_LIMITS['values']} values in all of a policy's rules")
    with pytest.raises(PolicyError, match=f"its podSelector holds more than {POLICY_LIMITS['values']} values"):
        parse(policy({"podSelector": _in(250_000)}))


def test_the_parts_kept_for_sharing_are_bounded_by_what_they_hold_not_by_how_many() -> None:
    """Equal parts of policies are kept once, and forgotten all at once past a bound. The bound counted parts,
    and a part can be an ipBlock of 4096 prefixes: a tenant editing one policy 50 times, new ipBlocks each time,
    left 409,600 prefixes (91 MB) kept on every node after the policy was gone, and up to 16,384 such parts. The
    bound now weighs what a part holds (prefixes, a selector's values, a tuple's items)."""
    mnp._SHARED.clear()
    for edit in range(50):
        blocks = [{"ipBlock": {"cidr": f"fd{edit:02x}:{j}:{i:x}::/64", "except": [f"fd{edit:02x}:{j}:{i:x}::1/128"]}}
                  for j in range(2) for i in range(64)]  # fmt: skip
        got = parse(policy({"podSelector": {}, "ingress": [{"from": blocks[:64]}, {"from": blocks[64:]}]}))
        assert got.ingress is not None and len(got.ingress) == 2 and not got.problems
    kept = sum(len(v) if isinstance(v, tuple) else 1 for v in mnp._SHARED.values())
    assert kept <= mnp.MAX_SHARED


def test_the_ipblocks_of_the_policies_selecting_one_pod_are_bounded_in_all(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each policy is bounded, but not how many select a pod: ten at their limits made a table nft took seconds to
    write, with the node's other pods' changes waiting. Past MAX_POD_PREFIXES in all (policies in the order of
    their names), a policy still isolates the pod but lets nothing through there, said once; a policy with no
    ipBlock after it still lets through."""
    from netcomp.policy import resolve
    from netcomp.policy.podrules import Allow
    from netcomp.policy.resolve import Interface, LocalPod, PodInfo, pod_rules
    from tests.lab.policyview import Cluster

    monkeypatch.setattr(resolve, "MAX_POD_PREFIXES", 3)
    net = {POLICY_FOR: "a/storage"}

    def blocks(name: str, *cidrs: str, direction: str = "ingress") -> mnp.Policy:
        key = "from" if direction == "ingress" else "to"
        spec = {"podSelector": {}, "policyTypes": [direction.title()],
                direction: [{key: [{"ipBlock": {"cidr": c}} for c in cidrs]}]}  # fmt: skip
        return parse({"metadata": {"namespace": "a", "name": name, "annotations": net}, "spec": spec})

    first = blocks("p1", "10.1.0.0/24", "10.2.0.0/24")
    over = blocks("p2", "10.3.0.0/24", "10.4.0.0/24", direction="egress")
    after = blocks("p3")  # no ipBlock: from anyone
    assert (first.prefixes, over.prefixes, after.prefixes) == (2, 2, 0)
    cluster = Cluster([after, over, first], {"a": {}})
    web = LocalPod(PodInfo("a", "web", {}, {}), (Interface("net1", "a.storage", "a/storage"),))
    with counting() as ignored:
        for _ in range(2):
            (iface,) = pod_rules(web, cluster).rules.interfaces
            assert iface.ingress == (
                Allow((ipaddress.ip_network("10.1.0.0/24"), ipaddress.ip_network("10.2.0.0/24"))),
                Allow(None),
            )
            assert iface.egress == ()  # p2's direction stays isolated, with nothing let through
            assert iface.policies == ("a/p1", "a/p2", "a/p3")
        assert ignored.by == {"MultiNetworkPolicy": 1}
