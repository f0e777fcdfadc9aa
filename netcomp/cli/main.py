"""Runs the `netcomp` command: imports only the module of the command given (so that `--help` imports nothing
heavy), and is the last line of defence: an internal error is reported without a traceback (unless --debug); a
reader gone away or a Ctrl-C ends the command quietly, with the status a shell gives (141, 130)."""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Sequence
from typing import TextIO, cast

from netcomp.cli.exits import EX_INTERRUPTED, EX_PIPE, EX_SOFTWARE
from netcomp.cli.parser import build_parser

# The module that runs each command: run(args, out, err) -> exit code.
COMMANDS = {
    **dict.fromkeys(("validate", "compile"), "netcomp.cli.compile"),
    **dict.fromkeys(("status", "attachments", "ipam", "attach", "detach"), "netcomp.cli.ask"),
    "schema": "netcomp.cli.schema",
    "install-shim": "netcomp.cli.install_shim",
    "daemon": "netcomp.cli.daemon",
    "doctor": "netcomp.cli.doctor",
    "explain": "netcomp.cli.explain",
}


class ReaderGone(BaseException):
    """The reader of our stdout or stderr went away. A BaseException, as KeyboardInterrupt is: no command's
    `except Exception` (or `except OSError`, which a broken pipe is) may take it for a failure of its own."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__("the reader went away")
        self.stream = stream


class _Watched:
    """A text stream whose broken pipe is told apart from any other (a socket's, a child's): ReaderGone."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            raise ReaderGone(self._stream) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise ReaderGone(self._stream) from None

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)


def _silence(stream: TextIO) -> None:
    """Point the stream's file descriptor at /dev/null, so that the flush at interpreter exit cannot fail again
    (the `signal` module's note on SIGPIPE advises it)."""
    with contextlib.suppress(AttributeError, OSError, ValueError):  # a StringIO has no descriptor
        fd = stream.fileno()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)


def main(argv: Sequence[str] | None = None, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    out = cast(TextIO, _Watched(stdout or sys.stdout))
    err = cast(TextIO, _Watched(stderr or sys.stderr))
    try:
        try:
            return _run(argv, out, err)
        finally:
            # What is buffered goes now, where a reader that went away is noticed, not at interpreter exit.
            out.flush()
            err.flush()
    except ReaderGone as gone:
        _silence(gone.stream)
        return EX_PIPE
    except KeyboardInterrupt:
        return EX_INTERRUPTED


def _run(argv: Sequence[str] | None, out: TextIO, err: TextIO) -> int:
    try:
        # argparse prints --help, --version and usage errors on sys.stdout and sys.stderr: these streams.
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            args = build_parser().parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    try:
        code: int = importlib.import_module(COMMANDS[args.command]).run(args, out, err)
        return code
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
