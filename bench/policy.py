#!/usr/bin/env python3
"""MultiNetworkPolicy's cost on a node (root): its memory, how soon a change is in force, what it adds to an ADD.
A kube-apiserver and etcd (tests/lab/kubeapi.py) and node daemons as processes (`netcomp daemon --root`) run in a
network namespace this script makes, with the real bridge and host-local plugins and the compiled shim. The
cluster is filled with --pods pod objects bound to other nodes (labels from a small realistic set: app, tier,
role, pod-template-hash; two in three carry a network-status) in --pods/300 namespaces and the five namespaces of
the node's pods, then --policies MultiNetworkPolicies (most select nothing on the node; a few per node namespace
select its pods on `polnet`, the node's bridge network every node pod joins as net1). Rows, each with its goal:

  (p1) RSS of the node's daemon (kubernetes.policies on) once it follows the policies, namespaces and pods'
       metadata, minus its RSS before any policy existed (the same process, the same pods in the cluster;
       it follows nothing of them then); also a daemon started with everything there against one with
       kubernetes.policies false                                                              <= +15 MB
  (p2) --nodepods pods on the node, attached through the shim: a series of --changes changes (a policy
       edited, a pod's label edited, a namespace's label edited, a peer pod added or removed elsewhere, a
       peer pod attached or detached on this node), each timed from the API call (or the shim's answer)
       until every affected pod's table (`nft -j list table inet netcomp` in its namespace, polled by a
       thread per pod, POLL apart) shows it: p50 and p99                                       p99 <= 1 s
  (p3) the ADD of a pod a policy selects / the ADD of one none selects (the same namespace and
       networks), interleaved, medians of --adds each                                            <= 1.10

A daemon knows every policy and pod when its probe pod's table holds the sentinel: a pod created after all the
others, selected by a policy created after all the others. Printed also: how long filling the cluster took, the
daemon's CPU per change, in (p3) its CPU per ADD and DEL and in each ADD till its answer (less swayed by other
work on the machine than the ADD's time), and with --profile FILE py-spy's samples of the daemon.
Usage: sudo bench/policy.py [--pods 30000] [--policies 1000] [--nodepods 100] [--changes 30] [--adds 30]
[--quick] [--profile FILE] [--base TREE]
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import importlib.util
import ipaddress
import json
import os
import ssl
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from netcomp.host.nsenter import inside  # noqa: E402
from netcomp.policy import nft  # noqa: E402
from tests.lab.kubeapi import ADMIN_TOKEN, api_server  # noqa: E402

_spec = importlib.util.spec_from_file_location("bench_memory", Path(__file__).with_name("memory.py"))
assert _spec is not None and _spec.loader is not None
bench_memory = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_memory)
bench_delegate = bench_memory.bench_delegate
GOALS = {"p1": 15.0, "p2": 1.0, "p3": 1.10}
NODE = "bench-node"
MNP = ("k8s.cni.cncf.io", "v1beta2")
POLNET = ipaddress.ip_network("10.200.0.0/16")  # the node's polnet (host-local)
NODE_NS = [f"pb-{k}" for k in range(5)]
APPS = ("db", "cache", "web", "api", "worker", "batch", "frontend", "queue")
SELECTED = ("db", "cache")  # the node pods the node namespaces' policies isolate
POLL = 0.005
STATUS, NETWORKS = "k8s.v1.cni.cncf.io/network-status", "k8s.v1.cni.cncf.io/networks"


# ---------------------------------------------------------------------------------------------------- the cluster


class Api:
    """Bulk writes over plain HTTPS keep-alive connections (one per thread), the admin's token: the Python client
    decodes every answer into models, which would make filling the cluster the client's work."""

    def __init__(self, url: str, ca: Path) -> None:
        u = urlparse(url)
        self.host, self.port = u.hostname or "127.0.0.1", u.port or 443
        self.ctx = ssl.create_default_context(cafile=str(ca))
        self.local = threading.local()

    def call(self, method: str, path: str, body: Any = None, ctype: str = "application/json") -> dict[str, Any]:
        for attempt in range(5):
            conn = getattr(self.local, "conn", None)
            if conn is None:
                conn = self.local.conn = http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=60)
            try:
                data = None if body is None else json.dumps(body).encode()
                conn.request(method, path, data, {"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": ctype})
                r = conn.getresponse()
                text = r.read()
            except (OSError, http.client.HTTPException):
                conn.close()
                self.local.conn = None
                time.sleep(0.2 * (attempt + 1))
                continue
            if r.status == 429 or r.status >= 500:
                time.sleep(0.2 * (attempt + 1))
                continue
            if r.status >= 300:
                raise SystemExit(f"{method} {path}: {r.status} {text[:300]!r}")
            return dict(json.loads(text))
        raise SystemExit(f"{method} {path}: the API server did not answer")

    def many(self, method: str, jobs: list[tuple[str, Any]], threads: int = 12) -> None:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(lambda j: self.call(method, *j), jobs))

    def pod(self, ns: str, name: str, labels: dict[str, str], node: str, status: str | None = None,
            networks: str | None = None) -> dict[str, Any]:  # fmt: skip
        ann = {k: v for k, v in ((STATUS, status), (NETWORKS, networks)) if v is not None}
        meta = {"name": name, "namespace": ns, "labels": labels, "annotations": ann}
        spec = {"nodeName": node, "containers": [{"name": "c", "image": "registry.invalid/app:1"}]}
        return self.call("POST", f"/api/v1/namespaces/{ns}/pods", {"apiVersion": "v1", "kind": "Pod",
                                                                    "metadata": meta, "spec": spec})  # fmt: skip

    def merge(self, path: str, body: Any) -> None:
        self.call("PATCH", path, body, "application/merge-patch+json")


