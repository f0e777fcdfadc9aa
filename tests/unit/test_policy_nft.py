"""The nftables document a pod's rules come to (netcomp.policy.nft.document): one transaction that replaces the
table whole, chains only for isolated directions, what every interface needs before the policies, peers in
sets per family, ports per protocol, a counted drop last; the same rules give the same bytes. That nft takes it
and the packets obey it is tests/integration/test_policy_nft.py's."""

from __future__ import annotations

import json
import random
from ipaddress import ip_network
from typing import Any

import pytest

from netcomp.errors import HostError
from netcomp.policy import nft
from netcomp.policy.podrules import Allow, InterfaceRules, PodRules, Ports


def cmds(doc: dict[str, Any], verb: str, kind: str) -> list[dict[str, Any]]:
    return [c[verb][kind] for c in doc["nftables"] if verb in c and kind in c[verb]]


def rules(doc: dict[str, Any], chain: str) -> list[list[dict[str, Any]]]:
    return [r["expr"] for r in cmds(doc, "add", "rule") if r["chain"] == chain]


def nets(*texts: str) -> tuple[Any, ...]:
    return tuple(ip_network(t) for t in texts)


def iface(ifname: str = "net1", ingress: Any = None, egress: Any = None, policies: tuple[str, ...] = ()) -> Any:
    return InterfaceRules(ifname, "storage", ingress, egress, policies)


def match(left: dict[str, Any], right: Any, op: str = "==") -> dict[str, Any]:
    return {"match": {"op": op, "left": left, "right": right}}


def pay(protocol: str, field: str) -> dict[str, Any]:
    return {"payload": {"protocol": protocol, "field": field}}


def meta(key: str) -> dict[str, Any]:
    return {"meta": {"key": key}}


TABLE = {"family": "inet", "name": "netcomp"}
NEEDS = 6  # rules before the first Allow: replies, ND, MLD, invalid dropped, DHCPv4, DHCPv6


def test_no_rules_remove_the_table_whether_or_not_it_exists() -> None:
    doc = nft.document(PodRules())
    assert doc["nftables"][1:] == [{"add": {"table": TABLE}}, {"delete": {"table": TABLE}}]


def test_rules_replace_the_table_whole_in_one_transaction() -> None:
    doc = nft.document(PodRules((iface(ingress=()),)))
    assert doc["nftables"][1:4] == [{"add": {"table": TABLE}}, {"delete": {"table": TABLE}}, {"add": {"table": TABLE}}]


def test_only_isolated_directions_get_chains_and_each_interface_its_own() -> None:
    doc = nft.document(PodRules((iface("net1", ingress=()), iface("net2", egress=()), iface("net3", (), ()))))
    chains = {c["name"]: c for c in cmds(doc, "add", "chain")}
    assert set(chains) == {"input", "output", "in_net1", "out_net2", "in_net3", "out_net3"}
    assert chains["input"] | {"table": "", "family": ""} == {
        "family": "",
        "table": "",
        "name": "input",
        "type": "filter",
        "hook": "input",
        "prio": 0,
        "policy": "accept",
    }
    assert chains["output"]["hook"] == "output" and chains["output"]["policy"] == "accept"
    dispatch = [
        (e[0]["match"]["left"]["meta"]["key"], e[0]["match"]["right"], e[1]["jump"]["target"])
        for chain in ("input", "output")
        for e in rules(doc, chain)
    ]
    assert dispatch == [
        ("iifname", "net1", "in_net1"),
        ("iifname", "net3", "in_net3"),
        ("oifname", "net2", "out_net2"),
        ("oifname", "net3", "out_net3"),
    ]
    assert {c["name"] for c in cmds(doc, "add", "counter")} == {"in_net1", "out_net2", "in_net3", "out_net3"}


