#!/usr/bin/env python3
"""A node's cost with a cluster's fleet around it (root). One node's daemon as a process (`netcomp daemon --root`,
in a network namespace this script makes, kubernetes configured against a kube-apiserver + etcd it starts there)
serves one network with `ipam: {type: cluster}`; the API server is filled with the objects of a simulated fleet:
--nodes Node objects, --addresses addresses in use in --networks networks, as AddressBlock objects (blocks of 64
held by the fleet's nodes, the node's own network among them), and --claims AddressClaim objects of an earlier
version, of other networks. Rows, each with its goal:

  (f1) the idle daemon's RSS, kubernetes configured, an empty cluster, after 20 ADD/DEL cycles     <= 50 MB
  (f2) its RSS with the fleet / with the empty cluster (the same cycles)                           <= +5 MB
  (f3) start to READY=1 with the fleet                                                              <= 2 s
  (f4) watch events the node takes in while --churn writes change other networks' blocks           0
       (counted once the node's watch has delivered a block of its own network created after them)

Also printed: start to READY=1 with the empty cluster, the blocks of its network the node knows, how long
filling the API server took. Usage: sudo bench/fleet.py [--nodes 2000] [--addresses 100000] [--networks 50]
[--claims 20000] [--churn 2000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import ipaddress
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from netcomp.daemon.server.client import call  # noqa: E402
from netcomp.ipam import blockobjects  # noqa: E402
from netcomp.ipam.blocks import block_name  # noqa: E402
from netcomp.ipam.pool import claim_name, network_label  # noqa: E402
from tests.lab import poll  # noqa: E402
from tests.lab.kubeapi import api_server  # noqa: E402

_spec = importlib.util.spec_from_file_location("bench_memory", Path(__file__).with_name("memory.py"))
assert _spec is not None and _spec.loader is not None
bench_memory = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_memory)
bench_delegate = bench_memory.bench_delegate
GOALS = {"f1": 50.0, "f2": 5.0, "f3": 2.0, "f4": 0}
NODE = "bench-node"
BLOCK = 64


def subnet(i: int) -> ipaddress.IPv4Network:
    return ipaddress.ip_network(f"10.{64 + i // 4}.{(i % 4) * 64}.0/18", strict=False)


def node_root(base: Path, kubeconfig: Path) -> None:
    """The node: a bridge default network, and net-000 (macvlan, cluster IPAM over subnet(0)); kubernetes
    configured (pods followed, no Network objects: its networks are its own files)."""
    nets = bench_delegate.default_bridge(base, "ncfleet0", "10.150.0.0/16")
    (nets / "net-000.yaml").write_text(
        "apiVersion: netcomp.io/v1\nkind: Network\nmetadata: {name: net-000}\nspec: {type: macvlan, "
        f"hostDevice: ncfl0v, ipam: {{type: cluster, subnet: {subnet(0)}}}}}\n"
    )
    (base / "etc/netcomp/kubeconfig").write_bytes(kubeconfig.read_bytes())
    (base / "etc/netcomp/netcomp.yaml").write_text(
        f"defaultNetwork: mgmt\nnodeName: {NODE}\nkubernetes:\n  kubeconfig: /etc/netcomp/kubeconfig\n"
        "  networks: false\n"
    )


def fill(custom: Any, core: Any, args: argparse.Namespace) -> float:
    """The fleet's objects, made by 16 clients at once; the seconds it took."""
    t = time.perf_counter()
    per_net = args.addresses // args.networks
    blocks = []
    for n in range(args.networks):
        net, pool = f"net-{n:03d}", subnet(n)
        base = int(pool.network_address)
        for b in range((per_net + BLOCK - 1) // BLOCK):
            cidr = ipaddress.ip_network(f"{ipaddress.ip_address(base + (b + 1) * BLOCK)}/26")
            holder = f"fleet-{(n * 97 + b) % args.nodes:04d}"
            used = {
                str(cidr.network_address + k): {"containerID": f"c{n}-{b}-{k}", "interface": "net1",
                                                 "pod": {"namespace": "fleet", "name": f"p{n}-{b}-{k}", "uid": "u"}}
                for k in range(min(BLOCK, per_net - b * BLOCK))
            }  # fmt: skip
            rec = blockobjects.BlockRecord(block_name(net, cidr), net, str(cidr), holder, True, used)
            blocks.append(blockobjects.to_object(rec))
    claims = []
    for i in range(args.claims):
        net = f"old-{i % args.networks:03d}"
        addr = ipaddress.ip_address(int(subnet(i % args.networks).network_address) + 10 + i // args.networks)
        claims.append({
            "apiVersion": "netcomp.io/v1", "kind": "AddressClaim",
            "metadata": {"name": claim_name(net, addr), "labels": {"netcomp.io/network": network_label(net)}},
            "spec": {"network": net, "address": str(addr), "node": f"fleet-{i % args.nodes:04d}",
                     "containerID": f"old-{i}", "interface": "net1"},
        })  # fmt: skip
    with ThreadPoolExecutor(16) as pool:
        nodes = [
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"fleet-{i:04d}"}} for i in range(args.nodes)
        ]
        list(pool.map(core.create_node, nodes))
        list(pool.map(lambda o: custom.create_cluster_custom_object("netcomp.io", "v1", "addressblocks", o), blocks))
        list(pool.map(lambda o: custom.create_cluster_custom_object("netcomp.io", "v1", "addressclaims", o), claims))
    return time.perf_counter() - t


