"""Counts the daemon's Prometheus metrics: requests per verb and outcome with latency, and every delegate exec per
plugin and verb. It writes the text format (0.0.4) exactly as prometheus_client does (a unit test compares them),
without importing it: its HTTP servers are modules a daemon never runs (docs/benchmarks.md)."""

from __future__ import annotations

import copy
import math
import os
import threading
import time
from collections.abc import Sequence
from typing import TypeVar

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
INF = float("inf")


def _created_series() -> bool:
    # prometheus_client's switch, honoured the same way.
    return os.environ.get("PROMETHEUS_DISABLE_CREATED_SERIES", "False").lower() not in ("true", "1", "t")


def go_float(d: float) -> str:
    """A float as Prometheus's Go code prints it (prometheus_client's floatToGoString)."""
    d = float(d)
    if d == INF:
        return "+Inf"
    if d == -INF:
        return "-Inf"
    if math.isnan(d):
        return "NaN"
    s = repr(d)
    dot = s.find(".")
    if d > 0 and dot > 6:  # Go switches to exponents sooner than Python
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return s


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _labels(pairs: Sequence[tuple[str, str]]) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(pairs)) + "}" if pairs else ""


class _Series:
    """One labelled series' numbers; the family's lock guards them."""

    __slots__ = ("buckets", "created", "value")

    def __init__(self, nbuckets: int) -> None:
        self.created = time.time()
        self.value = 0.0  # the count, the gauge's value, or a histogram's sum
        self.buckets = [0.0] * nbuckets


S = TypeVar("S", bound="_Family")


class _Family:
    """A metric family: a name, help, label names, and a series per label values (in the order first used).
    `labels(...)` gives a child: the same family bound to one series (made on first use, at 0)."""

    kind = ""  # its TYPE in the exposition
    bounds: tuple[float, ...] = ()  # a histogram's buckets' upper bounds

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = ()) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._lock = threading.Lock()
        self._series: dict[tuple[str, ...], _Series] = {}
        self._children: dict[tuple[str, ...], _Family] = {}
        self._mine: _Series | None = None
        if not self.labelnames:
            self._mine = self._series[()] = self._new()

    def _new(self) -> _Series:
        return _Series(len(self.bounds))

    def _one(self) -> _Series:
        if self._mine is None:
            raise ValueError(f"{self.name} has labels: use .labels(...) first")
        return self._mine

    def labels(self: S, *values: object) -> S:
        if len(values) != len(self.labelnames) or self._mine is not None:
            raise ValueError(f"{self.name}: {len(self.labelnames)} label values expected")
        key = tuple(str(v) for v in values)
        child = self._children.get(key)
        if child is None:
            with self._lock:
                child = self._children.get(key)
                if child is None:
                    child = copy.copy(self)
                    child._mine = self._series[key] = self._new()
                    self._children[key] = child
        return child  # type: ignore[return-value]

    def value(self) -> float:
        """The series' number now (a counter's count, a gauge's value, a histogram's sum)."""
        with self._lock:
            return self._one().value

    def pairs(self, values: tuple[str, ...]) -> list[tuple[str, str]]:
        return list(zip(self.labelnames, values, strict=True))

    def _exposed(self) -> str:
        """The name its samples and its HELP and TYPE lines carry."""
        return self.name

    def _samples(self, pairs: list[tuple[str, str]], value: float, buckets: Sequence[float]) -> list[str]:
        return [f"{self._exposed()}{_labels(pairs)} {go_float(value)}\n"]

    def lines(self, created: bool) -> list[str]:
        """Its part of the page: HELP, TYPE, each series' samples, then (not for a gauge) when each was made."""
        head, doc = self._exposed(), _help(self.documentation)
        out = [f"# HELP {head} {doc}\n", f"# TYPE {head} {self.kind}\n"]
        with self._lock:
            series = [(values, s.value, list(s.buckets), s.created) for values, s in self._series.items()]
        for values, value, buckets, _ in series:
            out += self._samples(self.pairs(values), value, buckets)
        if created and series and self.kind != "gauge":
            out += [f"# HELP {self.name}_created {doc}\n", f"# TYPE {self.name}_created gauge\n"]
            for values, _, _, when in series:
                out.append(f"{self.name}_created{_labels(self.pairs(values))} {go_float(when)}\n")
        return out


class Counter(_Family):
    kind = "counter"

    def inc(self, amount: float = 1) -> None:
        if amount < 0:
            raise ValueError("counters only go up")
        with self._lock:
            self._one().value += amount

    def _exposed(self) -> str:
        return f"{self.name}_total"


