"""The daemon-facing commands: `netcomp daemon`, `status`, `attachments`, `attach`, `detach`."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import TextIO

from netcomp import paths, protocol, report
from netcomp.cli import EX_DATAERR, EX_OK
from netcomp.config import Settings, load_settings
from netcomp.errors import IntentError
from netcomp.paths import Root

EX_UNAVAILABLE, EX_FAIL = 69, 1


def _settings(args: argparse.Namespace) -> Settings:
    return load_settings(args.config, Root(Path(args.root))).rooted(Root(Path(args.root)))


def _state_path(args: argparse.Namespace) -> Path:
    return Path(args.state) if getattr(args, "state", None) else Root(Path(args.root))(paths.STATE_FILE)


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.command == "daemon":
        from netcomp.daemon import main

        # The journal stamps each line itself; anywhere else (a terminal, a file) the line carries its time.
        stamp = "" if os.environ.get("JOURNAL_STREAM") else "%(asctime)s "
        logging.basicConfig(
            level=getattr(logging, args.log_level.upper()),
            stream=sys.stderr,
            format=stamp + "%(levelname)s %(name)s: %(message)s",
        )
        try:
            return main.run(lambda: _settings(args), state_path=_state_path(args))
        except IntentError as e:  # netcomp.yaml broken, and no last good state to run with
            print(report.format_all(e.diagnostics), file=err)
            print("netcomp: no last good settings to run with: fix netcomp.yaml", file=err)
            return EX_DATAERR
    try:
        settings = _settings(args)
    except IntentError as e:
        # The daemon runs with its last good settings meanwhile: talk to it on their socket.
        from netcomp.daemon.state import StateFile

        saved = StateFile(_state_path(args)).load()
        settings = saved.settings if saved is not None else Settings().rooted(Root(Path(args.root)))
        print(report.format_all(e.diagnostics), file=err)
        print(
            f"netcomp: netcomp.yaml is broken; asking the daemon on {settings.socket} "
            f"({'its last good settings' if saved is not None else 'the default'})",
            file=err,
        )
    from netcomp.daemon.client import call

    try:
        if args.command == "status":
            status, doc = call(settings.socket, "GET", protocol.STATUS_PATH, timeout=10)
        elif args.command == "attachments":
            status, doc = call(settings.socket, "GET", protocol.ATTACHMENTS_PATH, timeout=30)
        else:
            body = {
                "command": "ADD" if args.command == "attach" else "DEL",
                "containerID": args.container,
                "netns": args.netns,
                "network": args.network,
                "ifname": args.ifname,
                "runtimeIfname": args.runtime_ifname,
            }
            status, doc = call(settings.socket, "POST", protocol.DELEGATE_PATH, body)
    except OSError as e:
        print(
            f"netcomp: the daemon is not answering on {settings.socket}: {e.strerror or e}\n"
            "  see `systemctl status netcomp`",
            file=err,
        )
        return EX_UNAVAILABLE
    # `attachments` fails (1) when a cache entry cannot be read, so that a script notices.
    code = EX_OK if status == 200 and not (args.command == "attachments" and doc.get("unreadable")) else EX_FAIL
    if status != 200 and args.output != "json" and args.command in ("status", "attachments"):
        print(f"netcomp: the daemon refused: {doc.get('msg', doc)}", file=err)  # a CNI error body
        return EX_FAIL
    if args.output == "json" or args.command not in ("status", "attachments"):
        out.write(json.dumps(doc, indent=2) + "\n")
    elif args.command == "attachments":
        _print_attachments(doc, out)
    else:
        _print_status(doc, out)
    return code


def _print_attachments(doc: dict, out: TextIO) -> None:  # type: ignore[type-arg]
    """One line per container, then one per network: interface, addresses, MAC, network."""
    for c in doc["containers"]:
        out.write(f"{c['containerID']} ({c['ifname']}) in {c['netns'] or '-'}\n")
        for n in c["networks"]:
            addrs = ",".join(n["ips"]) or "-"
            mark = " (default)" if n.get("default") else ""
            out.write(f"  {n['interface']:15s} {addrs:31s} {n.get('mac') or '-':17s} {n['name']}{mark}\n")
    for u in doc["unreadable"]:
        out.write(f"UNREADABLE {u['file']}: {u['error']}\n")
    if not doc["containers"] and not doc["unreadable"]:
        out.write("no containers attached\n")


def _print_status(doc: dict, out: TextIO) -> None:  # type: ignore[type-arg]
    state = "degraded" if doc["degraded"] else ("ready" if doc["ready"] else "starting")
    out.write(
        f"netcomp {doc['version']}: {state}, generation {doc['generation']}, "
        f"{len(doc['networks'])} networks, {doc['attachments']} containers attached, "
        f"{doc['requests']['inFlight']} requests in flight ({doc['requests']['served']} served)\n"
    )
    kube = doc.get("kubernetes")
    if kube:
        synced = "synced" if kube["synced"] else "NOT SYNCED"
        why = f", last error: {kube['lastError']}" if kube.get("lastError") else ""
        out.write(f"  cluster: {synced}, {kube['networks']} Network objects{why}\n")
    default = doc.get("defaultNetwork")
    for n in doc["networks"]:
        mark = " (default)" if n["name"] == default else ""
        kept = "  KEPT LAST GOOD: its intent is broken" if n["keptLastGood"] else ""
        out.write(f"  {n['name']:24s} {n['type'] or '?':8s} {n['source'] or ''}{mark}{kept}\n")
    for d in doc["diagnostics"]:
        loc = f"{d['file']}:{d['line']}:{d['column']}: " if d["file"] else ""
        out.write(f"  {loc}{d['severity']}: {d['message']}\n")
