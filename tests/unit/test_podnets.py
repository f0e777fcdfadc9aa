"""What a pod asks for, as Multus reads it (pods/multus.py) and where each field goes before any plugin runs
(pods/asks.py), without an API server or a namespace: every field of a network selection element, both
annotation formats, every refusal naming the pod, the annotation and the item; which network a reference means
with namespaces and isolation; the default routes a default-route moves and how the results record them. The
same with a real API server and real plugins: tests/integration/test_multus.py."""

from __future__ import annotations

import ipaddress
import json
import re
from typing import Any

import pytest

from netcomp.errors import DelegateError
from netcomp.host.container import DefaultRoute, LinkState, PolicyRoutes
from netcomp.pods import asks, choice, multus
from netcomp.pods.multus import Ask, AskRules, parse_default, parse_networks, resolve
from netcomp.pods.naming import PodRef, display_name, resolve_node
from netcomp.records.record import Attachment

POD = PodRef("team-a", "web-0")
HEAD = "pod team-a/web-0: annotation k8s.v1.cni.cncf.io/networks"


def one(value: Any) -> Ask:
    got = parse_networks(json.dumps([value]), POD)
    assert len(got) == 1
    return got[0]


def refused(value: str, pod: PodRef = POD) -> DelegateError:
    with pytest.raises(DelegateError) as e:
        parse_networks(value, pod)
    assert e.value.code == 7
    return e.value


# ------------------------------------------------------------------------------------------------ parsing


def test_the_short_form_defaults_to_the_pods_namespace() -> None:
    got = parse_networks(" storage, other/backup@bk0 ,, ", POD)
    assert [(a.namespace, a.name, a.ifname) for a in got] == [("team-a", "storage", None), ("other", "backup", "bk0")]
    assert got[1].where == f"{HEAD}: item 1 ('other/backup@bk0')"
    assert parse_networks("  ", POD) == []


def test_every_field_of_a_selection_element() -> None:
    a = one(
        {
            "name": "storage",
            "namespace": "infra",
            "interface": "st0",
            "ips": ["10.10.0.50/24", "fd10::50"],
            "mac": "02-00-00-00-00-5A",
            "default-route": ["10.10.0.1"],
            "cni-args": {"vlan": 7},
            "portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}],
            "bandwidth": {"ingressRate": 1000000, "egressBurst": 5000},
            "deviceID": "0000:03:02.1",
            "infiniband-guid": "c2:11:22:33:44:55:66:77",
        }
    )
    assert (a.ref, a.ifname, a.mac) == ("infra/storage", "st0", "02:00:00:00:00:5a")
    assert a.ips == (ipaddress.ip_interface("10.10.0.50/24"), ipaddress.ip_interface("fd10::50"))
    assert a.prefixed == (True, False)
    assert a.gateways == (ipaddress.ip_address("10.10.0.1"),)
    assert a.cni_args == {"vlan": 7} and a.device_id == "0000:03:02.1"
    assert a.capabilities == {
        "portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}],
        "bandwidth": {"ingressRate": 1000000, "egressBurst": 5000},
        "infinibandGUID": "c2:11:22:33:44:55:66:77",
    }
    assert one({"name": "s", "interfaceRequest": "old0"}).ifname == "old0"  # Multus's pre-3.2 key
    assert one({"name": "s", "default-route": []}).gateways == ()
    assert one({"name": "s"}).gateways is None


