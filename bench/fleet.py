#!/usr/bin/env python3
"""A node's cost with a cluster's fleet around it (root). One node's daemon as a process (`netcomp daemon --root`,
in a network namespace this script makes, kubernetes configured against a kube-apiserver + etcd it starts there)
serves networks with `ipam: {type: cluster}`; the API server is filled with the objects of a simulated fleet.
Two shapes, each measured against the same daemon on the empty cluster in the same run:

own: for each count of --own, that many other nodes (Node objects) each holding a block of the node's own network
own-COUNT (blocks of 64, 30 addresses used each; a /16 up to 1,000 nodes, larger beyond: a /16 has 1,024 blocks),
the blocks of the counts before it there too, each count's network measured empty first:

  (o1) the idle daemon's RSS with them / with the empty cluster (first ADD and 20 ADD/DEL cycles) <= +3 MB
  (o2) start to READY=1 with them                                                                 <= 1 s
  (o3) watch events the node takes in, and its CPU over the same daemon idle for as long, while
       --churn writes change other nodes' blocks of its own network (counted once its watch
       delivered a block of its own after them)                                                    0, <= 0.05 s
  (o4) the first ADD after READY (it needs a block: the names of the network's blocks read, one
       created)                                                                                    <= 0.5 s

networks: --nodes Node objects, --addresses addresses in use in --networks networks, as AddressBlock objects
(blocks of 64 held by the fleet's nodes, the node's network net-000 among them), and --claims AddressClaim
objects of an earlier version, of other networks:

  (f1) the idle daemon's RSS, kubernetes configured, an empty cluster, after 20 ADD/DEL cycles     <= 50 MB
  (f2) its RSS with the fleet / with the empty cluster (the same cycles)                           <= +5 MB
  (f3) start to READY=1 with the fleet                                                              <= 2 s
  (f4) watch events the node takes in while --churn writes change other networks' blocks           0

Usage: sudo bench/fleet.py [--shapes own,networks] [--own 1000,5000] [--nodes 2000] [--addresses 100000]
[--networks 50] [--claims 20000] [--churn 2000] [--repeat 3]
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
GOALS = {"f1": 50.0, "f2": 5.0, "f3": 2.0, "f4": 0, "o1": 3.0, "o2": 1.0, "o3": 0.05, "o4": 0.5}
NODE = "bench-node"
BLOCK = 64
OWN_USED = 30  # addresses used in each other node's block of the node's own network
MINE = f"netcomp.io/node={NODE}"  # the label of the node's blocks


def subnet(i: int) -> ipaddress.IPv4Network:
    return ipaddress.ip_network(f"10.{64 + i // 4}.{(i % 4) * 64}.0/18", strict=False)


def own_subnets(counts: list[int]) -> dict[int, ipaddress.IPv4Network]:
    """The node's own network for each count of other nodes: a /16, or the smallest larger one with a free block
    for every node and a few more (a /16 has 1,024 blocks of 64), one after the other from 10.128.0.0."""
    out, at = {}, int(ipaddress.ip_address("10.128.0.0"))
    for count in counts:
        prefix = 16
        while (1 << (32 - prefix)) // BLOCK < count + 24:
            prefix -= 1
        size = 1 << (32 - prefix)
        at = (at + size - 1) // size * size
        out[count] = ipaddress.ip_network(f"{ipaddress.ip_address(at)}/{prefix}")
        at += size
    return out


def node_root(base: Path, kubeconfig: Path, network: str = "net-000", pool: Any = None) -> None:
    """The node: a bridge default network, and `network` (macvlan, cluster IPAM over `pool`, default
    subnet(0)); kubernetes configured (pods followed, no Network objects: its networks are its own files)."""
    nets = bench_delegate.default_bridge(base, "ncfleet0", "10.150.0.0/16")
    (nets / f"{network}.yaml").write_text(
        f"apiVersion: netcomp.io/v1\nkind: Network\nmetadata: {{name: {network}}}\nspec: {{type: macvlan, "
        f"hostDevice: ncfl0v, ipam: {{type: cluster, subnet: {pool or subnet(0)}, blockSize: {BLOCK}}}}}\n"
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


def fill_own(custom: Any, core: Any, count: int, pool: ipaddress.IPv4Network, nodes: int) -> float:
    """Nodes peer-0000.. (those from `nodes` on made now), `count` of them each holding block i of `pool` (the
    network own-COUNT) with OWN_USED addresses used, as their daemons write them (labelled with their node);
    made by 16 clients at once; the seconds it took."""
    t = time.perf_counter()
    blocks = list(pool.subnets(new_prefix=32 - (BLOCK.bit_length() - 1)))
    network = f"own-{count}"

    def one(i: int) -> None:
        node, cidr = f"peer-{i:04d}", blocks[i]
        if i >= nodes:
            core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
        used = {
            str(cidr.network_address + 2 + k): {"containerID": f"o{i}-{k}", "interface": "net1",
                                                "pod": {"namespace": "fleet", "name": f"q{i}-{k}", "uid": "u"}}
            for k in range(OWN_USED)
        }  # fmt: skip
        rec = blockobjects.BlockRecord(block_name(network, cidr), network, str(cidr), node, True, used)
        custom.create_cluster_custom_object("netcomp.io", "v1", "addressblocks", blockobjects.to_object(rec))

    with ThreadPoolExecutor(16) as ex:
        list(ex.map(one, range(count)))
    return time.perf_counter() - t


def churn_own(custom: Any, n: int, nodes: int, pool: ipaddress.IPv4Network) -> None:
    """n writes to other nodes' blocks of the node's own network (a container's entry written and removed
    again), as their nodes make them behind their ADDs and DELs."""
    blocks = list(pool.subnets(new_prefix=32 - (BLOCK.bit_length() - 1)))
    network = f"own-{nodes}"

    def one(i: int) -> None:
        cidr = blocks[i % nodes]
        addr = str(cidr.network_address + 2 + OWN_USED)
        body = {"spec": {"used": {addr: {"containerID": f"churn-{i}", "interface": "net1"} if i % 2 == 0 else None}}}
        custom.patch_cluster_custom_object("netcomp.io", "v1", "addressblocks", block_name(network, cidr), body)

    with ThreadPoolExecutor(8) as ex:
        list(ex.map(one, range(n)))


def quiet(pid: int) -> float:
    """The process's CPU seconds once it has used none for a second (two minutes at most)."""
    last, deadline = cpu(pid), time.monotonic() + 120
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = cpu(pid)
        if now == last:
            break
        last = now
    return last


