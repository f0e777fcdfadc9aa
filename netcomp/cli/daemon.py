"""Runs `netcomp daemon`: the host daemon in the foreground, as netcomp.service starts it."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import TextIO

from netcomp import report
from netcomp.cli.common import settings, state_path
from netcomp.cli.exits import EX_DATAERR
from netcomp.errors import IntentError


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from netcomp.daemon import run as daemon  # the daemon's modules: only for this command

    # The journal stamps each line itself; anywhere else (a terminal, a file) the line carries its time.
    stamp = "" if os.environ.get("JOURNAL_STREAM") else "%(asctime)s "
    # A line per CNI request: what the format does not print is not gathered (the logging HOWTO's
    # "Optimization": the caller's frame, thread and process), a quarter of each line's cost.
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        stream=sys.stderr,
        format=stamp + "%(levelname)s %(name)s: %(message)s",
    )
    try:
        return daemon.run(lambda: settings(args), state_path=state_path(args))
    except IntentError as e:  # netcomp.yaml broken, and no last good state to run with
        print(report.format_all(e.diagnostics), file=err)
        print("netcomp: no last good settings to run with: fix netcomp.yaml", file=err)
        return EX_DATAERR