@pytest.mark.parametrize(
    ("item", "why"),
    [
        ({"name": "s", "ipz": ["10.0.0.1"]}, "'ipz': not something netcomp can do"),
        ({"name": "s", "ipam-claim-reference": "Bad"}, "ipam-claim-reference 'Bad' is not an IPAMClaim's name"),
        ({"name": "Storage"}, "name must be the network's name, a DNS-1123 label"),
        ({"name": "s", "namespace": "a/b"}, "namespace 'a/b' is not a namespace's name"),
        ({"name": "s", "interface": "eth/1"}, "interface: invalid interface name 'eth/1'"),
        ({"name": "s", "interface": 5}, "interface must be a string"),
        ({"name": "s", "ips": "10.0.0.1"}, "ips must be a non-empty list"),
        ({"name": "s", "ips": ["10.0.0.300"]}, "ips[0]: '10.0.0.300' is not an IP address"),
        ({"name": "s", "ips": ["10.0.0.1", "10.0.0.2"]}, "at most one address of each family"),
        ({"name": "s", "mac": "02:00:00:00:00"}, "mac '02:00:00:00:00' is not a MAC address"),
        ({"name": "s", "mac": "03:00:00:00:00:01"}, "is a multicast address"),
        ({"name": "s", "default-route": "10.0.0.1"}, "default-route must be a list"),
        ({"name": "s", "default-route": ["gw"]}, "default-route[0]: 'gw' is not an IP address"),
        ({"name": "s", "cni-args": ["x"]}, "cni-args must be an object"),
        ({"name": "s", "portMappings": [{"hostPort": 80}]}, "portMappings[0]: containerPort is required"),
        ({"name": "s", "portMappings": [{"hostPort": 0, "containerPort": 1}]}, "hostPort 0 is not a port"),
        ({"name": "s", "portMappings": [{"hostPort": "80", "containerPort": 1}]}, "hostPort must be a int"),
        ({"name": "s", "bandwidth": {"ingressRate": -1}}, "bandwidth.ingressRate must be a whole number"),
        ({"name": "s", "bandwidth": {"rate": 1}}, "bandwidth must be an object of ingressRate"),
        ({"name": "s", "deviceID": ""}, "deviceID: '' is neither a PCI address"),
        ({"name": "s", "deviceID": "../../etc/passwd"}, "deviceID: '../../etc/passwd' is neither a PCI address"),
        ({"name": "s", "infiniband-guid": "02:00"}, "infiniband-guid '02:00' is not a GUID"),
    ],
)
def test_a_bad_field_names_the_pod_the_annotation_and_the_item(item: dict[str, Any], why: str) -> None:
    e = refused(json.dumps([{"name": "ok"}, item]))
    assert e.msg.startswith(f"{HEAD}: item 1"), e.msg
    assert why in e.msg, e.msg


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("[{", "is not JSON"),
        ('{"name": "a"}', "must be a JSON list"),
        ("[1]", "item 0: is not an object"),
        ("a b", "item 0 ('a b'): network name 'a b' is not a DNS-1123 label"),
        ("a/b/c", "is not [namespace/]name[@interface]"),
        ("a@eth/1", "interface: invalid interface name 'eth/1'"),
    ],
)
def test_a_bad_annotation_is_a_clear_cni_error(value: str, why: str) -> None:
    e = refused(value)
    assert e.msg.startswith(HEAD) and why in e.msg, e.msg


def test_the_same_mac_twice_and_two_default_routes_of_a_family() -> None:
    e = refused('[{"name": "a", "mac": "02:00:00:00:00:01"}, {"name": "b", "mac": "02:00:00:00:00:01"}]')
    assert e.msg == f"{HEAD}: item 1 ('b'): mac 02:00:00:00:00:01 is asked for twice (also by item 0 ('a'))"
    e = refused('[{"name": "a", "default-route": ["10.0.0.1"]}, {"name": "b", "default-route": ["10.1.0.1"]}]')
    assert "item 1 ('b'): default-route: a second IPv4 default route (also item 0 ('a'))" in e.msg
    e = refused('[{"name": "a", "default-route": []}, {"name": "b", "default-route": ["fd00::1"]}]')
    assert "item 0 ('a'): default-route [] (this network's own gateway) with another item's" in e.msg
    # One of each family, on two networks, is one default route per family: fine.
    got = parse_networks(
        '[{"name": "a", "default-route": ["10.0.0.1"]}, {"name": "b", "default-route": ["fd::1"]}]', POD
    )
    assert len(got) == 2


