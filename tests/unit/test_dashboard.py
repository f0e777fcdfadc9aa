"""The Grafana dashboard the package ships (packaging/grafana/netcomp-dashboard.json): every metric it names is
one a real daemon exports on /metrics, with every label it groups or selects by; every metric the daemon exports
has a panel; and the dashboard is one Grafana can load (unique panel ids, panels inside the grid and apart, every
query on the dashboard's data source variable)."""

from __future__ import annotations

import json
import re
import socket
from dataclasses import dataclass
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from netcomp.daemon.server import protocol
from netcomp.daemon.server.client import call
from netcomp.errors import DelegateError
from netcomp.ipam.allocator import Holder
from netcomp.ipam.pool import Pool, Range
from tests.lab.checkout import ROOT
from tests.lab.minidaemon import MiniDaemon, mini_daemon

DASHBOARD = ROOT / "packaging" / "grafana" / "netcomp-dashboard.json"
# The samples a family of each type exposes (prometheus_client's `_created` series are left out: a dashboard
# has no use for them).
SAMPLES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
TARGET_LABELS = {"instance", "job"}  # Prometheus adds them when it scrapes
METRIC = re.compile(r"\bnetcomp_[a-z0-9_]+\b")
GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
SELECTOR = re.compile(r"\{([^}]*)\}")
MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")


def _panels(dash: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for p in dash["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))  # a collapsed row holds its panels
    return out


def _queries(dash: dict[str, Any]) -> list[str]:
    """Every PromQL expression: the panels' targets and the template variables' queries."""
    exprs = [t["expr"] for p in _panels(dash) for t in p.get("targets", [])]
    for v in dash["templating"]["list"]:
        q = v.get("query")
        if v["type"] == "query":
            exprs.append(q["query"] if isinstance(q, dict) else q)
    return exprs


def _labels(expr: str) -> set[str]:
    found = {label.strip() for group in GROUPING.findall(expr) for label in group.split(",") if label.strip()}
    found |= {m for sel in SELECTOR.findall(expr) for m in MATCHER.findall(sel)}
    return found


@dataclass(frozen=True)
class Exported:
    samples: dict[str, set[str]]  # each sample name the endpoint's families expose: the label names it carries
    families: dict[str, tuple[str, ...]]  # each family: its sample names


def _exported(text: str) -> Exported:
    out = Exported({}, {})
    for fam in text_string_to_metric_families(text):
        if fam.name.endswith("_created"):
            continue
        out.families[fam.name] = tuple(fam.name + suffix for suffix in SAMPLES[fam.type])
        for name in out.families[fam.name]:
            out.samples[name] = set()
        for s in fam.samples:
            if s.name in out.samples:
                out.samples[s.name].update(s.labels)
    return out


def _traffic(d: MiniDaemon) -> None:
    """A little of everything the metrics count, through the daemon's real paths: a CNI request, a request
    refused (a body over maxRequestBytes), a delegate exec (VERSION: the one that needs no namespace; the
    stand-in plugin fails it), and an address claimed and given back through the daemon's allocator (its
    node-local store)."""
    config = json.dumps({"cniVersion": "1.0.0", "name": "netcomp", "type": "netcomp"}).encode()
    body = json.loads(protocol.encode_request({"CNI_COMMAND": "VERSION"}, config))
    status, answer = call(d.sock, "POST", protocol.CNI_PATH, body)
    assert status == 200, answer
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(d.sock)
        big = d.settings.maxRequestBytes + 1
        s.sendall(f"POST {protocol.CNI_PATH} HTTP/1.1\r\nHost: x\r\nContent-Length: {big}\r\n\r\n".encode())
        assert s.recv(100).startswith(b"HTTP/1.1 413")
    with pytest.raises(DelegateError):
        d.daemon.runner.version("bridge")
    alloc = d.daemon.addresses.allocator
    pool = Pool("lab", ((Range.parse({"subnet": "10.99.0.0/29"}),),))
    alloc.release([alloc.claim(pool, 0, Holder("c1", "eth0"))])


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Exported:
    """What a real daemon exports on /metrics after a little traffic."""
    base = tmp_path_factory.mktemp("daemon")
    sockdir = tmp_path_factory.mktemp("s", numbered=True)
    with mini_daemon(base, sockdir) as d:
        _traffic(d)
        status, text = call(d.sock, "GET", protocol.METRICS_PATH)
    assert status == 200 and isinstance(text, str)
    return _exported(text)


@pytest.fixture(scope="module")
def dash() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def test_every_metric_and_label_it_uses_is_on_metrics(dash: dict[str, Any], exported: Exported) -> None:
    problems = []
    for expr in _queries(dash):
        names = set(METRIC.findall(expr))
        assert names, f"a query that names no netcomp metric: {expr}"
        for name in sorted(names):
            if name not in exported.samples:
                problems.append(f"{name} is not on /metrics: {expr}")
                continue
            missing = _labels(expr) - TARGET_LABELS - exported.samples[name]
            if missing:
                problems.append(f"{name} has no label {sorted(missing)} on /metrics: {expr}")
    assert problems == []


def test_every_metric_the_daemon_exports_has_a_panel(dash: dict[str, Any], exported: Exported) -> None:
    used = {name for expr in _queries(dash) for name in METRIC.findall(expr)}
    assert len(exported.families) >= 12
    assert sorted(f for f, samples in exported.families.items() if not used & set(samples)) == []


def test_the_check_finds_a_wrong_name_and_a_wrong_label(exported: Exported) -> None:
    assert "netcomp_cni_requests_total" in exported.samples and "netcomp_cni_requests" not in exported.samples
    assert {"verb", "outcome"} <= exported.samples["netcomp_cni_requests_total"]
    assert {"plugin", "verb", "le"} <= exported.samples["netcomp_delegate_seconds_bucket"]
    assert _labels('sum by (plugin) (rate(netcomp_cni_requests_total{outcome!="ok"}[5m]))') == {"plugin", "outcome"}
    assert "plugin" not in exported.samples["netcomp_cni_requests_total"]


def test_grafana_can_load_it(dash: dict[str, Any]) -> None:
    panels = _panels(dash)
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    assert dash["uid"] and dash["title"] and isinstance(dash["schemaVersion"], int)
    variables = {v["name"] for v in dash["templating"]["list"]}
    assert {"datasource", "instance"} <= variables
    cells: dict[tuple[int, int], int] = {}
    for p in panels:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["w"] > 0 and g["x"] + g["w"] <= 24, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"panel {p['id']} overlaps panel {cells[(x, y)]}"
                cells[(x, y)] = p["id"]
        if p["type"] == "row":
            continue
        assert p.get("description"), f"panel {p['title']!r} says what it shows"
        for t in p["targets"]:
            assert t["datasource"]["uid"] == "${datasource}", p["title"]
            assert set(re.findall(r"\$(\w+)", t["expr"])) <= variables | {"__rate_interval", "__range"}, t["expr"]