class Gauge(_Family):
    kind = "gauge"

    def set(self, value: float) -> None:
        with self._lock:
            self._one().value = float(value)

    def inc(self, amount: float = 1) -> None:
        with self._lock:
            self._one().value += amount

    def dec(self, amount: float = 1) -> None:
        self.inc(-amount)


class Histogram(_Family):
    """Observations in BUCKETS (and +Inf)."""

    kind = "histogram"
    bounds = (*BUCKETS, INF)

    def observe(self, amount: float) -> None:
        with self._lock:
            s = self._one()
            s.value += amount
            for i, bound in enumerate(self.bounds):
                if amount <= bound:
                    s.buckets[i] += 1
                    break

    def _samples(self, pairs: list[tuple[str, str]], value: float, buckets: Sequence[float]) -> list[str]:
        out: list[str] = []
        acc = 0.0
        for bound, n in zip(self.bounds, buckets, strict=True):
            acc += n
            out.append(f"{self.name}_bucket{_labels([*pairs, ('le', go_float(bound))])} {go_float(acc)}\n")
        out.append(f"{self.name}_count{_labels(pairs)} {go_float(acc)}\n")
        return [*out, f"{self.name}_sum{_labels(pairs)} {go_float(value)}\n"]


def _help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


# What netcomp_foreign_ignored_total counts, shown at 0 from the start (netcomp/foreign.py takes any kind).
FOREIGN_KINDS = ("AddressBlock", "AddressClaim", "Service", "Pod", "checkpoint", "device-info")


class Metrics:
    """The daemon's families; the page shows them in the order they are made here."""

    def __init__(self) -> None:
        self.foreign_ignored = Counter(
            "netcomp_foreign_ignored",
            "Objects and files other writers made that netcomp ignored for what they claim (logged once each, "
            "naming the writer), by kind",
            ["kind"],
        )
        self.requests = Counter("netcomp_cni_requests", "CNI requests served", ["verb", "outcome"])
        self.latency = Histogram("netcomp_cni_request_seconds", "CNI request latency", ["verb"])
        self.delegate = Histogram("netcomp_delegate_seconds", "Delegate plugin execution time", ["plugin", "verb"])
        self.delegate_failures = Counter(
            "netcomp_delegate_failures", "Delegate plugin executions that failed", ["plugin", "verb"]
        )
        self.in_flight = Gauge("netcomp_requests_in_flight", "Requests being served")
        self.queued = Gauge("netcomp_requests_queued", "Requests waiting for a slot (maxInFlight)")
        self.connections = Gauge("netcomp_connections", "Connections open on the socket")
        self.ipam = Counter(
            "netcomp_ipam_claims",
            "Addresses (ipam: {type: cluster}) by event: allocation, borrow (from another node's block), "
            "conflict (taken by another: the store refused the name), release, rollback, gc, block (a block "
            "claimed), release-block",
            ["event", "network"],
        )
        self.recovered = Counter(
            "netcomp_recovered_attachments",
            "Attachments a daemon found unfinished at start-up (left by one that died mid-ADD), by outcome",
            ["outcome"],
        )
        self.networks = Gauge("netcomp_networks", "Networks compiled and served")
        self.degraded = Gauge("netcomp_degraded", "1 when an intent is broken and its last good output is kept")
        self.rejected = Counter("netcomp_requests_rejected", "Requests refused before serving", ["reason"])
        self.kube_errors = Counter(
            "netcomp_kubernetes_errors",
            "Kubernetes API calls that failed (watch: objects, pods, Services; read, patch: pods; event; slice: "
            "EndpointSlice writes; dropped: writes the full queue could not take)",
            ["op"],
        )
        self.pod_lookups = Counter(
            "netcomp_pod_lookups",
            "Pods an ADD looked up, by where they came from: watch (the node's pods, no API call) or api (a "
            "GET: a pod the watch had not delivered yet)",
            ["source"],
        )
        self.policy_writes = Histogram(
            "netcomp_policy_table_seconds",
            "Writes of a pod's nftables table of MultiNetworkPolicy rules (one transaction each), by outcome",
            ["outcome"],
        )
        for source in ("watch", "api"):
            self.pod_lookups.labels(source)  # shown at 0 before the first ADD
        for outcome in ("written", "failed"):
            self.policy_writes.labels(outcome)
        for op in ("watch", "read", "patch", "event", "dropped", "slice"):
            self.kube_errors.labels(op)
        for kind in FOREIGN_KINDS:
            self.foreign_ignored.labels(kind)

    def render(self) -> bytes:
        created = _created_series()
        families = [f for f in vars(self).values() if isinstance(f, _Family)]
        return "".join(line for f in families for line in f.lines(created)).encode()