def test_the_default_network_annotation() -> None:
    a = parse_default("macvlan-conf", POD, "kube-system")
    assert (a.ref, a.where) == (
        "kube-system/macvlan-conf",
        f"pod {POD}: annotation v1.multus-cni.io/default-network: item 0 ('macvlan-conf')",
    )
    assert parse_default('[{"name": "x", "namespace": "team-a"}]', POD, "kube-system").ref == "team-a/x"
    with pytest.raises(DelegateError, match="names 2 networks; it takes exactly one"):
        parse_default("a,b", POD, "kube-system")


# ------------------------------------------------------------------------------------------------ which network


NETS = {
    "storage": {"netcomp": {"type": "macvlan"}},
    "team-a.fast": {"netcomp": {"type": "static", "namespace": "team-a"}},
    "team-b.fast": {"netcomp": {"type": "static", "namespace": "team-b"}},
    "default.shared": {"netcomp": {"type": "static", "namespace": "default"}},
    "team-b.only": {"netcomp": {"type": "static", "namespace": "team-b"}},
}


def test_a_reference_means_the_definition_of_its_namespace_else_the_node_wide_network() -> None:
    (fast, other, storage) = parse_networks("fast, team-b/fast, storage", POD)
    assert resolve(fast, POD, NETS, AskRules()) == "team-a.fast"
    assert resolve(other, POD, NETS, AskRules()) == "team-b.fast"  # two namespaces' "fast": two networks
    assert resolve(storage, POD, NETS, AskRules()) == "storage"  # netcomp's Networks are cluster-wide
    assert display_name("team-b.fast", NETS["team-b.fast"]) == "team-b/fast"
    assert display_name("storage", NETS["storage"]) == "storage"


def test_namespace_isolation_refuses_another_namespaces_definition_naming_both() -> None:
    iso = AskRules(isolation=True)
    other, shared, storage = parse_networks("team-b/fast, default/shared, team-b/storage", POD)
    with pytest.raises(DelegateError) as e:
        resolve(other, POD, NETS, iso)
    assert e.value.msg == (
        f"{HEAD}: item 0 ('team-b/fast'): namespace isolation: pod team-a/web-0 is in namespace 'team-a' and "
        "may not use team-b/fast of namespace 'team-b'"
    )
    assert "those of default" in e.value.details
    assert resolve(shared, POD, NETS, iso) == "default.shared"  # a global namespace
    assert resolve(storage, POD, NETS, iso) == "storage"  # node-wide, not a definition of team-b
    assert resolve(other, POD, NETS, AskRules(isolation=True, global_namespaces=frozenset({"team-b"}))) == "team-b.fast"
    # The default network annotation is not held to isolation (Multus's multusNamespace).
    assert resolve(parse_default("team-b/fast", POD, "kube-system"), POD, NETS, iso, isolated=False) == "team-b.fast"


def test_a_network_that_is_not_there_says_where_one_of_that_name_is() -> None:
    (only,) = parse_networks("only", POD)
    with pytest.raises(multus.NoNetwork) as e:
        resolve(only, POD, NETS, AskRules())
    assert "no network team-a/only: no NetworkAttachmentDefinition team-a/only and no Network 'only'" in e.value.msg
    assert e.value.details == "definitions of that name: team-b/only"


def test_node_level_references() -> None:
    assert resolve_node("storage", NETS) == "storage"
    assert resolve_node("team-b/only", NETS) == "team-b.only"
    assert resolve_node("only", NETS) == "team-b.only"  # one namespace has one of that name
    with pytest.raises(DelegateError, match="network 'fast' is ambiguous: team-a/fast, team-b/fast"):
        resolve_node("fast", NETS)
    with pytest.raises(DelegateError, match="network 'nope' is not compiled on this node"):
        resolve_node("nope", NETS)