def churn(custom: Any, n: int, networks: int) -> None:
    """n changes of other networks' blocks (a container's entry written and removed again), as their nodes make."""
    names = [
        b["metadata"]["name"]
        for b in custom.list_cluster_custom_object("netcomp.io", "v1", "addressblocks")["items"]
        if b["spec"]["network"] != "net-000"
    ]

    def one(i: int) -> None:
        name = names[i % len(names)]
        body = {"spec": {"used": {"10.255.255.1": {"containerID": f"churn-{i}"} if i % 2 == 0 else None}}}
        custom.patch_cluster_custom_object("netcomp.io", "v1", "addressblocks", name, body)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(n)))


def measure(base: Path, exe: str, netns: Any, tag: str) -> dict[str, Any]:
    d = bench_memory.Daemon(base)
    try:
        ready = d.ready()
        shim = bench_memory.Shim(base, exe, "NETCOMP_NETWORKS=net-000")  # net-000 beside the default network
        shim.cycles(20, netns(), tag)
        rss = d.settle()
        _, doc = call(f"{base}/run/netcomp/netcomp.sock", "GET", "/ipam", timeout=30)
        net = next(n for n in doc["networks"] if n["network"] == "net-000")
        return {"ready": ready, "rss": rss, "pid": d.pid, "blocks": len(net["blocks"]), "daemon": d}
    except BaseException:
        d.stop()
        raise


def inner(args: argparse.Namespace) -> None:
    from kubernetes import client, config

    from netcomp.shim import install as shimlaunch

    out: dict[str, Any] = {"empty": [], "fleet": []}
    with bench_delegate.lab("fleet", "ncf", ("ncfl0v", "ncfl0p")) as (top, netns):
        exe = str(top / "netcomp-c")
        shimlaunch.build(Path(exe), shimlaunch.find_cc() or "cc")
        with api_server(top / "kube") as api:
            admin = config.new_client_from_config(config_file=str(api.admin_kubeconfig))
            custom, core = client.CustomObjectsApi(admin), client.CoreV1Api(admin)
            for r in range(args.repeat):
                base = top / f"empty-{r}"
                node_root(base, api.node_kubeconfig)
                m = measure(base, exe, netns, f"e{r}")
                m.pop("daemon").stop()
                out["empty"].append(m)
            out["fill_s"] = fill(custom, core, args)
            for r in range(args.repeat):
                base = top / f"fleet-{r}"
                node_root(base, api.node_kubeconfig)
                m = measure(base, exe, netns, f"f{r}")
                d = m.pop("daemon")
                try:
                    if r == 0:
                        before = _events(base)
                        churn(custom, args.churn, args.networks)
                        m["churn_events"] = _after_sentinel(custom, base) - before - 1
                finally:
                    d.stop()
                out["fleet"].append(m)
    report(args, out)