def mnp(ns: str, name: str, net: str, spec: dict[str, Any]) -> dict[str, Any]:
    meta = {"name": name, "namespace": ns, "annotations": {"k8s.v1.cni.cncf.io/policy-for": net}}
    return {"apiVersion": "/".join(MNP), "kind": "MultiNetworkPolicy", "metadata": meta, "spec": spec}


def mnp_path(ns: str, name: str = "") -> str:
    return f"/apis/{MNP[0]}/{MNP[1]}/namespaces/{ns}/multi-networkpolicies" + (f"/{name}" if name else "")


def sel(**labels: str) -> dict[str, Any]:
    return {"matchLabels": labels}


SELECTED_PODS = {"matchExpressions": [{"key": "app", "operator": "In", "values": list(SELECTED)}]}


def node_policies(ns: str, filler: int) -> list[dict[str, Any]]:
    """A node namespace's policies: three that select its node pods on polnet, `filler` that select nothing there
    (another app, or another network)."""
    out = [
        mnp(ns, "db-in", "polnet", {"podSelector": SELECTED_PODS, "policyTypes": ["Ingress"],
                                    "ingress": [{"from": [{"podSelector": sel(role="client")}]}]}),
        mnp(ns, "db-from-ns", "polnet", {"podSelector": SELECTED_PODS, "policyTypes": ["Ingress"],
                                         "ingress": [{"from": [{"namespaceSelector": sel(access=f"open-{ns}")}]}]}),
        mnp(ns, "web-out", "polnet", {"podSelector": sel(app="web"), "policyTypes": ["Egress"], "egress": [
            {"to": [{"podSelector": sel(app="db")}], "ports": [{"protocol": "TCP", "port": 5432}]},
            {"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}]}),
    ]  # fmt: skip
    for i in range(filler):
        other = i % 2 == 0
        spec = {"podSelector": sel(app="db" if other else "batch"), "policyTypes": ["Ingress"],
                "ingress": [{"from": [{"podSelector": sel(app=APPS[i % len(APPS)])}],
                             "ports": [{"protocol": "TCP", "port": 8000 + i}]}]}  # fmt: skip
        out.append(mnp(ns, f"fill-{i}", "othernet" if other else "polnet", spec))
    return out


def bulk_policy(ns: str, i: int) -> dict[str, Any]:
    """One of the policies of the namespaces with no node pod, in four shapes."""
    app, net = APPS[i % len(APPS)], f"{ns}/bk-net"
    shape = i % 4
    if shape == 0:
        spec = {
            "podSelector": sel(app=app),
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": sel(role="client")}], "ports": [{"port": 8080}]}],
        }
    elif shape == 1:
        spec = {
            "podSelector": sel(app=app),
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"namespaceSelector": sel(team=f"t{i % 7}")}]}],
        }
    elif shape == 2:
        spec = {
            "podSelector": sel(app=app),
            "policyTypes": ["Egress"],
            "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.9.0.0/16"]}}]}],
        }
    else:
        spec = {
            "podSelector": {},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [{"namespaceSelector": sel(team=f"t{i % 7}"), "podSelector": sel(tier="frontend")}],
                    "ports": [{"port": "http"}, {"protocol": "UDP", "port": 9000, "endPort": 9100}],
                }
            ],
        }
    return mnp(ns, f"p-{i}", net, spec)  # fmt: skip