# ------------------------------------------------------------------------------------------------ into the attachment


def att(conflist: dict[str, Any], network: str = "n", ifname: str = "net1", args: str = "") -> Attachment:
    return Attachment(network, ifname, conflist, None, args, {"portMappings": []})


HOST_LOCAL = {
    "cniVersion": "1.0.0",
    "name": "n",
    "plugins": [
        {"type": "macvlan", "master": "eth1", "ipam": {"type": "host-local", "subnet": "10.10.0.0/24"}},
        {"type": "tuning"},
    ],
    "netcomp": {"type": "macvlan"},
}


def test_ips_and_mac_go_where_the_plugins_read_them() -> None:
    a = att(HOST_LOCAL, args="K8S_POD_NAME=web-0")
    asks.prepare(a, one({"name": "n", "ips": ["10.10.0.50/24"], "mac": "02:00:00:00:00:50"}), [])
    assert a.conflist["plugins"][0]["args"] == {"cni": {"ips": ["10.10.0.50/24"]}}  # host-local's args.cni.ips
    assert "args" not in a.conflist["plugins"][1]
    assert a.args == "IgnoreUnknown=1;K8S_POD_NAME=web-0;MAC=02:00:00:00:00:50"
    assert HOST_LOCAL["plugins"][0].get("args") is None  # the compiled network itself is untouched

    declaring = {**HOST_LOCAL, "plugins": [{**HOST_LOCAL["plugins"][0], "capabilities": {"ips": True, "mac": True}}]}
    a = att(declaring)
    asks.prepare(a, one({"name": "n", "ips": ["10.10.0.50"], "mac": "02:00:00:00:00:50"}), [])
    assert a.capability_args == {"portMappings": [], "ips": ["10.10.0.50"], "mac": "02:00:00:00:00:50"}
    assert "args" not in a.conflist["plugins"][0] and a.args == ""  # one way only

    sriov = {"plugins": [{"type": "sriov", "deviceID": "0000:03:02.1"}], "netcomp": {"type": "sriov"}}
    a = att(sriov)
    asks.prepare(a, one({"name": "n", "mac": "02:00:00:00:00:51"}), [])
    assert a.conflist["plugins"][0]["mac"] == "02:00:00:00:00:51"


def test_cni_args_merge_into_every_plugins_args_cni() -> None:
    conf = {**HOST_LOCAL, "plugins": [{"type": "bridge", "args": {"cni": {"keep": 1}}}, {"type": "tuning"}]}
    a = att(conf)
    asks.prepare(a, one({"name": "n", "cni-args": {"vlan": 7}}), [])
    assert [p["args"] for p in a.conflist["plugins"]] == [{"cni": {"keep": 1, "vlan": 7}}, {"cni": {"vlan": 7}}]


def test_capabilities_reach_only_a_network_that_declares_them() -> None:
    ask = one({"name": "n", "portMappings": [{"hostPort": 8080, "containerPort": 80}], "bandwidth": {"egressRate": 9}})
    with pytest.raises(DelegateError) as e:
        asks.prepare(att(HOST_LOCAL), ask, [])
    assert e.value.msg == (
        f"{HEAD}: item 0 ('n'): portMappings: none of network n's plugins takes the 'portMappings' capability, so "
        "nothing would apply it"
    )
    conf = {
        **HOST_LOCAL,
        "plugins": [
            *HOST_LOCAL["plugins"],
            {"type": "portmap", "capabilities": {"portMappings": True}},
            {"type": "bandwidth", "capabilities": {"bandwidth": True}},
        ],
    }
    a = att(conf)
    asks.prepare(a, ask, [])
    assert a.capability_args["portMappings"] == [{"hostPort": 8080, "containerPort": 80}]
    assert a.capability_args["bandwidth"] == {"egressRate": 9}