def _ipam(base: Path) -> dict[str, Any]:
    _, doc = call(f"{base}/run/netcomp/netcomp.sock", "GET", "/ipam", timeout=30)
    return dict(doc)


def _events(base: Path) -> int:
    return int(_ipam(base)["watchEvents"])


def _after_sentinel(custom: Any, base: Path) -> int:
    """The node's watch events once it has taken in a sentinel: a block of its own network, created after the
    churn (and removed again). One watch follows the node's blocks, and the API server sends its events in the
    order of their resourceVersions, so any event the churn caused arrives before the sentinel's ADDED."""
    cidr = list(subnet(0).subnets(new_prefix=26))[-1]  # beyond the fleet's blocks and the node's own
    sentinel = str(cidr)
    obj = blockobjects.to_object(
        blockobjects.BlockRecord(block_name("net-000", cidr), "net-000", sentinel, "fleet-0000", True)
    )
    custom.create_cluster_custom_object("netcomp.io", "v1", "addressblocks", obj)
    try:

        def seen() -> dict[str, Any] | None:
            doc = _ipam(base)
            net = next(n for n in doc["networks"] if n["network"] == "net-000")
            return doc if any(b["block"] == sentinel for b in net["blocks"]) else None

        return int(poll.until(seen, "the node took in the sentinel block of net-000", timeout=60)["watchEvents"])
    finally:
        custom.delete_cluster_custom_object("netcomp.io", "v1", "addressblocks", obj["metadata"]["name"])


def report(args: argparse.Namespace, out: dict[str, Any]) -> None:
    def med(rows: list[dict[str, Any]], key: str) -> float:
        return sorted(r[key] for r in rows)[len(rows) // 2]

    e_rss, f_rss = med(out["empty"], "rss"), med(out["fleet"], "rss")
    f_ready, e_ready = med(out["fleet"], "ready"), med(out["empty"], "ready")
    events = out["fleet"][0]["churn_events"]
    print(f"fleet: {args.nodes} nodes, {args.addresses} addresses in {args.networks} networks "
          f"({out['fleet'][0]['blocks']} blocks of the node's network known), {args.claims} AddressClaims of other "
          f"networks; filled in {out['fill_s']:.0f} s; medians of {args.repeat}")  # fmt: skip
    rows = [
        ("f1", f"idle RSS, kubernetes configured, empty cluster   {e_rss:6.1f} MB", e_rss <= GOALS["f1"], "<= 50 MB"),
        ("f2", f"RSS with the fleet {f_rss:6.1f} MB - empty {e_rss:6.1f} MB = {f_rss - e_rss:+.1f} MB",
         f_rss - e_rss <= GOALS["f2"], "<= +5 MB"),
        ("f3", f"start to READY=1 with the fleet {f_ready:5.2f} s (empty: {e_ready:.2f} s)", f_ready <= GOALS["f3"],
         "<= 2 s"),
        ("f4", f"watch events from {args.churn} changes of other networks' blocks: {events}", events == 0, "0"),
    ]  # fmt: skip
    for key, text, ok, goal in rows:
        print(f"({key}) {text:78s} goal {goal}: {'met' if ok else 'MISSED'}")
    print(json.dumps(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=2000)
    ap.add_argument("--addresses", type=int, default=100_000)
    ap.add_argument("--networks", type=int, default=50)
    ap.add_argument("--claims", type=int, default=20_000)
    ap.add_argument("--churn", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench/fleet.py needs root (network namespaces)")
    if args.inner:
        inner(args)
        return
    bench_delegate.in_host_netns("ncfleet", [__file__, "--inner", *sys.argv[1:]])


if __name__ == "__main__":
    main()
