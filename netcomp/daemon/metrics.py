"""Prometheus metrics: requests per verb and outcome with latency, and every delegate exec per plugin and verb
(observed through the runner's Exec seam)."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from netcomp.cni.invoke import Exec, ExecResult

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "netcomp_cni_requests", "CNI requests served", ["verb", "outcome"], registry=self.registry
        )
        self.latency = Histogram(
            "netcomp_cni_request_seconds", "CNI request latency", ["verb"], buckets=BUCKETS, registry=self.registry
        )
        self.delegate = Histogram(
            "netcomp_delegate_seconds",
            "Delegate plugin execution time",
            ["plugin", "verb"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.delegate_failures = Counter(
            "netcomp_delegate_failures",
            "Delegate plugin executions that failed",
            ["plugin", "verb"],
            registry=self.registry,
        )
        self.in_flight = Gauge("netcomp_requests_in_flight", "Requests being served", registry=self.registry)
        self.queued = Gauge(
            "netcomp_requests_queued", "Requests waiting for a slot (maxInFlight)", registry=self.registry
        )
        self.connections = Gauge("netcomp_connections", "Connections open on the socket", registry=self.registry)
        self.ipam = Counter(
            "netcomp_ipam_claims",
            "Address claims (ipam: {type: cluster}) by event: allocation, conflict (taken by another: the store "
            "refused the name), release, rollback, gc",
            ["event", "network"],
            registry=self.registry,
        )
        self.recovered = Counter(
            "netcomp_recovered_attachments",
            "Attachments a daemon found unfinished at start-up (left by one that died mid-ADD), by outcome",
            ["outcome"],
            registry=self.registry,
        )
        self.networks = Gauge("netcomp_networks", "Networks compiled and served", registry=self.registry)
        self.degraded = Gauge(
            "netcomp_degraded", "1 when an intent is broken and its last good output is kept", registry=self.registry
        )
        self.rejected = Counter(
            "netcomp_requests_rejected", "Requests refused before serving", ["reason"], registry=self.registry
        )
        self.kube_errors = Counter(
            "netcomp_kubernetes_errors",
            "Kubernetes API calls that failed (watch: objects and pods; read, patch: pods; event; dropped: writes "
            "the full queue could not take)",
            ["op"],
            registry=self.registry,
        )
        self.pod_lookups = Counter(
            "netcomp_pod_lookups",
            "Pods an ADD looked up, by where they came from: watch (the node's pods, no API call) or api (a GET: "
            "a pod the watch had not delivered yet)",
            ["source"],
            registry=self.registry,
        )
        for source in ("watch", "api"):
            self.pod_lookups.labels(source)  # shown at 0 before the first ADD
        for op in ("watch", "read", "patch", "event", "dropped"):
            self.kube_errors.labels(op)

    def wrap(self, inner: Exec) -> Exec:
        def timed(argv: Sequence[str], env: Mapping[str, str], stdin: bytes, timeout: float) -> ExecResult:
            plugin, verb = os.path.basename(argv[-1]), env.get("CNI_COMMAND", "")
            t = time.perf_counter()
            try:
                res = inner(argv, env, stdin, timeout)
            except Exception:
                self.delegate_failures.labels(plugin, verb).inc()
                raise
            finally:
                self.delegate.labels(plugin, verb).observe(time.perf_counter() - t)
            if res.returncode != 0:
                self.delegate_failures.labels(plugin, verb).inc()
            return res

        return timed

    def render(self) -> bytes:
        return generate_latest(self.registry)