@pytest.mark.parametrize(
    ("conf", "item", "why"),
    [
        (HOST_LOCAL, {"ips": ["10.99.0.5"]}, "ips: 10.99.0.5 is outside network n (10.10.0.0/24)"),
        (HOST_LOCAL, {"ips": ["10.10.0.5/16"]}, "ips: 10.10.0.5/16 has another prefix than network n's subnet"),
        (HOST_LOCAL, {"default-route": ["10.99.0.1"]}, "gateway 10.99.0.1 is outside network n (10.10.0.0/24)"),
        ({**HOST_LOCAL, "netcomp": {"type": "ipvlan"}}, {"mac": "02:00:00:00:00:01"}, "network n is ipvlan"),
        (HOST_LOCAL, {"deviceID": "0000:03:02.1"}, "deviceID: network n is not an SR-IOV network"),
        ({"plugins": [{"type": "bridge"}], "netcomp": {}}, {"ips": ["10.0.0.5"]}, "ips: network n has no IPAM"),
        ({"plugins": [{"type": "bridge", "args": []}], "netcomp": {}}, {"cni-args": {"a": 1}}, "args that are not"),
    ],
)
def test_what_cannot_apply_is_refused_before_any_plugin(conf: dict[str, Any], item: dict[str, Any], why: str) -> None:
    ask = one({"name": "n", **item})
    with pytest.raises(DelegateError) as e:
        a = att(conf)
        asks.prepare(a, ask, [])
        asks.check_gateways(a, ask)
    assert e.value.msg.startswith(f"{HEAD}: item 0 ('n'): ") and why in e.value.msg, e.value.msg


def test_an_address_or_mac_another_container_holds_is_refused() -> None:
    other = Attachment(
        "n",
        "net1",
        HOST_LOCAL,
        {
            "interfaces": [{"name": "net1", "mac": "02:00:00:00:00:50", "sandbox": "/x"}],
            "ips": [{"address": "10.10.0.50/24"}],
        },
    )
    with pytest.raises(DelegateError, match=re.escape("ips: 10.10.0.50 on network n is held by another container")):
        asks.prepare(att(HOST_LOCAL), one({"name": "n", "ips": ["10.10.0.50"]}), [other])
    with pytest.raises(
        DelegateError, match=re.escape("mac 02:00:00:00:00:50 on network n is held by another container")
    ):
        asks.prepare(att(HOST_LOCAL), one({"name": "n", "mac": "02:00:00:00:00:50"}), [other])
    asks.prepare(att(HOST_LOCAL, network="m"), one({"name": "n", "ips": ["10.10.0.50"]}), [other])  # another network


def test_what_the_plugins_gave_is_checked() -> None:
    ask = one({"name": "n", "ips": ["10.10.0.50/24"], "mac": "02:00:00:00:00:50"})
    a = att(HOST_LOCAL)
    asks.check(a, ask, LinkState("02:00:00:00:00:50", ("10.10.0.50/24",)))
    with pytest.raises(
        DelegateError, match=re.escape("plugins gave net1 the MAC 02:00:00:00:00:99, not 02:00:00:00:00:50")
    ):
        asks.check(a, ask, LinkState("02:00:00:00:00:99", ("10.10.0.50/24",)))
    with pytest.raises(DelegateError, match=re.escape("did not give net1 the address 10.10.0.50")):
        asks.check(a, ask, LinkState("02:00:00:00:00:50", ("10.10.0.7/24",)))
    with pytest.raises(DelegateError, match="left no interface net1"):
        asks.check(a, ask, None)


# ------------------------------------------------------------------------------------------------ default routes


