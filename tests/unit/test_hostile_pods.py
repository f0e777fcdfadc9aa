"""A pod's annotations are written by a tenant: whatever they hold (JSON nested deeper than any stack, values of
the wrong type, huge strings, addresses with IPv6 zones, bad MACs, thousands of unknown keys), the decoders of
Multus's and DANM's annotations (pods/multus.py, danm_interfaces.py, choice.py) and what an item puts into its
attachment (asks.py) answer with a CNI error 7 naming the pod and the annotation, short, and nothing else: no
RecursionError, no TypeError, no message that copies the annotation. A seeded fuzz (hypothesis) and the shapes
the hostile tester used. The same through the daemon, hot-plug and explain: tests/integration/test_hostile_pods.py."""

from __future__ import annotations

import ipaddress
import json
import tracemalloc
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from netcomp.delegate import poolclaims
from netcomp.errors import DelegateError
from netcomp.ipam.allocator import Allocator, Holder, held_by
from netcomp.ipam.localstore import LocalStore
from netcomp.ipam.pool import Pool
from netcomp.pods import asks, choice, multus
from netcomp.pods.danm_interfaces import DANM_KEYS
from netcomp.pods.multus import DANM_INTERFACES, DEFAULT_NETWORK, KNOWN_KEYS, POD_NETWORKS, AskRules
from netcomp.pods.naming import PodRef
from netcomp.records.record import Attachment

POD = PodRef("team-a", "web-0")
HOST_LOCAL = {
    "cniVersion": "1.0.0",
    "name": "storage",
    "plugins": [{"type": "macvlan", "ipam": {"type": "host-local", "subnet": "10.79.0.0/24"}}, {"type": "tuning"}],
    "netcomp": {"type": "macvlan"},
}
POOL = {
    "cniVersion": "1.0.0",
    "name": "pool",
    "plugins": [{"type": "macvlan", "ipam": {"type": "static"}}],
    "netcomp": {"type": "macvlan", "pool": {"type": "cluster", "ranges": [[{"subnet": "10.86.0.0/24"}]]}},
}
NETS: dict[str, dict[str, Any]] = {
    "storage": HOST_LOCAL,
    "pool": POOL,
    "kube-system.gw": {**HOST_LOCAL, "netcomp": {"type": "macvlan", "namespace": "kube-system"}},
    "dnet": {**POOL, "netcomp": {**POOL["netcomp"], "danmKind": "ClusterNetwork", "routeTable": 10}},
}
DNET_IP = {"clusterNetwork": "dnet", "ip": "10.86.0.5"}
# Longest message any refusal here may give: it names the pod, the annotation, the item and what is wrong.
MAX_MSG = 1000


def deep(n: int, inner: str = "1") -> str:
    return "[" * n + inner + "]" * n


def plan(notes: dict[str, str]) -> None:
    """Everything an ADD does with the annotations before a plugin runs: plan, identity, asks put into the
    attachments."""
    got = choice.plan(POD, notes, NETS, AskRules(), "eth0")
    items = [*([(got.default, got.default_ask)] if got.default_ask else []), *((w.network, a) for w, a in got.more)]
    for network, ask in items:
        assert network is not None
        multus.element_key(network, ask.ifname or "net1", ask)
        asks.prepare(Attachment(network, ask.ifname or "net1", NETS[network], None, "", {}), ask, [])
        asks.check_gateways(Attachment(network, "net1", NETS[network]), ask)


def refused(notes: dict[str, str]) -> DelegateError:
    with pytest.raises(DelegateError) as e:
        plan(notes)
    assert e.value.code == 7, e.value
    assert e.value.msg.startswith("pod team-a/web-0: annotation"), e.value.msg
    assert len(e.value.full_msg) + len(e.value.details) < MAX_MSG, e.value.msg[:200]
    return e.value


@pytest.mark.parametrize("annotation", [POD_NETWORKS, DEFAULT_NETWORK, *DANM_INTERFACES])
@pytest.mark.parametrize(
    "value",
    [
        deep(100_000),  # past any recursion limit: the stdlib's parser raised RecursionError
        deep(40),  # past netcomp's bound, within the stdlib's
        json.dumps([{"name": "storage", "cni-args": {"a": json.loads(deep(40))}}]),
        json.dumps([{"network": "dnet", "proutes": {"10.0.0.0/8": json.loads(deep(40))}}]),
        "[" + '{"a":' * 50_000 + "1" + "}" * 50_000 + "]",
    ],
    ids=["lists-100000", "lists-40", "cni-args-40", "danm-40", "objects-50000"],
)
def test_a_deeply_nested_annotation_is_a_clear_cni_error(annotation: str, value: str) -> None:
    e = refused({annotation: value})
    assert e.msg.startswith(f"pod team-a/web-0: annotation {annotation}: "), e.msg


