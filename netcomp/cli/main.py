"""The `netcomp` command: dispatch to the module of each command, and the last line of defence, where an
internal error is reported without a traceback (unless --debug). Each command module is imported when its
command runs, so that `netcomp --help` and the quick commands import nothing heavy."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import TextIO

from netcomp.cli.exits import EX_SOFTWARE
from netcomp.cli.parser import build_parser

# The module that runs each command: run(args, out, err) -> exit code.
COMMANDS = {
    "validate": "netcomp.cli.compile",
    "compile": "netcomp.cli.compile",
    "schema": "netcomp.cli.schema",
    "install-shim": "netcomp.cli.install_shim",
    "daemon": "netcomp.cli.daemon",
    "status": "netcomp.cli.ask",
    "attachments": "netcomp.cli.ask",
    "ipam": "netcomp.cli.ask",
    "attach": "netcomp.cli.ask",
    "detach": "netcomp.cli.ask",
}


def main(argv: Sequence[str] | None = None, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    try:
        code: int = importlib.import_module(COMMANDS[args.command]).run(args, out, err)
        return code
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # the last line of defence: a bug, reported without a traceback
        if getattr(args, "debug", False):
            raise
        print(
            f"netcomp: internal error: {type(e).__name__}: {e}\n"
            "This is a bug in netcomp; run again with --debug and report the output.",
            file=err,
        )
        return EX_SOFTWARE


if __name__ == "__main__":
    raise SystemExit(main())
