"""MultiNetworkPolicy read (policy/mnp.py) and resolved for one pod (policy/resolve.py): NetworkPolicy's semantics,
per network. The cluster is a plain in-memory View (the interface resolve.py reads the cluster through), not a
stand-in for the API server: what the daemon's view holds is tested against the real one elsewhere."""

from __future__ import annotations

import ipaddress
from ipaddress import ip_address, ip_network
from typing import Any

import pytest

from netcomp.policy.mnp import POLICY_FOR, Policy, PolicyError, parse
from netcomp.policy.podrules import Allow, Ports
from netcomp.policy.resolve import Interface, LocalPod, Peers, PodInfo, pod_rules, touched
from tests.lab.policyview import Cluster


def policy(spec: dict[str, Any], ns: str = "a", name: str = "p", net: str | None = "storage") -> Policy:
    notes = {POLICY_FOR: net} if net is not None else {}
    return parse({"metadata": {"namespace": ns, "name": name, "annotations": notes}, "spec": spec})


def peer(ns: str, name: str, labels: dict[str, str], *addrs: str, net: str = "a/storage", **ports: Any) -> PodInfo:
    return PodInfo(ns, name, labels, {net: tuple(ip_address(a) for a in addrs)}, ports or None)


STORAGE = Interface("net1", "a.storage", "a/storage")
OTHER = Interface("net2", "a.backup", "a/backup")
WEB = PodInfo("a", "web", {"app": "web"}, {}, {"http": (("tcp", 8080),)})


def rules(cluster: Cluster, *ifaces: Interface, pod: PodInfo = WEB) -> Any:
    return pod_rules(LocalPod(pod, ifaces or (STORAGE,)), cluster).rules


def nets(*texts: str) -> tuple[Any, ...]:
    return tuple(ip_network(t) for t in texts)


def test_deny_all_ingress_isolates_only_the_networks_it_is_for() -> None:
    c = Cluster([policy({"podSelector": {}, "policyTypes": ["Ingress"]})])
    (one,) = rules(c, STORAGE, OTHER).interfaces
    assert (one.ifname, one.ingress, one.egress, one.policies) == ("net1", (), None, ("a/p",))


def test_policy_types_default_as_network_policy_and_an_unselected_pod_is_open() -> None:
    c = Cluster([policy({"podSelector": {"matchLabels": {"app": "db"}}, "egress": [{}]})])
    assert not rules(c)  # web is not selected: no table at all
    p = policy({"podSelector": {}, "egress": [{}]})
    assert p.ingress == () and p.egress is not None  # Ingress always, Egress because it has egress rules