@pytest.mark.parametrize(
    ("notes", "words"),
    [
        ({POD_NETWORKS: json.dumps([{"name": "storage", **{f"k{i}" * 20: 1 for i in range(5000)}}])}, "4995 more"),
        ({POD_NETWORKS: json.dumps([{"name": "storage", "namespace": ["x"] * 50_000}])}, "namespace ['x', "),
        ({POD_NETWORKS: "storage, " + "x" * 200_000}, "is not a DNS-1123 label"),
        ({POD_NETWORKS: json.dumps([{"name": "storage", "bandwidth": {"egressRate": [0] * 50_000}}])}, "bandwidth"),
        ({POD_NETWORKS: json.dumps([{"name": "storage", "ips": ["fd00::1%" + "e" * 100_000]}])}, "ips[0]"),
        ({POD_NETWORKS: json.dumps([{"name": "storage", "default-route": ["fd00::1%eth0"]}])}, "default-route[0]"),
        ({POD_NETWORKS: json.dumps([{"name": "storage", "deviceID": "0000:03:02.1\n" * 1000}])}, "deviceID"),
        ({POD_NETWORKS: ",".join(["storage"] * 129)}, "names 129 networks; a pod may ask for at most 128"),
        ({POD_NETWORKS: json.dumps([{"name": "storage"}] * 129)}, "a pod may ask for at most 128"),
        ({DANM_INTERFACES[0]: json.dumps([{"network": "d", **{f"k{i}": 1 for i in range(5000)}}])}, "4995 more"),
        ({DANM_INTERFACES[0]: json.dumps([{"clusterNetwork": "dnet", "ip6": "fd00::5%" + "z" * 90_000}])}, "ip6"),
        ({DANM_INTERFACES[0]: json.dumps([{"clusterNetwork": "dnet", "ip": "10.86.0.5", "ip6": "fd00::5%z"}])}, "ip6"),
        ({DANM_INTERFACES[0]: json.dumps([{"clusterNetwork": "dnet", "proutes": {"fd00::%e/64": "1"}}])}, "proutes"),
        ({DANM_INTERFACES[0]: json.dumps([{**DNET_IP, "proutes": {"10.9.0.0/16": "10.86.0.1%x"}}])}, "proutes"),
        ({DANM_INTERFACES[0]: "[]", DANM_INTERFACES[1]: "[]"}, "both name networks"),
    ],
)
def test_a_refusal_is_short_and_names_the_pod(notes: dict[str, str], words: str) -> None:
    """Whatever size the annotation, its refusal says what is wrong in a line: it goes into an event, a log line
    and the runtime's error."""
    e = refused(notes)
    assert words in e.msg, e.msg[:300]


# ------------------------------------------------------------------------------------------------ the fuzz

_ADVERSARIAL = [
    "storage",
    "pool",
    "dnet",
    "team-a",
    "kube-system",
    "gw",
    "eth0",
    "net1",
    "",
    "none",
    "dynamic",
    "10.79.0.5",
    "10.79.0.5/24",
    "10.86.0.7",
    "10.99.0.1",
    "fd00::1",
    "fd00::1%eth0",
    "10.0.0.0/8",
    "02:00:00:00:00:01",
    "03:00:00:00:00:01",
    "00:00:00:00:00:00",
    "0000:03:02.1",
    "a\nb",
    "../../etc/passwd",
    "x" * 70_000,
    "é" * 100,
    "\x00",
]
_KEYS = st.sampled_from([*KNOWN_KEYS, *DANM_KEYS, "bogus", "hostPort", "containerPort", "ingressRate"])
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(_ADVERSARIAL),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS | st.text(max_size=8), inner, max_size=4),
    max_leaves=24,
)
_ELEMENTS = st.dictionaries(_KEYS, _VALUES, max_size=7)


