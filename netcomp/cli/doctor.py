"""Runs `netcomp doctor`. With netcomp.yaml broken the daemon runs on its last good settings: those are checked,
and the config line says what is broken."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TextIO

from netcomp import paths
from netcomp.cli.common import running
from netcomp.cli.exits import EX_FAIL, EX_OK
from netcomp.doctor import checks as report
from netcomp.doctor.checks import Check
from netcomp.paths import Root
from netcomp.settings import Settings


def _config(args: argparse.Namespace) -> tuple[Settings, Check]:
    where = args.config or str(Root(Path(args.root))(paths.CONFIG_FILE))
    r = running(args)
    if r.broken is None:
        found = f"{where} loads" if Path(where).exists() else f"no {where}: the defaults"
        return r.settings, report.ok("config", found)
    return r.settings, report.fail(
        "config",
        f"broken: {r.broken}; checking with {'its last good settings' if r.last_good else 'the defaults'}",
        "fix netcomp.yaml (`netcomp validate` shows every error), then `systemctl reload netcomp`",
    )


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from netcomp.doctor.doctor import run as run_checks

    settings, config = _config(args)
    checks = [config, *run_checks(settings, rbac_file=args.rbac)]
    out.write(report.as_json(checks) if args.output == "json" else report.as_text(checks))
    return EX_FAIL if report.failed(checks) else EX_OK