def test_a_pod_selector_alone_picks_in_the_policys_namespace_only() -> None:
    c = Cluster(
        [policy({"podSelector": {}, "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}]}]})],
        {"a": {}, "b": {}},
        [peer("a", "c1", {"role": "client"}, "10.0.0.5"), peer("b", "c2", {"role": "client"}, "10.0.0.6")],
    )
    assert rules(c).interfaces[0].ingress == (Allow(nets("10.0.0.5/32")),)


def test_namespace_selector_and_both_together() -> None:
    spaces = {"a": {"team": "x"}, "b": {"team": "y"}, "c": {"team": "y"}}
    pods = [
        peer("b", "b1", {"role": "client"}, "10.0.0.1"),
        peer("c", "c1", {"role": "server"}, "10.0.0.2", "fd00::2"),
        peer("a", "a1", {"role": "client"}, "10.0.0.3"),
    ]
    only_ns = {"namespaceSelector": {"matchLabels": {"team": "y"}}}
    both = {**only_ns, "podSelector": {"matchLabels": {"role": "client"}}}
    c = Cluster([policy({"podSelector": {}, "ingress": [{"from": [only_ns]}]})], spaces, pods)
    assert rules(c).interfaces[0].ingress == (Allow(nets("10.0.0.1/32", "10.0.0.2/32", "fd00::2/128")),)
    c.policies_ = [policy({"podSelector": {}, "ingress": [{"from": [both]}]})]
    assert rules(c).interfaces[0].ingress == (Allow(nets("10.0.0.1/32")),)


def test_peers_are_their_addresses_on_the_same_network_only() -> None:
    p = PodInfo("a", "c", {}, {"a/storage": (ip_address("10.0.0.9"),), "a/backup": (ip_address("10.9.9.9"),)})
    c = Cluster([policy({"podSelector": {}, "ingress": [{"from": [{"podSelector": {}}]}]})], {"a": {}}, [p])
    assert rules(c).interfaces[0].ingress == (Allow(nets("10.0.0.9/32")),)


def test_an_ip_block_less_its_exceptions() -> None:
    block = {"ipBlock": {"cidr": "10.1.0.0/24", "except": ["10.1.0.128/25"]}}
    c = Cluster([policy({"podSelector": {}, "ingress": [{"from": [block]}]})])
    assert rules(c).interfaces[0].ingress == (Allow(nets("10.1.0.0/25")),)


def test_ports_numbers_ranges_protocols_and_the_pods_own_named_port() -> None:
    ports = [{"port": 80}, {"protocol": "UDP", "port": 5000, "endPort": 5010}, {"port": "http"}, {"protocol": "SCTP"}]
    c = Cluster([policy({"podSelector": {}, "ingress": [{"ports": ports}]})])
    assert rules(c).interfaces[0].ingress == (
        Allow(
            None, (Ports("sctp", 1, 65535), Ports("tcp", 80, 80), Ports("tcp", 8080, 8080), Ports("udp", 5000, 5010))
        ),
    )


def test_a_named_port_the_pod_lacks_lets_nothing_through() -> None:
    c = Cluster([policy({"podSelector": {}, "ingress": [{"ports": [{"port": "metrics"}]}]})])
    assert rules(c).interfaces[0].ingress == ()  # isolated, and nothing allowed


def test_egress_to_a_named_port_is_each_destination_pods_own() -> None:
    pods = [
        peer("a", "db1", {"app": "db"}, "10.0.0.1", sql=(("tcp", 5432),)),
        peer("a", "db2", {"app": "db"}, "10.0.0.2", sql=(("tcp", 5433),)),
        peer("a", "db3", {"app": "db"}, "10.0.0.3"),  # no such port: not reachable through this rule
    ]
    to = [{"podSelector": {"matchLabels": {"app": "db"}}}]
    egress = [{"to": to, "ports": [{"port": "sql"}]}]
    c = Cluster([policy({"podSelector": {}, "policyTypes": ["Egress"], "egress": egress})], {"a": {}}, pods)
    (one,) = rules(c).interfaces
    assert one.ingress is None and one.egress == (
        Allow(nets("10.0.0.1/32"), (Ports("tcp", 5432, 5432),)),
        Allow(nets("10.0.0.2/32"), (Ports("tcp", 5433, 5433),)),
    )


def test_two_policies_add_up() -> None:
    c = Cluster(
        [
            policy({"podSelector": {}, "ingress": [{"ports": [{"port": 80}]}]}, name="web"),
            policy(
                {"podSelector": {"matchLabels": {"app": "web"}}, "ingress": [{"ports": [{"port": 443}]}]}, name="tls"
            ),
        ]
    )
    (one,) = rules(c).interfaces  # in the order of the policies' names, whatever the order they come in
    assert one.ingress == (Allow(None, (Ports("tcp", 443, 443),)), Allow(None, (Ports("tcp", 80, 80),)))
    assert one.policies == ("a/tls", "a/web")


def test_a_bare_network_name_is_in_the_policys_namespace_and_a_native_network_is_named_bare() -> None:
    c = Cluster([policy({"podSelector": {}}, net="storage"), policy({"podSelector": {}}, name="q", net="b/storage")])
    assert [i.policies for i in rules(c).interfaces] == [("a/p",)]
    mgmt = Interface("eth0", "mgmt", "mgmt")
    c = Cluster([policy({"podSelector": {}}, net="mgmt")])
    assert [i.ifname for i in rules(c, mgmt).interfaces] == ["eth0"]


def test_an_interface_that_is_no_netdev_is_said_not_enforced() -> None:
    vfio = Interface("net1", "a.storage", "a/storage", kernel=False)
    c = Cluster([policy({"podSelector": {}})])
    out = pod_rules(LocalPod(WEB, (vfio,)), c)
    assert not out.rules and out.unenforced == [(vfio, ("a/p",))]


def test_a_rule_that_cannot_be_read_is_left_out_and_the_pod_stays_isolated() -> None:
    outside = {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["11.0.0.0/8"]}}
    p = policy(
        {"podSelector": {}, "ingress": [{"from": [outside]}, {"ports": [{"port": 70000}]}, {"ports": [{"port": 22}]}]}
    )
    assert len(p.problems) == 2 and "except 11.0.0.0/8" in p.problems[0] and "70000" in p.problems[1]
    assert rules(Cluster([p])).interfaces[0].ingress == (Allow(None, (Ports("tcp", 22, 22),)),)


@pytest.mark.parametrize(
    "spec, net, words",
    [
        ({"podSelector": {}}, None, "no k8s.v1.cni.cncf.io/policy-for"),
        ({"podSelector": {}}, "a/b/c", "is not a network's"),
        ({"podSelector": {"matchExpressions": [{"key": "x", "operator": "Gt"}]}}, "n", "podSelector"),
        ({"podSelector": {}, "policyTypes": ["Both"]}, "n", "policyTypes"),
    ],
)
def test_a_policy_that_selects_nothing_says_why(spec: dict[str, Any], net: str | None, words: str) -> None:
    with pytest.raises(PolicyError, match=words):
        policy(spec, net=net)


def test_which_namespaces_a_change_touches() -> None:
    """A pod of namespace n (or n's labels) can change the rules of the namespaces whose policies have a peer that
    can pick in n: a podSelector alone in n's own policies, a namespace selector that matches n's labels (before or
    after an edit); an ipBlock or a selector that matches neither picks nothing there."""
    alone = policy({"podSelector": {}, "ingress": [{"from": [{"podSelector": {}}]}]}, ns="n", name="alone")
    by_ns = policy({"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"t": "x"}}}]}]},
                   ns="m", name="by-ns")  # fmt: skip
    block = policy({"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}]}, ns="k")
    every = [alone, by_ns, block]
    assert touched(every, "n", [{}]) == {"n"}
    assert touched(every, "n", [{}, {"t": "x"}]) == {"n", "m"}  # its label edited from none to t=x
    assert touched(every, "o", [{"t": "x"}]) == {"m"}
    assert touched(every, "o", [{"t": "y"}]) == set()


def test_one_round_resolves_a_rules_peers_once_for_every_pod_it_selects() -> None:
    """Two pods the same policy selects share the very tuple of peers (Peers resolves the rule once); the node's
    own pod counts with its records' addresses and the view's labels."""
    c = Cluster(
        [policy({"podSelector": {}, "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}]}]})],
        {"a": {}},
        [peer("a", "c1", {"role": "client"}, "10.0.0.5"), peer("a", "mine", {"role": "client"})],
    )
    own = {("a", "mine"): peer("a", "mine", {}, "10.0.0.7")}
    peers = Peers(c, own)
    one, two = (pod_rules(LocalPod(p, (STORAGE,)), peers).rules for p in (WEB, peer("a", "db", {"app": "db"})))
    assert one.interfaces[0].ingress == (Allow(nets("10.0.0.5/32", "10.0.0.7/32")),)
    assert one.interfaces[0].ingress[0].peers is two.interfaces[0].ingress[0].peers


def test_a_round_gives_the_last_rounds_tuple_of_peers_again_while_their_addresses_are_the_same() -> None:
    """Rules then compare with those in force by identity; a peer more makes a new tuple, and a round made
    without the one before resolves anew."""
    c = Cluster(
        [policy({"podSelector": {}, "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}]}]})],
        {"a": {}},
        [peer("a", "c1", {"role": "client"}, "10.0.0.5", "fd00::5")],
    )

    def allowed(peers: Peers) -> Any:
        return pod_rules(LocalPod(WEB, (STORAGE,)), peers).rules.interfaces[0].ingress[0].peers

    first = Peers(c)
    assert allowed(first) == nets("10.0.0.5/32", "fd00::5/128")
    again = Peers(c, before=first)
    assert allowed(again) is allowed(first)
    assert allowed(Peers(c)) == allowed(first) and allowed(Peers(c)) is not allowed(first)
    c.pods_.append(peer("a", "c2", {"role": "client"}, "10.0.0.4"))
    more = Peers(c, before=again)
    assert allowed(more) == nets("10.0.0.4/32", "10.0.0.5/32", "fd00::5/128")
    assert allowed(Peers(c, before=more)) is allowed(more)


def test_a_network_status_nested_too_deep_is_no_address_and_no_error() -> None:
    """A tenant's network-status of 30,000 `[` (under the 64 KiB bound) made json raise RecursionError, which
    stopped the node's list of pods for every policy: it is read as no address now, and a good one still is."""
    from netcomp.cluster.policywatch import _addresses

    assert _addresses("[" * 30000, None) == ({}, "its network-status gives it no address: nested too deeply")
    got, why = _addresses('[{"name": "n", "ips": ["10.0.0.1", "x"]}]', None)
    assert got == {"n": (ipaddress.ip_address("10.0.0.1"),)} and "'x' is not an address" in why


def test_an_ipblocks_exceptions_are_bounded_and_each_cuts_once() -> None:
    """A tenant's except list repeating one CIDR thousands of times cost seconds of CPU per parse on every node:
    over 128 exceptions the peer is refused; repeated or nested ones are taken once."""
    from netcomp.policy.mnp import _block, _Made

    many = {"cidr": "::/0", "except": ["::1/128"] * 2000}
    with pytest.raises(ValueError, match="at most 128"):
        _block(many, 0, _Made())
    once = _block({"cidr": "10.0.0.0/24", "except": ["10.0.0.128/25"]}, 0, _Made())
    again = _block(
        {"cidr": "10.0.0.0/24", "except": ["10.0.0.128/25", "10.0.0.130/31"] + ["10.0.0.128/25"] * 100}, 0, _Made()
    )
    assert again == once == (ipaddress.ip_network("10.0.0.0/25"),)


def test_a_network_named_with_a_namespace_is_a_definition_only_never_the_native_network_of_that_name() -> None:
    """`policy-for: b/storage` names the definition storage of namespace b: it isolated the pod's interface on the
    netcomp Network `storage` too (a bare name is the policy's namespace's definition or the native network)."""
    native = Interface("net3", "storage", "storage")
    c = Cluster([policy({"podSelector": {}}, name="q", net="b/storage"), policy({"podSelector": {}}, net="a/storage")])
    assert [(i.ifname, i.policies) for i in rules(c, STORAGE, native).interfaces] == [("net1", ("a/p",))]
    c = Cluster([policy({"podSelector": {}}, net="storage")])
    assert [i.ifname for i in rules(c, STORAGE, native).interfaces] == ["net1", "net3"]