def drop_node_blocks(custom: Any) -> None:
    """The blocks the node's daemons claimed (each run has a root of its own, and its blocks are no other run's)."""
    for b in custom.list_cluster_custom_object("netcomp.io", "v1", "addressblocks", label_selector=MINE)["items"]:
        custom.delete_cluster_custom_object("netcomp.io", "v1", "addressblocks", b["metadata"]["name"])


def cpu(pid: int) -> float:
    """The process's CPU seconds (user and system) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(
    base: Path, exe: str, netns: Any, tag: str, network: str = "net-000", first: bool = False
) -> dict[str, Any]:
    """READY, (with `first`) the first ADD's seconds, then 20 ADD/DEL cycles and the idle RSS."""
    d = bench_memory.Daemon(base)
    try:
        ready = d.ready()
        shim = bench_memory.Shim(base, exe, f"NETCOMP_NETWORKS={network}")  # beside the default network
        out: dict[str, Any] = {"ready": ready, "pid": d.pid, "daemon": d}
        if first:  # its container stays: the block never empties, and is never released while measured
            t = time.perf_counter()
            shim("ADD", netns(), f"{tag}-first")
            out["first_add"] = time.perf_counter() - t
        shim.cycles(20, netns(), tag)
        out["rss"] = d.settle()
        return out
    except BaseException:
        d.stop()
        raise