def test_default_routes_move_to_the_network_asked_for_and_the_results_say_so() -> None:
    eth0 = Attachment(
        "mgmt",
        "eth0",
        {},
        {"ips": [], "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.0.1"}, {"dst": "::/0", "gw": "fd01::1"}]},
    )
    net1 = Attachment("n", "net1", HOST_LOCAL, {"ips": [], "routes": [{"dst": "10.20.0.0/16", "gw": "10.10.0.1"}]})
    ask = one({"name": "n", "default-route": ["10.10.0.1"]})
    moves = asks.routes([(eth0, None), (net1, ask)])
    assert moves == [DefaultRoute(4, "net1", "10.10.0.1")]
    asks.record_routes([eth0, net1], moves)
    assert eth0.result is not None and net1.result is not None
    assert eth0.result["routes"] == [{"dst": "::/0", "gw": "fd01::1"}]  # IPv6 untouched: not asked for
    assert net1.result["routes"] == [
        {"dst": "10.20.0.0/16", "gw": "10.10.0.1"},
        {"dst": "0.0.0.0/0", "gw": "10.10.0.1"},
    ]
    assert asks.gateways_of(net1) == ["10.10.0.1"] and asks.gateways_of(eth0) == ["fd01::1"]


def test_an_empty_default_route_keeps_the_networks_own() -> None:
    own = Attachment("n", "net1", HOST_LOCAL, {"routes": [{"dst": "0.0.0.0/0", "gw": "10.10.0.1"}]})
    assert asks.routes([(own, one({"name": "n", "default-route": []}))]) == [DefaultRoute(4, "net1", None)]
    bare = Attachment("n", "net1", HOST_LOCAL, {"routes": []})
    with pytest.raises(DelegateError, match=r"default-route \[\]: network n gave no default route of its own"):
        asks.routes([(bare, one({"name": "n", "default-route": []}))])


# ------------------------------------------------------------------------------------------------ DANM

DANM = "danm.k8s.io/interfaces"
DHEAD = f"pod team-a/web-0: annotation {DANM}"
DNETS: dict[str, dict[str, Any]] = {
    "team-a.management": {"netcomp": {"type": "ipvlan", "danmKind": "DanmNet", "namespace": "team-a",
                                      "interfacePrefix": "mgmt", "routeTable": 10,
                                      "pool": {"type": "cluster", "ranges": [[{"subnet": "10.1.0.0/24"}]]}}},
    "team-b.management": {"netcomp": {"type": "ipvlan", "danmKind": "DanmNet", "namespace": "team-b"}},
    "team-a.internal": {"netcomp": {"type": "macvlan", "danmKind": "TenantNetwork", "namespace": "team-a",
                                    "interfacePrefix": "eth"}},
    "external": {"netcomp": {"type": "ipvlan", "danmKind": "ClusterNetwork", "interfacePrefix": "ext",
                             "allowedTenants": ["team-a"]}},
    "closed": {"netcomp": {"type": "ipvlan", "danmKind": "ClusterNetwork", "allowedTenants": ["team-z"]}},
    "storage": {"netcomp": {"type": "macvlan"}},
}  # fmt: skip


def danm(value: Any, nets: dict[str, dict[str, Any]] = DNETS, pod: PodRef = POD) -> choice.PodNetworks:
    return choice.plan(pod, {DANM: json.dumps(value)}, nets, AskRules(), "eth0")


