"""Runs the `netcomp` command in the test's own process (cli/main.py's main, with its output captured), for tests
of what a user meets at the command line; a test that needs the installed entry point runs checkout.NETCOMP."""

from __future__ import annotations

import io

from netcomp.cli.main import main


def run(*argv: str) -> tuple[int, str, str]:
    """The command's exit status, and what it printed on stdout and on stderr."""
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()
