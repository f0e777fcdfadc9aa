"""Runs the commands that ask the running daemon: `netcomp status`, `attachments`, `ipam`, `attach`, `detach`.
They work whatever state netcomp.yaml is in: with it broken, the socket is the daemon's last good one."""

from __future__ import annotations

import argparse
import json
import urllib.parse
from typing import Any, TextIO

from netcomp.cli.common import running_settings
from netcomp.cli.exits import EX_FAIL, EX_NOPERM, EX_OK, EX_UNAVAILABLE
from netcomp.daemon.server import protocol


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    settings = running_settings(args, err)  # with netcomp.yaml broken, the daemon's last good ones
    from netcomp.daemon.server.client import call, unreachable

    try:
        if args.command == "status":
            status, doc = call(settings.socket, "GET", protocol.STATUS_PATH, timeout=10)
        elif args.command == "attachments":
            status, doc = call(settings.socket, "GET", protocol.ATTACHMENTS_PATH, timeout=30)
        elif args.command == "ipam" and args.action == "show":
            query = f"?{urllib.parse.urlencode({'network': args.network})}" if args.network else ""
            status, doc = call(settings.socket, "GET", protocol.IPAM_PATH + query, timeout=30)
        elif args.command == "ipam":
            status, doc = call(settings.socket, "POST", protocol.IPAM_GC_PATH, {}, timeout=300)
        else:
            body = {
                "command": "ADD" if args.command == "attach" else "DEL",
                "containerID": args.container,
                "netns": args.netns,
                "network": args.network,
                "ifname": args.ifname,
                "runtimeIfname": args.runtime_ifname,
            }
            if args.pod:
                ns, _, name = args.pod.partition("/")
                body.update(podNamespace=ns, podName=name)
            status, doc = call(settings.socket, "POST", protocol.DELEGATE_PATH, body)
    except OSError as e:
        what, todo = unreachable(settings.socket, e)
        print(f"netcomp: {what}\n  {todo}", file=err)
        return EX_NOPERM if isinstance(e, PermissionError) else EX_UNAVAILABLE
    # `attachments` fails (1) when a cache entry cannot be read, so that a script notices.
    code = EX_OK if status == 200 and not (args.command == "attachments" and doc.get("unreadable")) else EX_FAIL
    printers = {"status": _print_status, "attachments": _print_attachments, "ipam": _print_ipam}
    if status != 200 and args.output != "json" and args.command in printers:
        print(f"netcomp: the daemon refused: {doc.get('msg', doc)}", file=err)  # a CNI error body
        return EX_FAIL
    if args.command == "ipam" and args.action == "show" and args.network and not doc["networks"]:
        print(f"netcomp: network {args.network!r} gives no cluster addresses on this node (ipam: {{type: cluster}})",
              file=err)  # fmt: skip
        return EX_FAIL
    if args.output == "json" or args.command not in printers:
        out.write(json.dumps(doc, indent=2) + "\n")
    else:
        printers[args.command](doc, out)
    return code


def _print_attachments(doc: dict[str, Any], out: TextIO) -> None:
    """One line per container, then one per network: interface, addresses, MAC, network, device."""
    for c in doc["containers"]:
        out.write(f"{c['containerID']} ({c['ifname']}) in {c['netns'] or '-'}\n")
        for n in c["networks"]:
            addrs = ",".join(n["ips"]) or "-"
            mark = " (default)" if n.get("default") else ""
            dev = n.get("device")
            mark += f" [{dev['resource']} {dev['id']}]" if dev else ""
            out.write(f"  {n['interface']:15s} {addrs:31s} {n.get('mac') or '-':17s} {n['name']}{mark}\n")
            if n.get("state"):
                why = " (no retry can change it)" if n.get("permanent") else ""
                out.write(f"    {n['state'].upper()}{why}: {n.get('error') or '-'}\n")
    for u in doc["unreadable"]:
        out.write(f"UNREADABLE {u['file']}: {u['error']}\n")
    if not doc["containers"] and not doc["unreadable"]:
        out.write("no containers attached\n")