def test_danm_connections_and_their_names() -> None:
    got = danm(
        [
            {"network": "management", "ip": "10.1.0.5/16", "proutes": {"10.20.0.0/16": "10.1.0.1"}},
            {"clusterNetwork": "external", "ip": "dynamic", "ip6": "none"},
            {"tenantNetwork": "internal"},
            {"clusterNetwork": "external", "ip6": "dynamic"},
        ]
    )
    # DANM's names: the first connection eth0 (the runtime's interface, in the node default's place), then the
    # network's container_prefix (or eth) followed by the connection's index.
    assert got.default == "team-a.management" and got.default_ask is not None
    assert [(w.network, w.ifname) for w, _ in got.more] == [
        ("external", "ext1"),
        ("team-a.internal", "eth2"),
        ("external", "ext3"),
    ]
    first = got.default_ask
    assert first.ips == (ipaddress.ip_interface("10.1.0.5/32"),) and first.prefixed == (False,)  # DANM drops the prefix
    assert first.families == {4} and first.proutes == (
        (ipaddress.ip_network("10.20.0.0/16"), ipaddress.ip_address("10.1.0.1")),
    )
    assert [a.families for _, a in got.more] == [{4}, set(), {6}]
    assert first.where == f"{DHEAD}: connection 0 (network 'management')"


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ([{"network": "management", "clusterNetwork": "external"}], "names a network in exactly one of"),
        ([{"ip": "dynamic"}], "names a network in exactly one of"),
        ([{"network": "management", "device": "x"}], "'device': not a key of DANM's"),
        ([{"network": "management", "ip": "Dynamic"}], "ip: 'Dynamic' is not dynamic, none or an IPv4 address"),
        ([{"network": "management", "ip": "fd00::5"}], "ip: fd00::5 is not an IPv4 address"),
        ([{"network": "management", "proutes": {"10.20.0.0/16": "10.1.0.1"}}], "the interface gets no IPv4 address"),
        ([{"network": "management", "ip": "dynamic", "proutes": {"x": "y"}}], "is not a CIDR and a gateway"),
        ({"network": "management"}, "must be a JSON list of connections"),
    ],
)
def test_a_bad_danm_connection_names_the_pod_and_the_connection(value: Any, why: str) -> None:
    with pytest.raises(DelegateError) as e:
        danm(value)
    assert e.value.code == 7 and e.value.msg.startswith(DHEAD) and why in e.value.msg, e.value.msg


def test_danm_tenancy_names_both_namespaces() -> None:
    with pytest.raises(multus.NoNetwork) as e:
        danm([{"network": "management"}], pod=PodRef("team-c", "p"))
    assert "no DanmNet team-c/management is compiled" in e.value.msg
    assert "is in namespace team-a, team-b, not the pod's ('team-c')" in e.value.details
    # Through Multus's annotation, naming the namespace: refused, whatever namespaceIsolation says.
    with pytest.raises(DelegateError) as e:
        choice.plan(PodRef("team-c", "p"), {multus.POD_NETWORKS: "team-a/management"}, DNETS, AskRules(), "eth0")
    assert (
        "DanmNet team-a/management is in namespace 'team-a', and pod team-c/p is in namespace 'team-c'" in e.value.msg
    )
    # AllowedTenants, through either annotation.
    with pytest.raises(DelegateError, match="ClusterNetwork closed allows the pods of team-z; pod team-a/web-0 is in"):
        danm([{"clusterNetwork": "closed"}])
    with pytest.raises(DelegateError, match="ClusterNetwork closed allows the pods of team-z"):
        choice.plan(POD, {multus.POD_NETWORKS: "closed"}, DNETS, AskRules(), "eth0")
    # A connection's kind must be the network's: a TenantNetwork is not a DanmNet.
    with pytest.raises(multus.NoNetwork, match="no DanmNet team-a/internal"):
        danm([{"network": "internal"}])


def test_both_annotations_and_danms_default_network() -> None:
    notes = {DANM: '[{"network": "management"}]', multus.POD_NETWORKS: "storage"}
    with pytest.raises(
        DelegateError, match=re.escape("annotations danm.k8s.io/interfaces (DANM's) and k8s.v1.cni.cncf.io/networks")
    ):
        choice.plan(POD, notes, DNETS, AskRules(), "eth0")
    with_default = {
        **DNETS,
        "team-a.default": {"netcomp": {"type": "ipvlan", "danmKind": "TenantNetwork", "namespace": "team-a"}},
    }
    got = choice.plan(POD, {}, with_default, AskRules(), "eth0")
    assert got.default == "team-a.default" and got.default_ask is not None and got.default_ask.families == {4}
    assert choice.plan(POD, {}, DNETS, AskRules(), "eth0").default is None  # no DANM default: the node's applies
    assert danm([], with_default).default == "team-a.default"  # an empty list too, as in DANM


