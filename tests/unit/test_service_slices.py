"""Services on secondary networks without an API server: label selectors as Kubernetes reads them, what a Service
asks in DANM's and netcomp's spelling (and every refusal), and the EndpointSlices a node works out for its pods,
in both versions of the API. The API server's side is tests/integration/test_service_slices.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from netcomp.cluster.slices import (
    Attached,
    EndpointPod,
    NetworkRef,
    Port,
    Refusal,
    ServiceSpec,
    attached,
    desired,
    digest_of,
    node_label,
    read_pod,
    read_service,
    slice_name,
    stale,
)
from netcomp.kube import labels
from netcomp.records.record import Attachment, Record

# ------------------------------------------------------------------------------------------------ selectors


@pytest.mark.parametrize(
    ("text", "matching", "not_matching"),
    [
        ("app=web", {"app": "web"}, {"app": "db"}),
        ("app==web,tier!=edge", {"app": "web", "tier": "core"}, {"app": "web", "tier": "edge"}),
        ("tier!=edge", {}, {"tier": "edge"}),
        ("app in (web, api), !canary", {"app": "api"}, {"app": "api", "canary": "1"}),
        ("app notin (db)", {"app": "web"}, {"app": "db"}),
        ("example.com/team", {"example.com/team": ""}, {"team": "x"}),
        ("rank>2,rank<10", {"rank": "5"}, {"rank": "x"}),
        ("  app = web  ", {"app": "web"}, {}),
    ],
)
def test_a_selector_reads_as_kubectl_reads_it(
    text: str, matching: dict[str, str], not_matching: dict[str, str]
) -> None:
    sel = labels.parse(text)
    assert sel.matches(matching) and not sel.matches(not_matching)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("app in (web", "unbalanced '('"),
        ("app=web)", "unbalanced ')'"),
        ("app=we b", "'app=we b' is not a requirement"),
        ("-app=web", "is not a requirement"),
        ("app=" + "x" * 64, "at most 63 characters"),
        ("Bad_Prefix/app=web", "its prefix is not a DNS subdomain"),
    ],
)
def test_a_selector_that_is_not_one_says_why(text: str, says: str) -> None:
    with pytest.raises(ValueError) as e:
        labels.parse(text)
    assert says in str(e.value)


def test_a_map_selector_holds_every_label() -> None:
    sel = labels.from_map({"app": "lb", "tier": "edge"})
    assert sel.matches({"app": "lb", "tier": "edge", "x": "y"}) and not sel.matches({"app": "lb"})
    with pytest.raises(ValueError, match="label key"):
        labels.from_map({"a b": "c"})


# ------------------------------------------------------------------------------------------------ Services


def service(notes: dict[str, str], **spec: Any) -> dict[str, Any]:
    meta = {"namespace": "vnf", "name": "lb", "uid": "svc-uid", "annotations": notes}
    return {"metadata": meta, "spec": {"clusterIP": "None", "ports": [{"name": "sip", "port": 5060}], **spec}}


def test_danms_spelling_as_its_svcwatcher_reads_it() -> None:
    """DANM's own example (example/svcwatcher_demo/services/internal_lb_svc.yaml), in both of DANM's groups."""
    for group in ("danm.k8s.io", "danm.io"):
        got = read_service(service({f"{group}/selector": '{"app":"loadbalancer"}', f"{group}/network": "internal"}))
        assert isinstance(got, ServiceSpec)
        assert got.spelling == "danm" and got.networks == (NetworkRef("DanmNet", "internal"),)
        assert got.selector.matches({"app": "loadbalancer"}) and got.headless
        assert got.ports == (Port("sip", "TCP", 5060),)
    both = read_service(
        service(
            {"danm.k8s.io/selector": '{"a":"b"}', "danm.k8s.io/tenantNetwork": "t", "danm.k8s.io/clusterNetwork": "c"}
        )
    )
    assert isinstance(both, ServiceSpec)
    assert both.networks == (NetworkRef("TenantNetwork", "t"), NetworkRef("ClusterNetwork", "c"))


def test_danms_port_is_the_services_port_netcomps_the_target_port() -> None:
    ports = [{"name": "a", "port": 80, "targetPort": 8080}, {"name": "b", "port": 81, "targetPort": "metrics"}]
    danm = read_service(service({"danm.k8s.io/selector": '{"a":"b"}', "danm.k8s.io/network": "n"}, ports=ports))
    native = read_service(service({"netcomp.io/selector": "a=b", "netcomp.io/network": "n"}, ports=ports))
    assert isinstance(danm, ServiceSpec) and isinstance(native, ServiceSpec)
    assert danm.ports == (Port("a", "TCP", 80), Port("b", "TCP", 81))
    assert native.ports == (Port("a", "TCP", 8080), Port("b", "TCP", None, "metrics"))


def test_netcomps_spelling() -> None:
    got = read_service(service({"netcomp.io/selector": "app in (lb, edge)", "netcomp.io/network": "team-a/fast"}))
    assert isinstance(got, ServiceSpec) and got.networks == (NetworkRef(None, "team-a/fast"),)
    assert got.spelling == "netcomp" and got.selector.matches({"app": "edge"})
    # KEP-4770's label hands a Service with spec.selector to us: its own selector is used.
    doc = service({"netcomp.io/network": "fast"}, selector={"app": "lb"}, publishNotReadyAddresses=True)
    doc["metadata"]["labels"] = {"service.kubernetes.io/endpoint-controller-name": "netcomp.io"}
    own = read_service(doc)
    assert isinstance(own, ServiceSpec) and own.selector.matches({"app": "lb"}) and own.publish_not_ready


def test_a_service_that_asks_nothing_is_not_ours() -> None:
    assert read_service(service({"other": "x"})) is None


@pytest.mark.parametrize(
    ("notes", "spec", "says"),
    [
        ({"danm.k8s.io/selector": "{app: lb}", "danm.k8s.io/network": "n"}, {}, "danm.k8s.io/selector: not JSON"),
        ({"danm.k8s.io/selector": '["a"]', "danm.k8s.io/network": "n"}, {}, "not a JSON object of labels"),
        ({"danm.k8s.io/selector": "{}", "danm.k8s.io/network": "n"}, {}, "selects nothing"),
        ({"danm.k8s.io/selector": '{"a":"b"}'}, {}, "it names no network"),
        ({"danm.k8s.io/selector": '{"a":"b"}', "danm.k8s.io/network": "No_Net"}, {}, "is not a DanmNet's name"),
        ({"netcomp.io/network": "fast"}, {}, "netcomp.io/selector is missing"),
        ({"netcomp.io/selector": "a=b"}, {}, "netcomp.io/network: '' is not a network"),
        ({"netcomp.io/selector": "a in (b", "netcomp.io/network": "n"}, {}, "netcomp.io/selector: unbalanced"),
        ({"netcomp.io/selector": " ", "netcomp.io/network": "n"}, {}, "would select every pod"),
        ({"netcomp.io/selector": "a=b", "netcomp.io/network": "n"}, {"selector": {"a": "b"}}, "has a spec.selector"),
        ({"netcomp.io/selector": "a=b", "netcomp.io/network": "n"}, {"type": "ExternalName"}, "no endpoints"),
        ({"netcomp.io/selector": "a=b", "netcomp.io/network": "n"}, {"ports": [{"name": "x"}]}, "no port number"),
    ],
)
def test_every_refusal_says_why(notes: dict[str, str], spec: dict[str, Any], says: str) -> None:
    got = read_service(service(notes, **spec))
    assert isinstance(got, Refusal) and (got.namespace, got.name) == ("vnf", "lb")
    assert says in got.why, got.why


# ------------------------------------------------------------------------------------------------ pods, records


def pod_doc(name: str, uid: str, **extra: Any) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "vnf", "name": name, "uid": uid, "labels": {"app": "lb"}, **extra},
        "spec": {"containers": [{"name": "c", "ports": [{"name": "metrics", "containerPort": 9100}]}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


def test_a_pod_as_the_slices_need_it() -> None:
    p = read_pod(pod_doc("lb-0", "u0"))
    assert p is not None and p.ready and p.phase == "Running" and not p.terminating
    assert p.port("metrics", "TCP") == 9100 and p.port("metrics", "UDP") is None
    gone = read_pod(pod_doc("lb-0", "u0", deletionTimestamp="2024-01-01T00:00:00Z"))
    assert gone is not None and gone.terminating


def test_a_cache_entry_gives_each_pod_attachment_its_addresses() -> None:
    args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=vnf;K8S_POD_NAME=lb-0;K8S_POD_UID=u0"
    r = {"cniVersion": "1.0.0", "interfaces": [{"name": "ext1", "sandbox": "/x"}], "ips": [{"address": "10.1.0.5/24"}]}
    e = Record("ctr", "/x", "eth0", "1.0.0")
    conf = {"netcomp": {"danmKind": "DanmNet", "namespace": "vnf"}}
    e.attachments = [Attachment("vnf.ext", "ext1", conf, r, args, state="attached"), Attachment("m", "eth0", {})]
    assert attached(e) == (Attached("vnf", "lb-0", "u0", "vnf.ext", "vnf", "DanmNet", "ext1", ("10.1.0.5",)),)
    e.attachments[0].args = ""  # a container that is no pod
    assert attached(e) == ()


# ------------------------------------------------------------------------------------------------ slices


def spec(networks: tuple[NetworkRef, ...], ports: tuple[Port, ...] = (Port("sip", "UDP", 5060),), **kw: Any) -> Any:
    return ServiceSpec("vnf", "lb", "svc-uid", "netcomp", labels.parse("app=lb"), networks, ports, **kw)


def att(pod: str, uid: str, network: str, ips: tuple[str, ...], ns: str | None = None, kind: str | None = None) -> Any:
    return Attached("vnf", pod, uid, network, ns, kind, "net1", ips)


PODS = {
    ("vnf", "lb-0"): EndpointPod(
        "vnf", "lb-0", "u0", {"app": "lb"}, "Running", True, ports=(("metrics", "TCP", 9100),)
    ),
    ("vnf", "lb-1"): EndpointPod(
        "vnf", "lb-1", "u1", {"app": "lb"}, "Pending", False, ports=(("metrics", "TCP", 9101),)
    ),
    ("vnf", "db-0"): EndpointPod("vnf", "db-0", "u2", {"app": "db"}, "Running", True),
}


def test_the_slices_of_a_node_in_v1() -> None:
    records = [
        att("lb-0", "u0", "ext", ("10.1.0.5", "fd00::5")),
        att("lb-1", "u1", "ext", ("10.1.0.6",)),
        att("db-0", "u2", "ext", ("10.1.0.7",)),  # not selected
        att("lb-0", "u0", "other", ("10.2.0.5",)),  # another network
        att("lb-0", "old", "ext", ("10.1.0.99",)),  # an earlier pod of the name
    ]
    got = desired([spec((NetworkRef(None, "ext"),), headless=True)], PODS, records, "node-a", "v1")
    assert sorted(got) == [("vnf", "lb.node-a.v4"), ("vnf", "lb.node-a.v6")]
    v4 = got[("vnf", "lb.node-a.v4")]
    meta = v4["metadata"]
    assert meta["labels"] == {
        "endpointslice.kubernetes.io/managed-by": "netcomp.io",
        "kubernetes.io/service-name": "lb",
        "netcomp.io/node": "node-a",
        "service.kubernetes.io/headless": "",
    }
    assert meta["ownerReferences"] == [{"apiVersion": "v1", "kind": "Service", "name": "lb", "uid": "svc-uid"}]
    assert v4["apiVersion"] == "discovery.k8s.io/v1" and v4["addressType"] == "IPv4"
    assert v4["ports"] == [{"name": "sip", "protocol": "UDP", "port": 5060}]
    assert v4["endpoints"] == [
        {
            "addresses": ["10.1.0.5"],
            "conditions": {"ready": True, "serving": True, "terminating": False},
            "targetRef": {"kind": "Pod", "namespace": "vnf", "name": "lb-0", "uid": "u0"},
            "nodeName": "node-a",
        },
        {
            "addresses": ["10.1.0.6"],
            "conditions": {"ready": False, "serving": False, "terminating": False},
            "targetRef": {"kind": "Pod", "namespace": "vnf", "name": "lb-1", "uid": "u1"},
            "nodeName": "node-a",
        },
    ]
    assert [e["addresses"] for e in got[("vnf", "lb.node-a.v6")]["endpoints"]] == [["fd00::5"]]
    # The digest is of the content: the same inputs give the same, a change another.
    again = desired([spec((NetworkRef(None, "ext"),), headless=True)], PODS, records, "node-a", "v1")
    assert digest_of(again[("vnf", "lb.node-a.v4")]) == digest_of(v4) != ""
    fewer = desired([spec((NetworkRef(None, "ext"),), headless=True)], PODS, records[:1], "node-a", "v1")
    assert digest_of(fewer[("vnf", "lb.node-a.v4")]) != digest_of(v4)


def test_v1beta1_names_the_node_in_topology_and_not_ready_pods_can_be_published() -> None:
    records = [att("lb-1", "u1", "ext", ("10.1.0.6",))]
    got = desired([spec((NetworkRef(None, "ext"),), publish_not_ready=True)], PODS, records, "node-a", "v1beta1")
    [ep] = got[("vnf", "lb.node-a.v4")]["endpoints"]
    assert ep["topology"] == {"kubernetes.io/hostname": "node-a"} and "nodeName" not in ep
    assert ep["conditions"] == {"ready": True, "serving": True, "terminating": False}
    assert got[("vnf", "lb.node-a.v4")]["apiVersion"] == "discovery.k8s.io/v1beta1"


def test_a_terminating_pod_serves_but_is_not_ready_and_a_finished_one_is_gone() -> None:
    pods = {
        ("vnf", "lb-0"): EndpointPod("vnf", "lb-0", "u0", {"app": "lb"}, "Running", True, terminating=True),
        ("vnf", "lb-1"): EndpointPod("vnf", "lb-1", "u1", {"app": "lb"}, "Succeeded", False),
    }
    records = [att("lb-0", "u0", "ext", ("10.1.0.5",)), att("lb-1", "u1", "ext", ("10.1.0.6",))]
    got = desired([spec((NetworkRef(None, "ext"),))], pods, records, "n", "v1")
    [ep] = got[("vnf", "lb.n.v4")]["endpoints"]
    assert ep["conditions"] == {"ready": False, "serving": True, "terminating": True}


def test_which_network_a_service_means() -> None:
    records = [
        att("lb-0", "u0", "vnf.ext", ("10.1.0.5",), ns="vnf"),  # the namespace's definition 'ext'
        att("lb-0", "u0", "ext", ("10.9.0.5",)),  # the node-wide 'ext'
        att("lb-1", "u1", "ext", ("10.9.0.6",)),  # lb-1 has only the node-wide one
    ]

    def addresses(ref: NetworkRef, recs: list[Any] = records) -> list[str]:
        got = desired([spec((ref,))], PODS, recs, "n", "v1")
        return [a for body in got.values() for e in body["endpoints"] for a in e["addresses"]]

    assert addresses(NetworkRef(None, "ext")) == ["10.1.0.5", "10.9.0.6"]  # a bare name: the namespace's first
    assert addresses(NetworkRef(None, "vnf/ext")) == ["10.1.0.5"]
    danm = [
        att("lb-0", "u0", "vnf.ext", ("10.1.0.5",), ns="vnf", kind="DanmNet"),
        att("lb-1", "u1", "vnf.ext", ("10.1.0.6",), ns="vnf", kind="TenantNetwork"),
        att("lb-1", "u1", "ext", ("10.3.0.6",), kind="ClusterNetwork"),
    ]
    assert addresses(NetworkRef("DanmNet", "ext"), danm) == ["10.1.0.5"]
    assert addresses(NetworkRef("TenantNetwork", "ext"), danm) == ["10.1.0.6"]
    assert addresses(NetworkRef("ClusterNetwork", "ext"), danm) == ["10.3.0.6"]


def test_a_named_port_is_each_pods_own() -> None:
    """lb-0 and lb-1 name `metrics` on different ports: two slices, each with its port set."""
    records = [att("lb-0", "u0", "ext", ("10.1.0.5",)), att("lb-1", "u1", "ext", ("10.1.0.6",))]
    ports = (Port("m", "TCP", None, "metrics"),)
    got = desired([spec((NetworkRef(None, "ext"),), ports)], PODS, records, "n", "v1")
    assert len(got) == 2 and all(name.startswith("lb.n.v4.") for _, name in got)
    assert sorted((b["ports"][0]["port"], b["endpoints"][0]["addresses"][0]) for b in got.values()) == [
        (9100, "10.1.0.5"),
        (9101, "10.1.0.6"),
    ]


def test_names_and_labels_of_long_nodes() -> None:
    node = "n" * 60 + ".example.com"
    assert node_label("node-a") == "node-a" and node_label(node).startswith("h-") and len(node_label(node)) <= 63
    assert slice_name("lb", "node-a", 6) == "lb.node-a.v6"
    assert slice_name("lb", "Node_A", 4).startswith("lb.") and "Node_A" not in slice_name("lb", "Node_A", 4)
    long = slice_name("s" * 63, "x" * 200, 4)
    assert len(long) <= 253 and long.startswith("s" * 63 + ".") and long.endswith(".v4")


def test_another_nodes_slice_is_stale_only_with_proof() -> None:
    doc = {"endpoints": [{"targetRef": {"uid": "u0"}}, {"targetRef": {"uid": "u1"}}]}
    assert stale(doc, node_exists=False, pods_there={"u0"})
    assert stale(doc, node_exists=True, pods_there={"u9"})
    assert not stale(doc, node_exists=True, pods_there={"u1"})
    assert json.dumps(doc)  # untouched


def test_an_api_error_says_the_servers_message_once() -> None:
    """netcomp's client puts the server's message into the reason already (apiclient.Api._status_words); the line
    says it once, with what to do about a 403. The library's errors carry it only in the body: said from there."""
    from netcomp.cluster.services import _api_why
    from netcomp.kube.apierrors import ApiException

    body = json.dumps({"message": "endpointslices is forbidden"}).encode()
    for reason in ("Forbidden: endpointslices is forbidden", "Forbidden"):
        why = _api_why(ApiException(403, reason, body))
        assert why.startswith("403 Forbidden: endpointslices is forbidden (the node's ClusterRole"), why
        assert why.count("endpointslices is forbidden") == 1