@st.composite
def annotations(draw: st.DrawFn) -> dict[str, str]:
    """A pod's annotations: JSON lists of elements (some wrapped in nesting of any depth), raw text, the short
    form; on one or more of the keys netcomp reads."""
    items = draw(st.lists(_ELEMENTS | _VALUES, max_size=4))
    text = json.dumps(items)
    depth = draw(st.sampled_from([0, 0, 0, 1, 31, 33, 2000]))
    if depth:
        text = deep(depth, text)
    value = draw(
        st.one_of(
            st.just(text),
            st.text(max_size=60),
            st.lists(st.sampled_from(_ADVERSARIAL[:12]) | st.text(max_size=12), max_size=5).map(", ".join),
            st.just(text[: draw(st.integers(0, len(text)))]),  # cut short: not JSON
        )
    )
    keys = draw(st.lists(st.sampled_from([POD_NETWORKS, DEFAULT_NETWORK, *DANM_INTERFACES]), min_size=1, max_size=2))
    return {k: value for k in keys}


@settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(annotations())
def test_fuzz_nothing_but_a_clear_cni_error_escapes(notes: dict[str, str]) -> None:
    """Seeded (derandomize): the same examples every run. Whatever the annotations, planning succeeds or refuses
    with a short CNI error 7 naming the pod; and memory stays within a bound of the input's size."""
    tracemalloc.start()
    try:
        plan(notes)
    except DelegateError as e:
        assert e.code == 7, e
        assert e.msg.startswith("pod team-a/web-0: annotation"), e.msg[:300]
        assert len(e.full_msg) + len(e.details) < MAX_MSG, e.msg[:300]
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    size = sum(len(v) for v in notes.values())
    assert peak < 64 * size + 4 * 2**20, (peak, size)


# ------------------------------------------------------------------------------------------------ who holds it


def test_an_address_another_namespaces_pod_holds_is_taken_not_by_whom(tmp_path: Path) -> None:
    """The allocator names the holder (pod and node) for the operator; the pod asking is told who only when the
    holder is a pod of its own namespace: at the claim (the ADD's error, hot-plug's event) and in the check a
    hot-plug makes before it detaches anything."""
    alloc = Allocator(LocalStore(tmp_path / "claims"), "node-1")
    alloc.load()
    pool = Pool.of("pool", POOL)
    assert pool is not None
    alloc.claim(pool, 0, Holder("c-db", "net1", "team-b/secret-db"), ipaddress.ip_address("10.86.0.50"))
    alloc.claim(pool, 0, Holder("c-api", "net1", "team-a/api-0"), ipaddress.ip_address("10.86.0.51"))
    for addr, named in (("10.86.0.50", False), ("10.86.0.51", True)):
        (ask,) = multus.parse_networks(json.dumps([{"name": "pool", "ips": [addr]}]), POD)
        for attempt in ("take", "check"):
            a = Attachment("pool", "net1", POOL)
            with pytest.raises(DelegateError) as e:
                if attempt == "take":
                    poolclaims.take(alloc, [a], "c-web", str(POD), "uid-1", {"net1": ask})
                else:
                    poolclaims.check(alloc, [a], "c-web", POD.namespace, {"net1": ask})
            text = e.value.full_msg + e.value.details
            assert e.value.code == 11 and e.value.msg.startswith(f"{ask.where}: address {addr} of network 'pool'")
            if named:
                assert "is held by pod team-a/api-0 on node node-1" in text, text
            else:
                assert "is taken (not by a pod of namespace 'team-a')" in text, text
                assert "secret-db" not in text and "team-b" not in text and "node-1" not in text, text
    # No pod asks (an operator's `netcomp attach`): the holder is named.
    a = Attachment("pool", "net1", POOL)
    with pytest.raises(DelegateError, match="is held by pod team-b/secret-db on node node-1"):
        poolclaims.take(alloc, [a], "c-op", "", "", {"net1": replace(ask, ips=(ipaddress.ip_interface("10.86.0.50"),))})


def test_the_block_allocators_wording_is_the_one_hidden_reads() -> None:
    """poolclaims.hidden finds the holder in the allocators' own words: the block allocator's too (held_by)."""
    addr = ipaddress.ip_address("10.86.0.50")
    e = held_by("pool", addr, "pod team-b/secret-db on node node-1")
    assert poolclaims.hidden(e, addr, "pool", "team-a").msg == (
        "address 10.86.0.50 of network 'pool' is taken (not by a pod of namespace 'team-a')"
    )