def test_danm_asks_before_any_plugin() -> None:
    l2 = Attachment("team-a.internal", "eth2", DNETS["team-a.internal"])
    ((_, ask),) = danm([{"network": "management"}, {"tenantNetwork": "internal", "ip": "dynamic"}]).more
    with pytest.raises(
        DelegateError, match=re.escape("has no cidr or net6 (an L2 network): no address can be allocated")
    ):
        asks.prepare(l2, ask, [])
    mgmt = Attachment("team-a.management", "eth0", DNETS["team-a.management"])
    ask6 = danm([{"network": "management", "ip6": "dynamic"}]).default_ask
    assert ask6 is not None
    with pytest.raises(DelegateError, match="ip6: network team-a/management has no net6"):
        asks.prepare(mgmt, ask6, [])
    no_table = {"netcomp": {**DNETS["team-a.management"]["netcomp"], "routeTable": None}}
    ask_pr = danm([{"network": "management", "ip": "dynamic", "proutes": {"10.9.0.0/16": "10.1.0.1"}}]).default_ask
    assert ask_pr is not None
    with pytest.raises(DelegateError, match="proutes: network team-a/management has no rt_tables"):
        asks.prepare(Attachment("team-a.management", "eth0", no_table), ask_pr, [])
    asks.prepare(Attachment("team-a.management", "eth0", DNETS["team-a.management"]), ask_pr, [])
    policy = asks.policy_routes(mgmt, ask_pr, LinkState(None, ("10.1.0.9/24",)))
    assert policy == [PolicyRoutes("eth0", 10, "10.1.0.9/24", (("10.9.0.0/16", "10.1.0.1"),))]


def test_cni_args_cannot_set_what_netcomp_gives_and_fields_can_be_barred() -> None:
    # Plugins read keys without regard to case: an "IPs" in cni-args would replace the addresses netcomp claimed.
    with pytest.raises(DelegateError, match=re.escape("cni-args: 'IPs' is netcomp's to give")):
        asks.prepare(att(HOST_LOCAL), one({"name": "n", "cni-args": {"IPs": ["10.10.0.99/24"], "x": 1}}), [])
    barred = frozenset({"ips", "mac"})
    value = json.dumps([{"name": "n", "ips": ["10.0.0.5"]}, {"name": "m", "portMappings": []}])
    with pytest.raises(DelegateError, match=re.escape("item 1 ('m'): 'portMappings': not allowed on this node")):
        parse_networks(value, POD, barred)
    assert parse_networks('[{"name": "n", "interface": "x0", "ips": ["10.0.0.5"]}]', POD, barred)[0].ifname == "x0"


def test_both_of_danms_annotation_keys_are_refused() -> None:
    notes = {"danm.k8s.io/interfaces": "[]", "danm.io/interfaces": "[]"}
    with pytest.raises(
        DelegateError, match=re.escape("annotations danm.k8s.io/interfaces and danm.io/interfaces both")
    ):
        choice.plan(POD, notes, DNETS, AskRules(), "eth0")


def test_detach_finds_a_definition_by_any_of_its_names() -> None:
    from netcomp.pods.naming import refers_to

    def _names(a: Attachment, ref: str) -> bool:
        return refers_to(ref, a.network, a.conflist)

    a = Attachment("team-a.fast", "net1", {"netcomp": {"namespace": "team-a"}})
    assert _names(a, "team-a/fast") and _names(a, "fast") and _names(a, "team-a.fast")
    assert not _names(a, "team-b/fast") and not _names(a, "slow")
    native = Attachment("storage", "stor0", {"netcomp": {}})
    assert _names(native, "storage") and not _names(native, "x/storage")