def test_an_isolated_chain_lets_replies_and_what_every_interface_needs_pass_and_counts_its_drops() -> None:
    doc = nft.document(PodRules((iface(ingress=(), egress=()),)))
    for chain, nd, dhcp in (("in_net1", "nd-router-advert", (67, 68)), ("out_net1", "nd-router-solicit", (68, 67))):
        body = rules(doc, chain)
        assert body[0] == [match({"ct": {"key": "state"}}, ["established", "related"], op="in"), {"accept": None}]
        assert nd in body[1][0]["match"]["right"]["set"] and body[1][1]["match"]["right"] == 255
        assert body[2][1]["match"]["right"] == 1  # MLD: hop limit 1
        assert body[3] == [match({"ct": {"key": "state"}}, ["invalid"], op="in"), {"drop": None}]
        assert (body[4][1]["match"]["right"], body[4][2]["match"]["right"]) == dhcp
        assert body[-1] == [{"counter": chain}, {"drop": None}]
        assert len(body) == NEEDS + 1  # nothing is allowed: no rule between DHCPv6 and the drop


def test_peers_become_sets_per_family_collapsed_and_sorted() -> None:
    peers = nets("10.1.0.0/24", "10.0.0.7/32", "10.1.0.128/25", "fd00::/64", "10.0.0.6/31")
    doc = nft.document(PodRules((iface(ingress=(Allow(peers),)),)))
    sets = {s["name"]: s for s in cmds(doc, "add", "set")}
    assert sets["in_net1_0_ip"]["type"] == "ipv4_addr" and sets["in_net1_0_ip"]["flags"] == ["interval"]
    assert sets["in_net1_0_ip"]["elem"] == [
        {"prefix": {"addr": "10.0.0.6", "len": 31}},
        {"prefix": {"addr": "10.1.0.0", "len": 24}},
    ]
    assert sets["in_net1_0_ip6"]["elem"] == [{"prefix": {"addr": "fd00::", "len": 64}}]
    allowed = rules(doc, "in_net1")[NEEDS:-1]
    assert allowed == [
        [match(pay("ip", "saddr"), "@in_net1_0_ip"), {"accept": None}],
        [match(pay("ip6", "saddr"), "@in_net1_0_ip6"), {"accept": None}],
    ]


def test_egress_matches_the_destination_and_a_single_address_is_no_prefix() -> None:
    doc = nft.document(PodRules((iface(egress=(Allow(nets("10.0.0.9/32")),)),)))
    assert cmds(doc, "add", "set")[0]["elem"] == ["10.0.0.9"]
    assert rules(doc, "out_net1")[NEEDS][0] == match(pay("ip", "daddr"), "@out_net1_0_ip")


def test_a_set_of_host_addresses_only_is_a_plain_set_and_one_with_a_prefix_an_interval_set() -> None:
    doc = nft.document(PodRules((iface(ingress=(Allow(nets("10.0.0.9/32", "10.0.0.3/32", "fd00::/64")),)),)))
    sets = {s["name"]: s for s in cmds(doc, "add", "set")}
    assert sets["in_net1_0_ip"]["elem"] == ["10.0.0.3", "10.0.0.9"] and "flags" not in sets["in_net1_0_ip"]
    assert sets["in_net1_0_ip6"]["flags"] == ["interval"]


def test_ports_grouped_per_protocol_ranges_merged() -> None:
    ports = (Ports("tcp", 8050, 9000), Ports("udp", 53, 53), Ports("tcp", 80, 80), Ports("tcp", 8000, 8080))
    doc = nft.document(PodRules((iface(ingress=(Allow(None, ports),)),)))
    assert rules(doc, "in_net1")[NEEDS:-1] == [
        [
            match(meta("l4proto"), "tcp"),
            match(pay("th", "dport"), {"set": [80, {"range": [8000, 9000]}]}),
            {"accept": None},
        ],
        [match(meta("l4proto"), "udp"), match(pay("th", "dport"), 53), {"accept": None}],
    ]
    assert cmds(doc, "add", "set") == []  # any peer: no address match