def _print_status(doc: dict[str, Any], out: TextIO) -> None:
    state = "degraded" if doc["degraded"] else ("ready" if doc["ready"] else "starting")
    out.write(
        f"netcomp {doc['version']}: {state}, generation {doc['generation']}, "
        f"{len(doc['networks'])} networks, {doc['attachments']} containers attached, "
        f"{doc['requests']['inFlight']} requests in flight ({doc['requests']['served']} served)\n"
    )
    if undo := doc.get("attachmentsToUndo"):
        waiting = doc.get("podEditsWaiting") or 0
        edits = f"; {waiting} pod {'edit waits' if waiting == 1 else 'edits wait'} for the undo" if waiting else ""
        out.write(f"  {undo} attachment{'' if undo == 1 else 's'} to undo (netcomp attachments lists them){edits}\n")
    if kube := doc.get("kubernetes"):
        synced = "synced" if kube["synced"] else "NOT SYNCED"
        why = f", last error: {kube['lastError']}" if kube.get("lastError") else ""
        out.write(f"  cluster: {synced}, {kube['networks']} Network objects{why}\n")
        if es := kube.get("endpointSlices"):
            state = "" if es["synced"] else ", NOT SYNCED"
            state += f", last error: {es['lastError']}" if es.get("lastError") else ""
            out.write(f"  EndpointSlices: {es['services']} Services on secondary networks, {es['slices']} slices of "
                      f"this node{state}\n")  # fmt: skip
            for ref, why in es["refused"].items():
                out.write(f"    Service {ref}: {why}\n")
    default = doc.get("defaultNetwork")
    for n in doc["networks"]:
        mark = " (default)" if n["name"] == default else ""
        kept = "  KEPT LAST GOOD: its intent is broken" if n["keptLastGood"] else ""
        out.write(f"  {n['name']:24s} {n['type'] or '?':8s} {n['source'] or ''}{mark}{kept}\n")
    for d in doc["diagnostics"]:
        loc = f"{d['file']}:{d['line']}:{d['column']}: " if d["file"] else ""
        out.write(f"  {loc}{d['severity']}: {d['message']}\n")


def _print_ipam(doc: dict[str, Any], out: TextIO) -> None:
    """show: per network its pools, then a line per claim; gc: what was freed."""
    if "freed" in doc:
        for f in doc["freed"]:
            out.write(f"freed {f['address']} of {f['network']} (node {f['node']}, pod {f['pod'] or '-'})\n")
        if doc.get("error"):
            out.write(f"stopped: {doc['error']}\n")
        blocks = doc.get("freedBlocks") or []
        for b in blocks:
            out.write(f"freed block {b} (its node is gone)\n")
        out.write(f"{len(doc['freed'])} addresses of other nodes freed, {len(blocks)} blocks, "
                  f"{doc.get('freedOwn', 0)} of this node\n")  # fmt: skip
        if (slices := doc.get("endpointSlices")) is not None:
            for r in slices["removed"]:
                out.write(f"removed EndpointSlice {r['namespace']}/{r['name']} of node {r['node']}\n")
            if slices.get("error"):
                out.write(f"EndpointSlices: stopped: {slices['error']}\n")
            out.write(f"{len(slices['removed'])} EndpointSlices of other nodes removed, {slices['kept']} kept\n")
        return
    if not doc["networks"]:
        out.write("no network gives cluster addresses (ipam: {type: cluster})\n")
    for n in doc["networks"]:
        pools = "; ".join(
            f"{p['ranges']}: {p['size']} addresses, {p['claimed']} claimed, {p['free']} free" for p in n["pools"]
        )
        out.write(f"{n['network']} ({n['store']} store): {pools}\n")
        for b in n.get("blocks") or []:
            out.write(f"  block {b['block']:33s} {b['node']:20s} {b['used']} used, {b['lent']} lent\n")
        for c in n["claims"]:
            who = f"pod {c['pod']}" if c["pod"] else f"container {c['containerID']}"
            out.write(f"  {c['address']:39s} {c['node']:20s} {c['interface']:15s} {who}\n")
