"""Runs `netcomp validate` and `netcomp compile`."""

from __future__ import annotations

import argparse
import socket
from pathlib import Path
from typing import TextIO

from netcomp import report
from netcomp.cli.exits import EX_DATAERR, EX_FAIL, EX_IOERR, EX_NOINPUT, EX_OK
from netcomp.compiler.compiler import discover
from netcomp.compiler.output import unified_diff
from netcomp.compiler.pipeline import Pipeline
from netcomp.errors import HostError, IntentError
from netcomp.paths import Root
from netcomp.settings import Settings, load_settings


def _settings(args: argparse.Namespace, root: Root) -> Settings:
    settings = load_settings(args.config, root).rooted(root)
    updates: dict[str, object] = {}
    if args.static_dir:
        updates["staticDirs"] = [str(Path(d).resolve()) for d in args.static_dir]
    if args.plugin_dir:
        updates["pluginDirs"] = [str(Path(d).resolve()) for d in args.plugin_dir]
    if args.cni_version:
        updates["cniVersion"] = args.cni_version
    return settings.model_copy(update=updates) if updates else settings


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    root = Root(Path(args.root))
    try:
        settings = _settings(args, root)
    except IntentError as e:
        _report(args, e.diagnostics, out, err)
        return EX_DATAERR
    out_dir = Path(args.out) if getattr(args, "out", None) else Path(settings.outputDir)
    # Away from the node (CI) what only the node has (its static files, devices, plugins) is a warning; with
    # --strict an error, as the daemon has it.
    pipeline = Pipeline(settings, offline=not args.strict, out_dir=out_dir)
    devices = {name for _, name in socket.if_nameindex()}
    pipeline.device_present = devices.__contains__
    pipeline.devices_state = lambda: "\0".join(sorted(devices))
    # Paths named on the command line are the user's, relative to the cwd; configured ones live under root.
    missing = [p for p in args.paths if not Path(p).exists()]
    for p in missing:
        print(f"netcomp: {p}: no such file or directory", file=err)
    if missing:
        return EX_NOINPUT
    layers = [Path(p) for p in args.paths] if args.paths else pipeline.layers()
    try:
        files = discover(layers)
    except IntentError as e:
        _report(args, e.diagnostics, out, err)
        return EX_DATAERR
    if args.command == "validate":
        plan = pipeline.compiler.compile(files)
        _report(args, plan.diagnostics, out, err, networks=sorted(a.network for a in plan.artifacts.values()))
        return EX_DATAERR if not plan.ok else EX_OK

    write = not (args.diff or args.check or args.dry_run)
    plan = pipeline.compile(files, stage=write)
    if not plan.ok:
        pipeline.discard()
        _report(args, plan.diagnostics, out, err)
        print("netcomp: nothing written: fix the errors above", file=err)
        return EX_DATAERR
    try:
        changes = pipeline.write(plan) if write else pipeline.preview(plan)
    except HostError as e:
        _report(args, plan.diagnostics, out, err)
        print(f"netcomp: {e}", file=err)
        return EX_IOERR
    summary = [{"change": c.kind, "file": str(out_dir / c.filename)} for c in changes]
    if args.output == "json":
        networks = sorted(a.network for a in plan.artifacts.values())
        _report(args, plan.diagnostics, out, err, changes=summary, networks=networks)
    else:
        if plan.diagnostics:
            print(report.format_all(plan.diagnostics), file=err)
        if args.diff:
            out.write(unified_diff(changes, out_dir))
        elif args.dry_run or args.check:
            for c in changes:
                out.write(f"would {c.kind} {out_dir / c.filename}\n")
        else:
            for c in changes:
                verb = {"add": "wrote", "change": "updated", "remove": "removed"}[c.kind]
                print(f"{verb} {out_dir / c.filename}", file=err)
            print(f"{len(plan.artifacts)} networks, {len(changes)} changed", file=err)
    return EX_FAIL if args.check and changes else EX_OK


def _report(args: argparse.Namespace, diags: list, out: TextIO, err: TextIO, **extra: object) -> None:  # type: ignore[type-arg]
    if args.output == "json":
        out.write(report.as_json(diags, **extra) + "\n")
    elif diags:
        print(report.format_all(diags), file=err)
    elif args.command == "validate":
        nets = extra.get("networks") or []
        print(f"ok: {len(nets)} networks", file=err)  # type: ignore[arg-type]
