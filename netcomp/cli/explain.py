"""Runs `netcomp explain`: it asks the running daemon (POST /explain, answered with the ADD's own code) why a
pod or container has, or would get, its networks, and prints the answer."""

from __future__ import annotations

import argparse
import json
from typing import Any, TextIO

from netcomp.cli.common import running_settings
from netcomp.cli.exits import EX_FAIL, EX_NOPERM, EX_OK, EX_UNAVAILABLE, EX_USAGE
from netcomp.daemon.server import protocol


def _body(args: argparse.Namespace) -> dict[str, str]:
    if args.pod is not None:
        return {"pod": args.pod}
    if args.container is not None:
        return {"container": args.container}
    return {"cniArgs": args.cni_args, "ifname": args.ifname}


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.pod is not None and "/" not in args.pod:
        print(f"netcomp: --pod takes NAMESPACE/NAME, not {args.pod!r}", file=err)
        return EX_USAGE
    settings = running_settings(args, err)
    from netcomp.daemon.server.client import call, unreachable

    try:
        status, doc = call(settings.socket, "POST", protocol.EXPLAIN_PATH, _body(args), timeout=60)
    except OSError as e:
        what, todo = unreachable(settings.socket, e)
        print(
            f"netcomp: {what}\n  explain asks the daemon (it plans with the networks it serves and the pods it "
            f"follows): {todo}",
            file=err,
        )
        return EX_NOPERM if isinstance(e, PermissionError) else EX_UNAVAILABLE
    if status != 200:
        msg = doc.get("msg", doc) if isinstance(doc, dict) else doc
        print(f"netcomp: the daemon refused: {msg}", file=err)
        return EX_FAIL
    if args.output == "json":
        out.write(json.dumps(doc, indent=2) + "\n")
    else:
        print_text(doc, out)
    # Exit 1 when the ADD would be refused, or a running pod's edit is: a script can test for it.
    refused = doc.get("refusal") or (doc.get("changes") or {}).get("refusal")
    return EX_FAIL if refused else EX_OK


def print_text(doc: dict[str, Any], out: TextIO) -> None:
    out.write(_headline(doc) + "\n")
    if doc.get("annotations"):
        out.write("annotations:\n")
        for k, v in sorted(doc["annotations"].items()):
            out.write(f"  {k}: {v}\n")
    if doc["networks"]:
        out.write("an ADD now would attach:\n" if not doc["running"] else "what an ADD of it would attach now:\n")
        for n in doc["networks"]:
            _network(n, out)
    if refusal := doc.get("refusal"):
        out.write(f"REFUSED (CNI error {refusal['code']}): {refusal['msg']}\n")
        if refusal.get("details"):
            out.write(f"  {refusal['details']}\n")
    if doc.get("record") is not None:
        _running(doc, out)
    if doc.get("policies"):
        _policies(doc["policies"], out)


def _policies(p: dict[str, Any], out: TextIO) -> None:
    """The MultiNetworkPolicies in force: a line per interface they isolate, with how many rules pass each way."""
    out.write(f"policies in force (nftables table {p['table']} in the pod's namespace):\n")
    for i in p["interfaces"]:
        ways = [f"{d} {'open' if i[d] is None else f'{i[d]} rules'}" for d in ("ingress", "egress")]
        dropped = [
            f"{n} dropped {d}" for d in ("in", "out") if (n := p.get("dropped", {}).get(f"{d}_{i['interface']}"))
        ]
        more = f" ({', '.join(dropped)})" if dropped else ""
        out.write(f"  {i['interface']:15s} {i['network']:24s} {', '.join(ways)}{more}  | {', '.join(i['policies'])}\n")
    if p.get("kernel"):
        out.write(f"  in the kernel: {p['kernel']}\n")
    if p.get("notEnforced"):
        out.write(f"  NOT ENFORCED: {p['notEnforced']}\n")
    if p.get("failed"):
        out.write(f"  FAILED: {p['failed']}\n")


def _headline(doc: dict[str, Any]) -> str:
    who = f"pod {doc['pod']}" if doc.get("pod") else ""
    if doc.get("container"):
        who += (" " if who else "") + f"container {doc['container']}"
    if doc.get("cniArgs") is not None and not who:
        who = f"CNI_ARGS {doc['cniArgs']!r}"
    state = f"attached on this node ({doc['ifname']})" if doc["running"] else "not attached on this node"
    return f"{who}: {state}"


def _network(n: dict[str, Any], out: TextIO) -> None:
    out.write(f"  {n['interface']:15s} {n['network']} ({n.get('type') or '?'})\n")
    out.write(f"      why: {n['why']}\n")
    out.write(f"      name: {n['nameWhy']}\n")
    a = n["addresses"]
    line = a["from"] + (f"; asked: {', '.join(a['asked'])}" if a.get("asked") else "")
    out.write(f"      addresses: {line}\n")
    for h in a.get("held") or []:
        out.write(f"      HELD: {h}\n")
    if n.get("device"):
        out.write(f"      device: {n['device']['id']} of {n['device']['resource']} (from the kubelet)\n")
    if n.get("hostLink"):
        out.write(f"      host link: {n['hostLink']}\n")


def _running(doc: dict[str, Any], out: TextIO) -> None:
    """The record beside what the annotation asks now: a line per interface."""
    out.write("the record (what it got), beside what is asked now:\n")
    planned = {n["interface"]: n for n in doc["networks"]}
    changes = doc.get("changes") or {}
    gone = {(c["interface"], c["network"]) for c in changes.get("detach") or []}
    for r in doc["record"]:
        ips = ",".join(r.get("ips") or []) or "-"
        now = planned.get(r["interface"])
        if (r["interface"], r["name"]) in gone:
            verdict = "no longer asked: a hot-plug detaches it"
        elif now is None:
            verdict = "not what an ADD would give now" if doc["networks"] else "-"
        elif now["network"] == r["name"]:
            verdict = "as asked"
        else:
            verdict = f"asked now: {now['network']}"
        state = "" if r.get("state") == "attached" else f" [{r.get('state')}]"
        dev = f" [{r['device']['resource']} {r['device']['id']}]" if r.get("device") else ""
        out.write(f"  {r['interface']:15s} {r['name']:24s} {ips:31s}{dev}{state}  | {verdict}\n")
    for c in changes.get("attach") or []:
        what = f"asked now ({c['why']}): a hot-plug attaches {c['network']}"
        out.write(f"  {c['interface']:15s} {'-':24s} {'-':31s}  | {what}\n")
    if changes.get("refusal"):
        r = changes["refusal"]
        out.write(f"  the annotation's edit is REFUSED (CNI error {r['code']}): {r['msg']}\n")
    elif changes.get("why"):
        out.write(f"  {changes['why']}\n")