def own_shape(args: argparse.Namespace, top: Path, exe: str, netns: Any, api: Any, clients: Any) -> dict[str, Any]:
    """The own-network shape: for each count, the node serving network own-COUNT on the empty cluster, then with
    COUNT other nodes' blocks of it."""
    custom, core = clients
    counts = [int(c) for c in args.own.split(",") if c]
    pools = own_subnets(counts)
    out: dict[str, Any] = {}
    for count in counts:
        rows = []
        for r in range(args.repeat):
            base = top / f"own-{count}-empty-{r}"
            node_root(base, api.node_kubeconfig, f"own-{count}", pools[count])
            m = measure(base, exe, netns, f"oe{count}-{r}", f"own-{count}", first=True)
            m.pop("daemon").stop()
            drop_node_blocks(custom)
            rows.append(m)
        out[count] = {"subnet": str(pools[count]), "empty": rows}
    nodes = 0
    for count in counts:
        network, pool = f"own-{count}", pools[count]
        out[count]["fill_s"] = fill_own(custom, core, count, pool, nodes)
        nodes = max(nodes, count)
        rows = []
        for r in range(args.repeat):
            base = top / f"own-{count}-{r}"
            node_root(base, api.node_kubeconfig, network, pool)
            m = measure(base, exe, netns, f"o{count}-{r}", network, first=True)
            d = m.pop("daemon")
            try:
                t = time.perf_counter()
                before = _events(base)
                m["show_s"] = time.perf_counter() - t
                used = quiet(d.pid)  # what the show built is freed after its answer
                t = time.perf_counter()
                churn_own(custom, args.churn, count, pool)
                events, after = _after_sentinel(custom, base, network, pool, d.pid)
                window = time.perf_counter() - t
                m["churn_events"], m["churn_cpu"] = events - before - 1, after - used
                idle = cpu(d.pid)
                time.sleep(window)  # the baseline: the same daemon idle for as long, nothing written meanwhile
                m["idle_cpu"] = cpu(d.pid) - idle
            finally:
                d.stop()
                drop_node_blocks(custom)
            rows.append(m)
        out[count]["runs"] = rows
    return out


def networks_shape(args: argparse.Namespace, top: Path, exe: str, netns: Any, api: Any, clients: Any) -> dict[str, Any]:
    custom, core = clients
    out: dict[str, Any] = {"empty": [], "fleet": []}
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
                m["churn_events"] = _after_sentinel(custom, base, "net-000", subnet(0), d.pid)[0] - before - 1
        finally:
            d.stop()
        out["fleet"].append(m)
    return out


def inner(args: argparse.Namespace) -> None:
    from kubernetes import client, config

    from netcomp.shim import install as shimlaunch

    shapes = set(args.shapes.split(","))
    out: dict[str, Any] = {}
    bench_memory.bytecode()
    with bench_delegate.lab("fleet", "ncf", ("ncfl0v", "ncfl0p")) as (top, netns):
        exe = str(top / "netcomp-c")
        shimlaunch.build(Path(exe), shimlaunch.find_cc() or "cc")
        with api_server(top / "kube") as api:
            admin = config.new_client_from_config(config_file=str(api.admin_kubeconfig))
            clients = (client.CustomObjectsApi(admin), client.CoreV1Api(admin))
            if "own" in shapes:
                out["own"] = own_shape(args, top, exe, netns, api, clients)
            if "networks" in shapes:
                out["networks"] = networks_shape(args, top, exe, netns, api, clients)
    if "own" in out:
        report_own(args, out["own"])
    if "networks" in out:
        report(args, out["networks"])
    print(json.dumps(out))


def _ipam(base: Path) -> dict[str, Any]:
    """`netcomp ipam show` as the daemon answers it: every address of its networks' pools, read when asked (a
    large pool's list takes a while)."""
    _, doc = call(f"{base}/run/netcomp/netcomp.sock", "GET", "/ipam", timeout=600)
    return dict(doc)


def _events(base: Path) -> int:
    return int(_ipam(base)["watchEvents"])


