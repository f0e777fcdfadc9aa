"""Pods written as a hostile tenant would, against a real kube-apiserver with the real plugins in network
namespaces: an edit refused by a hot-plug detaches nothing first; an annotation nested deeper than any stack is a
clear CNI error on ADD, in explain and as a hot-plug's event (never an internal error or a traceback); and an
address another namespace's pod holds is said to be taken, not by whom, in the ADD's error, the events and
explain. The decoders alone, fuzzed: tests/unit/test_hostile_pods.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.lab.daemonlab import DaemonLab
from tests.lab.danm import DANM
from tests.lab.labpods import (
    DEFAULT,
    NETWORKS,
    annotated,
    attach,
    cni_args,
    detach,
    edit,
    events_of,
    explain,
    links,
    nothing_left,
    pod,
    status_of,
)

pytestmark = pytest.mark.root


def deep(n: int) -> str:
    return "[" * n + "]" * n


def gone(dl: DaemonLab, ctr: str, p: dict[str, Any], *, deleted: bool = False) -> None:
    """The container's DEL (unless `deleted` already) leaves nothing of it: no interface, no record. (Not
    labpods.nothing_left: the holder's leases are the node's meanwhile.)"""
    if not deleted:
        rc, res = dl.shim("DEL", ctr, args=cni_args(p, ctr))
        assert rc == 0, res
    assert dl.lab.links(ctr) == ["lo"]
    assert not [f for f in dl.cache_files() if ctr in f]


def warnings_of(admin: Any, dl: DaemonLab, p: dict[str, Any]) -> list[str]:
    return [m for kind, r, m in events_of(admin, dl, p) if kind == "Warning" and r == "FailedHotplug"]


@pytest.fixture
def holder(admin: Any, multus_node: DaemonLab) -> Iterator[dict[str, Any]]:
    """team-b/secret-db, holding 10.86.0.60 of the cluster pool."""
    with pod(admin, multus_node, "secret-db", ns="team-b", **annotated([{"name": "pool", "ips": ["10.86.0.60"]}])) as p:
        ctr, rc, res = attach(multus_node, p)
        assert rc == 0, res
        assert multus_node.daemon.addresses.flush(30)
        yield p
        gone(multus_node, ctr, p)


# ------------------------------------------------------------------------------------------------ hot-plug


@pytest.mark.parametrize(
    ("element", "words"),
    [
        ({"ips": ["10.99.0.5"]}, "ips: 10.99.0.5 is outside network backup"),
        ({"cni-args": {"IPS": ["10.99.0.5"]}}, "cni-args: 'IPS' is netcomp's to give"),
        ({"default-route": ["10.99.0.1"]}, "default-route: gateway 10.99.0.1 is outside network backup"),
        ({"name": "pool", "ips": ["10.86.0.0"]}, "ips: 10.86.0.0 cannot be claimed on network pool: the network"),
        ({"name": "pool", "ips": ["10.86.0.60"]}, "is taken (not by a pod of namespace 'team-a')"),
    ],
    ids=["ips-outside", "cni-args-ips", "gateway-outside", "network-address", "held-elsewhere"],
)
def test_a_refused_edit_detaches_nothing(
    admin: Any, multus_node: DaemonLab, holder: dict[str, Any], element: dict[str, Any], words: str
) -> None:
    """The edit removes storage (net1) and adds an element that takes net1's name (Multus's net<position>) and
    is refused: it was refused after net1 was detached; now before, with the pod as it was."""
    with pod(admin, multus_node, "keeper", **{NETWORKS: "storage"}) as p:
        ctr, rc, res = attach(multus_node, p)
        assert rc == 0, res
        before = multus_node.lab.addrs(ctr, "net1")
        edit(admin, multus_node, p, json.dumps([{"name": "backup", **element}]))
        assert links(multus_node, ctr) == ["eth0", "net1"] and multus_node.lab.addrs(ctr, "net1") == before
        (warning,) = warnings_of(admin, multus_node, p)
        assert warning.startswith(f"pod team-a/keeper: annotation {NETWORKS}: item 0 ") and words in warning
        assert "secret-db" not in warning and "team-b" not in warning, warning
        assert [(s["name"], s["interface"]) for s in status_of(admin, multus_node, p)] == [
            ("mgmt", "eth0"),
            ("storage", "net1"),
        ]
        assert not [r for _, r, _ in events_of(admin, multus_node, p) if r == "RemovedInterface"]
        gone(multus_node, ctr, p)


def test_a_deeply_nested_edit_is_an_event_not_a_traceback(admin: Any, multus_node: DaemonLab) -> None:
    with pod(admin, multus_node, "deep-edit", **{NETWORKS: "storage"}) as p:
        ctr, rc, res = attach(multus_node, p)
        assert rc == 0, res
        edit(admin, multus_node, p, deep(100_000))
        assert links(multus_node, ctr) == ["eth0", "net1"]
        (warning,) = warnings_of(admin, multus_node, p)
        assert warning.startswith(f"pod team-a/deep-edit: annotation {NETWORKS}: is not JSON netcomp reads"), warning
        edit(admin, multus_node, p, "storage, backup")  # the pod's sync goes on
        assert links(multus_node, ctr) == ["eth0", "net1", "net2"]
        detach(multus_node, ctr, p)


# ------------------------------------------------------------------------------------------------ ADD, explain


@pytest.mark.parametrize("annotation", [NETWORKS, DEFAULT, DANM])
def test_a_deeply_nested_annotation_is_a_clear_cni_error(admin: Any, multus_node: DaemonLab, annotation: str) -> None:
    head = f"pod team-a/deep: annotation {annotation}: "
    with pod(admin, multus_node, "deep", **{annotation: deep(100_000)}) as p:
        rc, doc = explain(multus_node, "--pod", "team-a/deep")
        assert doc["refusal"]["code"] == 7 and doc["refusal"]["msg"].startswith(head), doc["refusal"]
        ctr, rc, res = attach(multus_node, p)
        assert rc == 1 and res["code"] == 7 and res["msg"].startswith(head), res
        assert res["msg"] == doc["refusal"]["msg"]
        nothing_left(multus_node, ctr)
        assert ("Warning", "FailedAddNetworks") in [e[:2] for e in events_of(admin, multus_node, p)]
        assert multus_node.shim("DEL", ctr, args=cni_args(p, ctr))[0] == 0


def test_an_address_another_namespaces_pod_holds_is_taken_not_by_whom(
    admin: Any, multus_node: DaemonLab, holder: dict[str, Any]
) -> None:
    """team-b/secret-db holds 10.86.0.60; team-a/web asks for it: refused (11) saying it is taken, naming neither
    the pod nor its namespace nor its node, in the runtime's error, the pod's event and explain."""
    with pod(admin, multus_node, "web", **annotated([{"name": "pool", "ips": ["10.86.0.60"]}])) as p:
        rc, doc = explain(multus_node, "--pod", "team-a/web")
        (pooled,) = [n for n in doc["networks"] if n["network"] == "pool"]
        assert pooled["addresses"]["held"] == ["10.86.0.60 is taken (not by a pod of namespace 'team-a')"]
        ctr, rc, res = attach(multus_node, p)
        assert rc == 1 and res["code"] == 11, res
        assert "address 10.86.0.60 of network 'pool' is taken (not by a pod of namespace 'team-a')" in res["msg"]
        said = json.dumps([res, events_of(admin, multus_node, p), doc])
        assert "secret-db" not in said and "team-b" not in said and multus_node.settings.nodeName not in said, said
        gone(multus_node, ctr, p)