def test_an_allow_of_no_peers_lets_nothing_through_and_keeps_the_others_numbers() -> None:
    doc = nft.document(PodRules((iface(ingress=(Allow(()), Allow(nets("10.0.0.0/8")), Allow(None))),)))
    assert [s["name"] for s in cmds(doc, "add", "set")] == ["in_net1_1_ip"]
    assert rules(doc, "in_net1")[NEEDS:-1] == [
        [match(pay("ip", "saddr"), "@in_net1_1_ip"), {"accept": None}],
        [{"accept": None}],
    ]


def test_the_same_rules_give_the_same_bytes_whatever_the_order_of_peers_and_ports() -> None:
    peers = list(nets("10.0.0.0/24", "10.2.0.1/32", "fd00::1/128", "192.168.0.0/16"))
    ports = [Ports("tcp", 1, 10), Ports("udp", 5, 5), Ports("sctp", 9, 9)]
    texts = set()
    for seed in range(5):
        random.Random(seed).shuffle(peers)
        random.Random(seed).shuffle(ports)
        r = PodRules((iface(ingress=(Allow(tuple(peers), tuple(ports)),), policies=("a/p",)),))
        texts.add(json.dumps(nft.document(r)))
    assert len(texts) == 1


def test_the_dispatch_rule_names_the_network_and_policies_in_a_bounded_comment() -> None:
    doc = nft.document(PodRules((iface(ingress=(), policies=("team-a/web", "team-a/db")),)))
    assert cmds(doc, "add", "rule")[0]["comment"] == "storage: team-a/web, team-a/db"
    many = tuple(f"team-ä/policy-{i}" for i in range(40))
    comment = cmds(nft.document(PodRules((iface(ingress=(), policies=many),))), "add", "rule")[0]["comment"]
    assert len(comment.encode()) <= 127 and comment.startswith("storage: team-ä/policy-0,") and comment.endswith("...")


def test_an_interface_name_nft_reads_as_a_wildcard_is_escaped_where_it_is_matched_and_jumped_to() -> None:
    """A name ending in `*` (Linux takes it, and so does a pod's annotation) is a wildcard to nft unless escaped;
    the chain's own name stays the name. One nft cannot say exactly is refused (nft.py's _exactly)."""
    doc = nft.document(PodRules((iface("n*", ingress=()),)))
    assert rules(doc, "input") == [[match(meta("iifname"), "n\\*"), {"jump": {"target": "in_n\\*"}}]]
    assert rules(doc, "in_n*")[-1] == [{"counter": "in_n\\*"}, {"drop": None}]
    assert [c["name"] for c in cmds(doc, "add", "chain")] == ["input", "in_n*"]
    for name in ("@x", "a\\*"):
        with pytest.raises(HostError, match="cannot be matched by nftables exactly"):
            nft.document(PodRules((iface(name, ingress=()),)))


def test_what_is_kept_of_sets_and_documents_is_bounded_by_their_size() -> None:
    """The elements of sets of peers, and the documents written, are kept for the pods that share them, and
    dropped all at once past a bound. The bounds counted sets (64) and documents (32), whatever their size: a
    tenant's 32 policies of 8,192 prefixes, each selecting a pod of the node, kept 126 MB in these caches on the
    node. They weigh elements and bytes now."""
    nft._ELEMENTS.clear()
    nft._DOCUMENTS.clear()
    for n in range(20):
        peers = tuple(ip_network(f"fd{n:02x}:{i:x}::/64") for i in range(4096))
        with pytest.raises(HostError, match="nft not found"):  # the document is made and kept before nft is run
            nft.apply("/proc/self/ns/net", PodRules((iface(ingress=(Allow(peers),)),)), nft="/nonexistent/nft")
    assert sum(len(v4) + len(v6) for _, (v4, v6) in nft._ELEMENTS.values()) <= nft.ELEMENTS_KEPT
    assert sum(map(len, nft._DOCUMENTS.values())) <= nft.DOCUMENTS_KEPT