class Cluster:
    """The objects of the run: what was made, and the addresses of the polnet peers on other nodes."""

    def __init__(self, api: Api, args: argparse.Namespace) -> None:
        self.api, self.args = api, args
        self.bulk_ns = [f"bk-{i:03d}" for i in range(max(1, args.pods // 300))]
        self.peers: dict[str, list[tuple[str, str]]] = {ns: [] for ns in NODE_NS}  # role=server pods: (name, ip)
        self._ip = 0

    def polnet_ip(self) -> str:
        self._ip += 1
        return str(ipaddress.ip_address(int(ipaddress.ip_address("10.201.0.0")) + self._ip))

    def fill_pods(self) -> None:
        ns_jobs = [(n, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n, "labels": {
                       "team": f"t{i % 7}", "env": ("prod", "staging")[i % 2]}}})
                   for i, n in enumerate([*self.bulk_ns, *NODE_NS, "pb-probe"])]  # fmt: skip
        self.api.many("POST", [("/api/v1/namespaces", body) for _, body in ns_jobs])
        per_node_ns = min(200, self.args.pods // 30)
        jobs = []
        for i in range(self.args.pods):
            ns = NODE_NS[i % len(NODE_NS)] if i < per_node_ns * len(NODE_NS) else self.bulk_ns[i % len(self.bulk_ns)]
            group = i // 10  # a Deployment's replicas share their labels
            app = APPS[group % len(APPS)]
            role = "client" if app in ("web", "frontend", "worker") else "server"
            labels = {"app": app, "tier": "frontend" if app in ("web", "frontend") else "backend", "role": role,
                      "pod-template-hash": f"{(group * 2654435761) & 0xFFFFFFFF:08x}"[:10]}  # fmt: skip
            status = None
            if i % 3 or ns in NODE_NS:
                sec, ip = (("polnet", self.polnet_ip()) if ns in NODE_NS else
                           (f"{ns}/bk-net", f"10.202.{(i >> 8) & 255}.{i & 255}"))  # fmt: skip
                status = json.dumps(
                    [
                        {
                            "name": "cluster-default",
                            "interface": "eth0",
                            "ips": [f"10.244.{(i >> 8) & 255}.{i & 255}"],
                            "mac": "0a:58:0a:f4:00:01",
                            "default": True,
                            "dns": {},
                        },
                        {"name": sec, "interface": "net1", "ips": [ip], "mac": "0a:58:0a:ca:00:01", "dns": {}},
                    ]
                )
                if ns in NODE_NS and role == "server":
                    self.peers[ns].append((f"w-{i}", ip))
            meta = {
                "name": f"w-{i}",
                "namespace": ns,
                "labels": labels,
                "annotations": {STATUS: status} if status else {},
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "ReplicaSet",
                        "name": f"rs-{group}",
                        "uid": f"00000000-0000-0000-0000-{group:012d}",
                        "controller": True,
                    }
                ],
            }
            spec = {
                "nodeName": f"other-{i % 500:03d}",
                "containers": [
                    {
                        "name": app,
                        "image": f"registry.invalid/{app}:1",
                        "ports": [{"name": "http", "containerPort": 8080}],
                    }
                ],
            }
            jobs.append((f"/api/v1/namespaces/{ns}/pods", {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                                                            "spec": spec}))  # fmt: skip
        self.api.many("POST", jobs)

    def fill_policies(self) -> None:
        """All but the probe's policy (which comes last: see sentinel())."""
        filler = max(0, min(20, (self.args.policies - 1) // 10 - 3))
        made = [p for ns in NODE_NS for p in node_policies(ns, filler)]
        made += [bulk_policy(self.bulk_ns[i % len(self.bulk_ns)], i) for i in range(self.args.policies - 1 - len(made))]
        self.api.many("POST", [(mnp_path(p["metadata"]["namespace"]), p) for p in made])

    def sentinel(self) -> str:
        """The probe policy (after every other policy) and the sentinel pod it lets in (after every other pod):
        the sentinel's polnet address, which a daemon's probe table holds once it has seen both."""
        ip = "10.203.0.1"
        status = json.dumps([{"name": "polnet", "interface": "net1", "ips": [ip]}])
        self.api.pod("pb-probe", "sentinel", {"role": "sentinel"}, "other-000", status)
        spec = {"podSelector": sel(app="probe"), "policyTypes": ["Ingress"],
                "ingress": [{"from": [{"podSelector": sel(role="sentinel")}]}]}  # fmt: skip
        self.api.call("POST", mnp_path("pb-probe"), mnp("pb-probe", "probe-in", "polnet", spec))
        return ip


# ---------------------------------------------------------------------------------------------------- the node


def node_root(base: Path, kubeconfig: Path, node: str, n: int, policies: bool) -> None:
    """A node: mgmt (a bridge, the default network) and polnet (a bridge on POLNET, host-local), both static
    files; kubernetes configured as `node` (pods, network-status, events; no Network objects)."""
    nets = bench_delegate.default_bridge(base, f"ncpm{n}", f"10.{150 + n}.0.0/16")
    ipam = {"type": "host-local", "dataDir": f"{base}/ipam", "subnet": str(POLNET)}
    conf = {"cniVersion": "1.0.0", "name": "polnet", "plugins": [{"type": "bridge", "bridge": f"ncpp{n}",
                                                                  "ipam": ipam}]}  # fmt: skip
    (base / "etc/netcomp/static.d/polnet.conflist").write_text(json.dumps(conf))
    (nets / "polnet.yaml").write_text(
        "apiVersion: netcomp.io/v1\nkind: Network\nmetadata: {name: polnet}\nspec: {type: static, networkID: polnet}\n"
    )
    (base / "etc/netcomp/kubeconfig").write_bytes(kubeconfig.read_bytes())
    (base / "etc/netcomp/netcomp.yaml").write_text(
        f"defaultNetwork: mgmt\nnodeName: {node}\nmaxInFlight: 64\nkubernetes:\n  kubeconfig: /etc/netcomp/kubeconfig\n"
        f"  networks: false\n  policies: {str(policies).lower()}\n"
    )


class Node:
    """A daemon process serving `node`, and the pods it has attached: (namespace, name) -> (container, netns,
    uid, polnet address)."""

    def __init__(self, top: Path, api: Any, cluster: Cluster, exe: str, netns: Any, node: str, n: int,
                 policies: bool) -> None:  # fmt: skip
        self.base, self.api, self.cluster, self.exe, self.netns, self.node = top / node, api, cluster, exe, netns, node
        node_root(self.base, api.node_kubeconfig, node, n, policies)
        self.daemon = bench_memory.Daemon(self.base)
        self.ready = self.daemon.ready()
        self.pods: dict[tuple[str, str], tuple[str, str, str, str]] = {}
        self.lock = threading.Lock()
        self.conf = json.dumps({"cniVersion": "1.0.0", "name": "netcomp", "type": "netcomp",
                                "socket": f"{self.base}/run/netcomp/netcomp.sock"}).encode()  # fmt: skip

    def shim(self, cmd: str, ns: str, name: str) -> tuple[float, dict[str, Any]]:
        ctr, netns, uid, _ = self.pods[(ns, name)]
        env = {"CNI_COMMAND": cmd, "CNI_CONTAINERID": ctr, "CNI_NETNS": f"/var/run/netns/{netns}",
               "CNI_IFNAME": "eth0", "CNI_PATH": bench_memory.PLUGINS,
               "CNI_ARGS": f"IgnoreUnknown=1;K8S_POD_NAMESPACE={ns};K8S_POD_NAME={name};"
                           f"K8S_POD_INFRA_CONTAINER_ID={ctr};K8S_POD_UID={uid}"}  # fmt: skip
        t = time.perf_counter()
        p = subprocess.run([self.exe], input=self.conf, env=env, capture_output=True, timeout=120)
        took = time.perf_counter() - t
        if p.returncode != 0:
            raise SystemExit(f"shim {cmd} {ns}/{name} failed: {p.stdout.decode()[:500]}; see {self.base}/daemon.log")
        return took, json.loads(p.stdout) if p.stdout.strip() else {}

    def add(self, ns: str, name: str, labels: dict[str, str], create: bool = True) -> float:
        """The pod made (bound to the node, asking for polnet) and attached; the ADD's seconds."""
        uid = ""
        if create:
            uid = self.cluster.api.pod(ns, name, labels, self.node, networks="polnet")["metadata"]["uid"]
        else:
            uid = self.cluster.api.call("GET", f"/api/v1/namespaces/{ns}/pods/{name}")["metadata"]["uid"]
        with self.lock:
            netns = self.netns()
        self.pods[(ns, name)] = (f"c-{ns}-{name}", netns, uid, "")
        took, _ = self.shim("ADD", ns, name)
        shown = subprocess.run(["ip", "-j", "-n", netns, "addr", "show", "net1"], capture_output=True, check=True)
        ip = next(a["local"] for a in json.loads(shown.stdout)[0]["addr_info"] if a["family"] == "inet")
        self.pods[(ns, name)] = (*self.pods[(ns, name)][:3], ip)
        return took

    def delete(self, ns: str, name: str, remove: bool = True) -> float:
        took, _ = self.shim("DEL", ns, name)
        if remove:
            self.cluster.api.call("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}", {"gracePeriodSeconds": 0})
        self.pods.pop((ns, name))
        return took

    def ip(self, ns: str, name: str) -> str:
        return self.pods[(ns, name)][3]

    def path(self, ns: str, name: str) -> str:
        return f"/var/run/netns/{self.pods[(ns, name)][1]}"

    def stop(self) -> None:
        for ns, name in list(self.pods):
            with contextlib.suppress(SystemExit, subprocess.TimeoutExpired):
                self.shim("DEL", ns, name)
        self.daemon.stop()


def table_nets(netns: str) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """Every address (as networks) in the sets of the pod's policy table: [] when it has none."""

    def work() -> Any:  # nft inherits the namespace of the thread that starts it
        argv = [nft.NFT, "-j", "list", "table", nft.FAMILY, nft.TABLE]
        return subprocess.run(argv, env=nft.ENV, capture_output=True, timeout=30, check=False)

    res = inside(netns, work, "read the policy table")
    if res.returncode != 0:
        return []
    out: list[Any] = []
    for item in json.loads(res.stdout)["nftables"]:
        for e in item.get("set", {}).get("elem", ()):
            e = e["elem"]["val"] if isinstance(e, dict) and "elem" in e else e
            if isinstance(e, str):
                out.append(ipaddress.ip_network(e))
            elif "prefix" in e:
                out.append(ipaddress.ip_network(f"{e['prefix']['addr']}/{e['prefix']['len']}"))
            elif "range" in e:
                a, b = (ipaddress.ip_address(x) for x in e["range"])
                out.extend(ipaddress.summarize_address_range(a, b))  # type: ignore[arg-type]
    return out


def holds(netns: str, ip: str) -> bool:
    addr = ipaddress.ip_address(ip)
    return any(addr in n for n in table_nets(netns))


def until_all(paths: list[str], ip: str, want: bool, t0: float, timeout: float = 60) -> float:
    """Seconds from t0 until every table (a thread each, polling POLL apart) holds `ip` (want) or not; the time
    a table is taken as showing it is the end of the read that saw it."""

    def one(path: str) -> float:
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            if holds(path, ip) == want:
                return time.perf_counter() - t0
            time.sleep(POLL)
        return float("inf")

    with ThreadPoolExecutor(len(paths)) as pool:
        return max(pool.map(one, paths))


def probe(node: Node, ip: str, timeout: float = 1800) -> float:
    """Until the node's probe pod's table holds the sentinel's address: its seconds."""
    t = time.perf_counter()
    return until_all([node.path("pb-probe", f"probe-{node.node}")], ip, True, t, timeout)


def quiet(pid: int, timeout: float = 120, window: float = 1.0) -> None:
    """Until the process has used under 5% of a CPU for `window` seconds (its work on what it was told is done)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        a = cpu_s(pid)
        time.sleep(window)
        if cpu_s(pid) - a < 0.05 * window:
            return


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------------------------------- the rows


def row_p1(top: Path, kapi: Any, cluster: Cluster, exe: str, netns: Any, out: dict[str, Any]) -> Node:
    """(p1): the node's daemon (policies on) and one with policies off, before and after the policies; then a
    daemon started with everything there. Returns the node's daemon (for p2 and p3)."""
    on = Node(top, kapi, cluster, exe, netns, NODE, 0, True)
    off = Node(top, kapi, cluster, exe, netns, "bench-off", 1, False)
    try:
        for n in (on, off):
            n.add("pb-probe", f"probe-{n.node}", {"app": "probe"})
            for i in range(5):  # the ADD and DEL paths run once or more before RSS is read
                n.add("pb-probe", f"warm-{n.node}-{i}", {"app": "warm"})
                n.delete("pb-probe", f"warm-{n.node}-{i}")
        for n in (on, off):
            quiet(n.daemon.pid)
        out["rss_on0"], out["rss_off0"] = on.daemon.settle(), off.daemon.settle()
        t = time.perf_counter()
        cluster.fill_policies()
        ip = cluster.sentinel()
        out["fill_policies_s"] = time.perf_counter() - t
        out["known_s"] = probe(on, ip)
        quiet(on.daemon.pid)
        out["rss_on1"], out["rss_off1"] = on.daemon.settle(), off.daemon.settle()
        out["hwm_on"] = bench_memory.status(on.daemon.pid, "VmHWM")
    except BaseException:
        on.stop()
        raise
    finally:
        off.stop()
    fresh = Node(top, kapi, cluster, exe, netns, "bench-fresh", 2, True)
    try:
        fresh.add("pb-probe", f"probe-{fresh.node}", {"app": "probe"})
        out["fresh_known_s"] = probe(fresh, ip) + fresh.ready
        quiet(fresh.daemon.pid)
        out["rss_fresh"], out["hwm_fresh"] = fresh.daemon.settle(), bench_memory.status(fresh.daemon.pid, "VmHWM")
    finally:
        fresh.stop()
    return on


def attach_node_pods(node: Node, n: int, prefix: str = "n") -> dict[tuple[str, str], str]:
    """n pods on the node, spread over the node namespaces (db, cache, web, api in turn in each); their apps."""
    apps = {(NODE_NS[k % len(NODE_NS)], f"{prefix}-{k}"): ("db", "cache", "web", "api")[(k // len(NODE_NS)) % 4]
            for k in range(n)}  # fmt: skip
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda key: node.add(*key, {"app": apps[key], "role": "server"}), apps))
    return apps


class Changes:
    """The change series of (p2): each kind turns something on in namespace NODE_NS[k] (and off, the next time
    the same kind comes to the same namespace), returning (t0, the address, whether it should be in the tables)."""

    KINDS = ("policy", "pod-label", "ns-label", "peer-elsewhere", "peer-on-node")

    def __init__(self, node: Node, cluster: Cluster) -> None:
        self.node, self.cluster, self.api = node, cluster, cluster.api
        self.on: dict[tuple[str, int], Any] = {}
        self.count = 0

    def run(self, kind: str, k: int) -> tuple[float, str, bool]:
        self.count += 1
        key = (kind, k)
        was = self.on.pop(key, None)
        turn_on = was is None
        got = getattr(self, kind.replace("-", "_"))(NODE_NS[k], k, was)
        if turn_on:
            self.on[key] = got[1]
        return got

    def policy(self, ns: str, k: int, was: Any) -> tuple[float, str, bool]:
        ip = f"192.0.2.{self.count % 250 + 1}"
        spec = {"ingress": [{"from": [{"podSelector": sel(role="client")}]},
                            {"from": [{"ipBlock": {"cidr": f"{ip}/32"}}]}]}  # fmt: skip
        t0 = time.perf_counter()
        self.api.merge(mnp_path(ns, "db-in"), {"spec": spec})
        return t0, ip, True

    def pod_label(self, ns: str, k: int, was: Any) -> tuple[float, str, bool]:
        name, ip = self.cluster.peers[ns][0]
        t0 = time.perf_counter()
        self.api.merge(f"/api/v1/namespaces/{ns}/pods/{name}",
                       {"metadata": {"labels": {"role": "server" if was else "client"}}})  # fmt: skip
        return t0, ip, not was

    def ns_label(self, ns: str, k: int, was: Any) -> tuple[float, str, bool]:
        other = NODE_NS[(k + 1) % len(NODE_NS)]
        ip = next(self.node.ip(s, name) for s, name in self.node.pods if s == other)
        t0 = time.perf_counter()
        self.api.merge(f"/api/v1/namespaces/{other}",
                       {"metadata": {"labels": {"access": None if was else f"open-{ns}"}}})  # fmt: skip
        return t0, ip, not was

    def peer_elsewhere(self, ns: str, k: int, was: Any) -> tuple[float, str, bool]:
        if was:
            t0 = time.perf_counter()
            self.api.call("DELETE", f"/api/v1/namespaces/{ns}/pods/peer-{k}", {"gracePeriodSeconds": 0})
            return t0, was, False
        ip = f"10.204.0.{self.count % 250 + 1}"
        status = json.dumps([{"name": "polnet", "interface": "net1", "ips": [ip]}])
        t0 = time.perf_counter()
        self.api.pod(ns, f"peer-{k}", {"app": "client", "role": "client"}, "other-001", status)
        return t0, ip, True

    def peer_on_node(self, ns: str, k: int, was: Any) -> tuple[float, str, bool]:
        if was:
            self.node.delete(ns, f"local-{k}", remove=False)  # the pod's object goes after its DEL, as a kubelet's
            t0 = time.perf_counter()
            self.api.call("DELETE", f"/api/v1/namespaces/{ns}/pods/local-{k}", {"gracePeriodSeconds": 0})
            return t0, was, False
        self.node.add(ns, f"local-{k}", {"app": "client", "role": "client"})
        return time.perf_counter(), self.node.ip(ns, f"local-{k}"), True


def row_p2(node: Node, cluster: Cluster, apps: dict[tuple[str, str], str], args: argparse.Namespace,
           out: dict[str, Any]) -> None:  # fmt: skip
    changes = Changes(node, cluster)
    spy = bench_delegate._spy(node.daemon.pid, f"{args.profile}.p2") if args.profile else None
    cpu0, rows = cpu_s(node.daemon.pid), []
    try:
        for i in range(args.changes):
            kind, k = Changes.KINDS[i % len(Changes.KINDS)], (i // len(Changes.KINDS)) % len(NODE_NS)
            paths = [node.path(*key) for key, app in apps.items() if key[0] == NODE_NS[k] and app in SELECTED]
            t0, ip, want = changes.run(kind, k)
            took = until_all(paths, ip, want, t0)
            rows.append((kind, took, len(paths)))
            quiet(node.daemon.pid, window=0.3)
    finally:
        if spy is not None:
            spy.send_signal(2)
            spy.wait(60)
    out["p2_cpu_per_change_s"] = (cpu_s(node.daemon.pid) - cpu0) / max(1, len(rows))
    out["p2"] = rows


def row_p3(nodes: list[Node], cluster: Cluster, runs: int, out: dict[str, Any], profile: str | None) -> None:
    """ADDs of a selected pod (app=db in pb-0) and of one no policy selects (app=plain), interleaved, on each
    node in turn (the node's daemon, and with --base the same from the tree before); each ADD made once the
    daemons are quiet, each DEL after it untimed. The pods' objects are made first."""
    names = [(f"{k}{side}-{r}", app, n.node) for k, n in enumerate(nodes) for r in range(runs)
             for side, app in (("sel", "db"), ("uns", "plain"))]  # fmt: skip
    cluster.api.many("POST", [("/api/v1/namespaces/pb-0/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": n, "labels": {"app": app, "role": "server"},
                                                        "annotations": {NETWORKS: "polnet"}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "registry.invalid/none"}]}})
        for n, app, node in names])  # fmt: skip
    for n in nodes:
        quiet(n.daemon.pid)
    got: dict[str, list[float]] = {f"{k}{side}": [] for k in range(len(nodes)) for side in ("sel", "uns")}
    cpu = {key: 0.0 for key in got}  # the daemon's CPU seconds over each kind's ADDs (and the DELs after them)
    own: dict[str, list[float]] = {key: [] for key in got}  # the daemon's CPU seconds in each ADD, till its answer
    spy = bench_delegate._spy(nodes[0].daemon.pid, f"{profile}.p3") if profile else None
    try:
        for r in range(runs):
            for k in range(len(nodes)) if r % 2 == 0 else reversed(range(len(nodes))):
                for side in ("sel", "uns") if (r // 2 + k) % 2 == 0 else ("uns", "sel"):
                    for n in nodes:
                        quiet(n.daemon.pid, window=0.3)
                    before = cpu_s(nodes[k].daemon.pid)
                    took, used = _add(nodes[k], f"{k}{side}-{r}", side == "sel")
                    got[f"{k}{side}"].append(took)
                    own[f"{k}{side}"].append(used)
                    quiet(nodes[k].daemon.pid, window=0.3)
                    cpu[f"{k}{side}"] += cpu_s(nodes[k].daemon.pid) - before
    finally:
        if spy is not None:
            spy.send_signal(2)
            spy.wait(60)
    for k, row in enumerate(("p3", "p3_base")[: len(nodes)]):
        out[row] = {"sel": got[f"{k}sel"], "uns": got[f"{k}uns"], "cpu": [cpu[f"{k}sel"] / runs, cpu[f"{k}uns"] / runs],
                    "own": [statistics.median(own[f"{k}sel"]), statistics.median(own[f"{k}uns"])]}  # fmt: skip


def _add(node: Node, name: str, selected: bool) -> tuple[float, float]:
    """The ADD's seconds, and the daemon's CPU seconds from its start till its answer (its threads')."""
    before = bench_delegate._cpu_ns(node.daemon.pid)
    took = node.add("pb-0", name, {}, create=False)
    after = bench_delegate._cpu_ns(node.daemon.pid)
    used = sum(ns - before.get(task, 0) for task, ns in after.items()) / 1e9
    table = nft.read(node.path("pb-0", name))
    if (table is not None) != selected:
        raise SystemExit(f"(p3) pod pb-0/{name} on {node.node}: its table {'missing' if table is None else 'there'}")
    node.delete("pb-0", name, remove=False)
    return took, used


def spy_summary(path: str, top: int = 14) -> list[str]:
    """py-spy's raw samples: the share of the samples each netcomp or library function was on the stack of
    (inclusive), the most first."""
    incl: Counter[str] = Counter()
    total = 0
    for line in Path(path).read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        total += int(n)
        frames = {f.split(" (")[0] + " (" + f.split(" (")[-1].split(":")[0].rsplit("/", 1)[-1] + ")"
                  for f in stack.split(";")[1:]}  # fmt: skip
        for f in frames:
            incl[f] += int(n)
    return [f"{100 * c / max(1, total):5.1f}%  {f}" for f, c in incl.most_common(top)]


def inner(args: argparse.Namespace) -> None:
    """Each row is printed as soon as it is measured (a later row failing leaves the earlier ones said)."""
    from netcomp.shim import install as shimlaunch

    out: dict[str, Any] = {}
    with bench_delegate.lab("policy", "ncp", ("ncpol0v", "ncpol0p")) as (top, netns):
        exe = str(top / "netcomp-c")
        shimlaunch.build(Path(exe), shimlaunch.find_cc() or "cc")
        with api_server(top / "kube") as kapi:
            cluster = Cluster(Api(kapi.url, kapi.ca), args)
            t = time.perf_counter()
            cluster.fill_pods()
            out["fill_pods_s"] = time.perf_counter() - t
            node = row_p1(top, kapi, cluster, exe, netns, out)
            say_p1(args, out)
            nodes = [node]
            try:
                if args.base:  # the same node, its daemon run from the tree before
                    with _pythonpath(args.base):
                        nodes.append(Node(top, kapi, cluster, exe, netns, "bench-base", 3, True))
                    attach_node_pods(nodes[1], args.nodepods, "b")
                t = time.perf_counter()
                apps = attach_node_pods(node, args.nodepods)
                out["attach_s"] = time.perf_counter() - t
                quiet(node.daemon.pid)
                row_p2(node, cluster, apps, args, out)
                say_p2(args, out)
                row_p3(nodes, cluster, args.adds, out, args.profile)
                out["rss_end"] = node.daemon.settle()
                say_p3(args, out)
            finally:
                for n in nodes:
                    n.stop()
                print(json.dumps(out), flush=True)


@contextlib.contextmanager
def _pythonpath(tree: str) -> Iterator[None]:
    """Daemons started meanwhile import netcomp from `tree`."""
    was = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = tree
    try:
        yield
    finally:
        if was is None:
            os.environ.pop("PYTHONPATH")
        else:
            os.environ["PYTHONPATH"] = was


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def say_p1(args: argparse.Namespace, out: dict[str, Any]) -> None:
    print(f"policy benchmark {time.strftime('%Y-%m-%d %H:%M')}, load {os.getloadavg()[0]:.1f}: {args.pods} pods "
          f"and {args.policies} policies in the cluster, {args.nodepods} pods on the node; filled in "
          f"{out['fill_pods_s']:.0f} s (pods) + {out['fill_policies_s']:.0f} s (policies)")  # fmt: skip
    d_same = out["rss_on1"] - out["rss_on0"]
    d_off = out["rss_fresh"] - out["rss_off1"]
    print(f"(p1) RSS, policies on: {out['rss_on0']:.1f} MB before any policy, {out['rss_on1']:.1f} MB following "
          f"them = {d_same:+.1f} MB   goal <= +{GOALS['p1']:.0f} MB: {verdict(d_same <= GOALS['p1'])}")  # fmt: skip
    print(f"     started with them: {out['rss_fresh']:.1f} MB, policies off: {out['rss_off1']:.1f} MB (before: "
          f"{out['rss_off0']:.1f}) = {d_off:+.1f} MB: {verdict(d_off <= GOALS['p1'])}; peak {out['hwm_on']:.1f} / "
          f"{out['hwm_fresh']:.1f} MB; everything known {out['known_s']:.1f} s after the last policy "
          f"({out['fresh_known_s']:.1f} s after a start)", flush=True)  # fmt: skip


def say_p2(args: argparse.Namespace, out: dict[str, Any]) -> None:
    rows = out["p2"]
    lat = sorted(r[1] for r in rows)
    p50, p99 = statistics.median(lat), lat[min(len(lat) - 1, round(0.99 * (len(lat) - 1)))]
    print(f"(p2) change to every affected table (of {rows[0][2]}): p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms "
          f"over {len(rows)} changes   goal p99 <= {GOALS['p2']:.0f} s: {verdict(p99 <= GOALS['p2'])}; daemon CPU "
          f"{out['p2_cpu_per_change_s'] * 1000:.0f} ms per change (node pods attached in "
          f"{out['attach_s']:.0f} s)")  # fmt: skip
    for kind in Changes.KINDS:
        xs = [r[1] * 1000 for r in rows if r[0] == kind]
        if xs:
            print(f"       {kind:15s} {', '.join(f'{x:.0f}' for x in xs)} ms")
    _spied(args, "p2")


def say_p3(args: argparse.Namespace, out: dict[str, Any]) -> None:
    sel, uns = statistics.median(out["p3"]["sel"]), statistics.median(out["p3"]["uns"])
    print(f"(p3) ADD selected {sel * 1000:.1f} ms / not selected {uns * 1000:.1f} ms = {sel / uns:.3f} (medians of "
          f"{len(out['p3']['sel'])})   goal <= {GOALS['p3']}: {verdict(sel / uns <= GOALS['p3'])}; daemon CPU per ADD "
          f"and its DEL {out['p3']['cpu'][0] * 1000:.1f} / {out['p3']['cpu'][1] * 1000:.1f} ms, in the ADD (median) "
          f"{out['p3']['own'][0] * 1000:.1f} / {out['p3']['own'][1] * 1000:.1f} ms")  # fmt: skip
    if "p3_base" in out:
        bs, bu = statistics.median(out["p3_base"]["sel"]), statistics.median(out["p3_base"]["uns"])
        print(f"     the same from --base {args.base}: {bs * 1000:.1f} ms / {bu * 1000:.1f} ms = {bs / bu:.3f}; CPU "
              f"{out['p3_base']['cpu'][0] * 1000:.1f} / {out['p3_base']['cpu'][1] * 1000:.1f} ms, in the ADD "
              f"{out['p3_base']['own'][0] * 1000:.1f} / {out['p3_base']['own'][1] * 1000:.1f} ms")  # fmt: skip
    print(f"     the node's daemon at the end: {out['rss_end']:.1f} MB")
    _spied(args, "p3")


def _spied(args: argparse.Namespace, row: str) -> None:
    if args.profile:
        print(f"py-spy over ({row}), share of the samples (inclusive); raw samples in {args.profile}.{row}:")
        for line in spy_summary(f"{args.profile}.{row}"):
            print("    " + line)
    sys.stdout.flush()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=30_000)
    ap.add_argument("--policies", type=int, default=1000)
    ap.add_argument("--nodepods", type=int, default=100)
    ap.add_argument("--changes", type=int, default=30)
    ap.add_argument("--adds", type=int)
    ap.add_argument("--quick", action="store_true", help="a small run: 2000 pods, 200 policies, 20 node pods, "
                    "10 changes, 10 ADDs each (unless --adds says)")  # fmt: skip
    ap.add_argument("--profile", metavar="FILE", help="py-spy's samples of the node's daemon over (p2)")
    ap.add_argument("--base", metavar="TREE", help="(p3) also on a node whose daemon runs netcomp from TREE (a "
                    "checkout of the code before), the ADDs of both interleaved")  # fmt: skip
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.quick:
        args.pods, args.policies, args.nodepods, args.changes = 2000, 200, 20, 10
    args.adds = args.adds or (10 if args.quick else 30)
    if os.geteuid() != 0:
        raise SystemExit("bench/policy.py needs root (network namespaces)")
    if args.inner:
        inner(args)
        return
    argv = [a for a in sys.argv[1:] if a != "--quick"]
    if args.profile:
        args.profile = str(Path(args.profile).resolve())
    if args.base:
        argv = [a for a in argv if a not in (args.base, "--base")] + ["--base", str(Path(args.base).resolve())]
    bench_delegate.in_host_netns("ncpol", [__file__, "--inner", *argv, *(["--quick"] if args.quick else [])])


if __name__ == "__main__":
    main()
