"""What a Unix user expects of any command: it ends quietly when its reader goes away (`netcomp status | head
-1`: exit 141, as a process killed by SIGPIPE) or on Ctrl-C (exit 130), never with a traceback or an "internal
error"; and every command answers --help and --version."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from netcomp import __version__
from netcomp.cli.exits import EX_INTERRUPTED, EX_PIPE
from netcomp.cli.main import COMMANDS, main
from netcomp.cli.parser import build_parser
from tests.lab.checkout import ROOT
from tests.lab.intents import DEVICE, GOOD
from tests.lab.minidaemon import mini_daemon
from tests.lab.processes import reap

NETCOMP = [sys.executable, "-m", "netcomp.cli"]


@contextlib.contextmanager
def reader_gone() -> Iterator[int]:
    """The write end of a pipe whose reader has already gone: any write to it fails with EPIPE."""
    r, w = os.pipe()
    os.close(r)
    try:
        yield w
    finally:
        os.close(w)


def run_into_closed_pipe(*argv: str) -> tuple[int, str]:
    """Run netcomp as a process whose stdout reader went away; its exit status and its stderr."""
    with reader_gone() as w:
        p = subprocess.run([*NETCOMP, *argv], stdout=w, stderr=subprocess.PIPE, cwd=ROOT, timeout=60, check=False)
    return p.returncode, p.stderr.decode()


@pytest.mark.parametrize("argv", [["schema"], ["--help"], ["compile", "--help"], ["--version"]])
def test_a_reader_that_goes_away_ends_the_command_quietly(argv: list[str]) -> None:
    assert run_into_closed_pipe(*argv) == (EX_PIPE, "")


def test_status_into_a_closed_pipe(tmp_path: Path, sockdir: Path) -> None:
    """`netcomp status | head -1`, the case the issue found, against a real daemon."""
    with mini_daemon(tmp_path, sockdir) as d:
        assert run_into_closed_pipe("status", "-c", str(d.config)) == (EX_PIPE, "")
        # ... and with a reader, it answers (so the status above came from a daemon that did answer).
        p = subprocess.run([*NETCOMP, "status", "-c", str(d.config)], capture_output=True, cwd=ROOT, check=False)
        assert (p.returncode, p.stderr) == (0, b"") and p.stdout.startswith(b"netcomp ")


def test_compile_diff_into_a_closed_pipe_in_process(tmp_path: Path, plugin_dir: Path) -> None:
    """`netcomp compile --diff | head`: main() itself, on a real pipe. The pipe's descriptor is pointed at
    /dev/null, so the flush when the stream is closed (at interpreter exit, for stdout) cannot fail again."""
    intents = tmp_path / "intents"
    intents.mkdir()
    for i in range(3):
        (intents / f"{i}.yaml").write_text(GOOD.format(name=f"n{i}", subnet=f"10.{i}.0.0/24", dev=DEVICE))
    args = ["compile", str(intents), "--out", str(tmp_path / "out"), "--plugin-dir", str(plugin_dir), "--diff"]
    err = io.StringIO()
    with reader_gone() as w, open(os.dup(w), "w") as out:
        assert main(args, out, err) == EX_PIPE
        out.write("still buffered")
        out.flush()  # to /dev/null now: no BrokenPipeError
    assert err.getvalue() == ""
    assert not (tmp_path / "out").exists()


def test_other_broken_pipes_are_not_taken_for_the_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    """A broken pipe of the command's own (a socket, a child) is a failure to report, not a reader gone."""

    def boom(*_: object) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr("netcomp.cli.schema.run", boom)
    out, err = io.StringIO(), io.StringIO()
    assert main(["schema"], out, err) == 70
    assert "internal error: BrokenPipeError" in err.getvalue()


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_ends_the_command_with_130(sockdir: Path) -> None:
    """Ctrl-C while `netcomp status` waits for a daemon that never answers."""
    path = str(sockdir / "silent.sock")
    config = sockdir / "netcomp.yaml"
    config.write_text(f"socket: {path}\n")
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(path)
        listener.listen(1)
        # SIGINT set to its default in the child: one started from a script's background job, nohup or some CI
        # runners inherits it ignored, and Python then never raises KeyboardInterrupt.
        p = subprocess.Popen(
            [*NETCOMP, "status", "-c", str(config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=ROOT,
            preexec_fn=_default_sigint,
        )
        try:
            conn, _ = listener.accept()
            with conn:
                assert conn.recv(4096).startswith(b"GET /status")  # it has asked, and now waits for the answer
                p.send_signal(signal.SIGINT)
                out, err = p.communicate(timeout=30)
        finally:
            reap(p, 10)
    assert (p.returncode, out, err) == (EX_INTERRUPTED, b"", b"")


def test_ctrl_c_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*_: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr("netcomp.cli.schema.run", interrupted)
    out, err = io.StringIO(), io.StringIO()
    assert main(["schema"], out, err) == EX_INTERRUPTED
    assert (out.getvalue(), err.getvalue()) == ("", "")


def _commands() -> list[str]:
    for action in build_parser()._actions:
        choices = getattr(action, "choices", None)
        if isinstance(choices, dict):
            return sorted(choices)
    raise AssertionError("the parser has no commands")


def test_every_command_has_a_module() -> None:
    assert sorted(COMMANDS) == _commands()


@pytest.mark.parametrize("command", [None, *_commands()])
def test_every_command_answers_help_and_version(command: str | None) -> None:
    argv = [command] if command else []
    out, err = io.StringIO(), io.StringIO()
    assert main([*argv, "--help"], out, err) == 0
    assert out.getvalue().startswith(f"usage: {' '.join(['netcomp', *argv])} ")
    assert "--version" in out.getvalue() and err.getvalue() == ""
    out, err = io.StringIO(), io.StringIO()
    assert main([*argv, "--version"], out, err) == 0
    assert (out.getvalue(), err.getvalue()) == (f"netcomp {__version__}\n", "")