def _after_sentinel(custom: Any, base: Path, network: str, pool: Any, pid: int) -> tuple[int, float]:
    """The node's watch events and its CPU seconds once it has taken in a sentinel: a block of its own network
    naming it (the node follows only those), created after the churn, which it reports in its log as one it never
    made (seen there without asking the daemon anything). One watch follows the node's blocks, and the API server
    sends its events in the order of their resourceVersions, so any event the churn caused arrives before the
    sentinel's ADDED."""
    cidr = list(pool.subnets(new_prefix=26))[-1]  # beyond the fleet's blocks and the node's own
    rec = blockobjects.BlockRecord(block_name(network, cidr), network, str(cidr), NODE, True)
    obj = blockobjects.to_object(rec)
    log = base / "daemon.log"
    custom.create_cluster_custom_object("netcomp.io", "v1", "addressblocks", obj)
    try:
        poll.until(lambda: rec.name in log.read_text(errors="replace"), "the node took in the sentinel", 60, 0.02)
        used = cpu(pid)
        return _events(base), used
    finally:
        custom.delete_cluster_custom_object("netcomp.io", "v1", "addressblocks", obj["metadata"]["name"])


def _med(rows: list[dict[str, Any]], key: str) -> float:
    return sorted(r[key] for r in rows)[len(rows) // 2]


def report_own(args: argparse.Namespace, out: dict[int, Any]) -> None:
    for count, fleet in out.items():
        empty, runs = fleet["empty"], fleet["runs"]
        e_rss, e_ready, e_first = _med(empty, "rss"), _med(empty, "ready"), _med(empty, "first_add")
        rss, ready, first = _med(runs, "rss"), _med(runs, "ready"), _med(runs, "first_add")
        events, used, show = max(r["churn_events"] for r in runs), _med(runs, "churn_cpu"), _med(runs, "show_s")
        extra = _med([{"x": r["churn_cpu"] - r["idle_cpu"]} for r in runs], "x")
        print(f"-- {count} other nodes' blocks of its network {fleet['subnet']} (blocks of {BLOCK}, {OWN_USED} "
              f"used each; filled in {fleet['fill_s']:.0f} s); medians of {args.repeat}")  # fmt: skip
        rows = [
            ("o1", f"RSS {rss:6.1f} MB - empty {e_rss:6.1f} MB = {rss - e_rss:+.1f} MB", rss - e_rss <= GOALS["o1"],
             "<= +3 MB"),
            ("o2", f"start to READY=1 {ready:5.2f} s (empty: {e_ready:.2f} s)", ready <= GOALS["o2"], "<= 1 s"),
            ("o3", f"{args.churn} writes to others' blocks: {events} events (most of any run), {used:.3f} s CPU, "
             f"{extra:+.3f} s over idle", events == 0 and extra <= GOALS["o3"], "0, <= 0.05 s"),
            ("o4", f"first ADD (needs a block) {first:.3f} s (empty: {e_first:.3f} s)", first <= GOALS["o4"],
             "<= 0.5 s"),
        ]  # fmt: skip
        for key, text, ok, goal in rows:
            print(f"({key}) {text:78s} goal {goal}: {'met' if ok else 'MISSED'}")
        print(f"     netcomp ipam show (the whole pool, read when asked): {show:.1f} s")


def report(args: argparse.Namespace, out: dict[str, Any]) -> None:
    e_rss, f_rss = _med(out["empty"], "rss"), _med(out["fleet"], "rss")
    f_ready, e_ready = _med(out["fleet"], "ready"), _med(out["empty"], "ready")
    events = out["fleet"][0]["churn_events"]
    print(f"fleet: {args.nodes} nodes, {args.addresses} addresses in {args.networks} networks, {args.claims} "
          f"AddressClaims of other networks; filled in {out['fill_s']:.0f} s; medians of {args.repeat}")  # fmt: skip
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="own,networks", help="own, networks, or both (comma-separated)")
    ap.add_argument("--own", default="1000,5000", help="counts of other nodes holding a block of the node's network")
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
