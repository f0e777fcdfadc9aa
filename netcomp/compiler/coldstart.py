"""The daemon's first compile, in a forked child, so that what a cold compile allocates and imports (the intent
models, jinja2) never enters the daemon: it keeps the plan, the temp files the child staged and the compiler's
memory (handover.py). Anything that goes wrong there means the compile is done in the daemon: this only saves
memory."""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import select
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from netcomp import libc
from netcomp.compiler.output import Output, Stager
from netcomp.compiler.plan import Plan
from netcomp.fsutil import remove_stale_tmp

if TYPE_CHECKING:
    from collections.abc import Sequence

    from netcomp.compiler.compiler import Compiler

log = logging.getLogger("netcomp.compiler")
# A child that has not answered by then is stuck: it is killed and the daemon compiles, well inside the unit's
# start timeout.
CHILD_TIMEOUT = 120.0


def _die_with(parent: int) -> None:  # pragma: no cover - the child's
    """The child is killed when the daemon dies (under any supervisor, not only systemd's KillMode=mixed): an
    orphan would go on writing the output dir's temp files beside the next daemon's."""
    try:
        libc.set_pdeathsig(signal.SIGKILL)
    except OSError:
        os._exit(1)
    if os.getppid() != parent:
        os._exit(1)  # the daemon died before the prctl took: nobody to answer


def _read_all(fd: int, deadline: float) -> bytes | None:
    """Everything written to the pipe until its writer closed it; None when the deadline passed first."""
    parts: list[bytes] = []
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not poller.poll(left * 1000):
                return None
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(parts)
            parts.append(chunk)
    finally:
        os.close(fd)


@dataclass
class Handover:
    plan: Plan
    staged: Stager | None  # the temp files the child wrote, for Output.apply to publish
    state: bytes  # the compiler's memory (handover.adopt)


def compile_forked(
    make_compiler: Callable[[], Compiler],
    output: Output,
    files: Sequence[Path],
    *,
    stage: bool,
    timeout: float | None = None,
) -> Handover | None:
    """A full compile of `files` in a child; None when it could not be done there (the fork failed, threads are
    already running, the child failed or took too long)."""
    if threading.active_count() > 1:
        return None
    timeout = CHILD_TIMEOUT if timeout is None else timeout
    r, w = os.pipe2(os.O_CLOEXEC)
    parent = os.getpid()
    try:
        pid = os.fork()
    except OSError as e:
        os.close(r)
        os.close(w)
        log.warning("cannot fork to compile (%s): compiling in the daemon", e.strerror)
        return None
    if pid == 0:  # pragma: no cover - the child; its work is checked through the parent
        code = 1
        try:
            os.close(r)
            _die_with(parent)
            # The daemon's signal pipe and handlers are the daemon's (run.Signals): a signal sent to this child
            # must not read as one sent to the daemon. The child ignores them and finishes its compile: a stop
            # signals the whole unit, the daemon hears it itself, and the child dies with the daemon anyway.
            signal.set_wakeup_fd(-1)
            for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                signal.signal(signum, signal.SIG_IGN)
            from netcomp.compiler import handover

            data = handover.answer(make_compiler, output, files, stage)
            with open(w, "wb") as f:
                f.write(data)
            code = 0 if data.startswith(b"K") else 1
        finally:
            os._exit(code)
    os.close(w)
    got = _read_all(r, time.monotonic() + timeout)
    if got is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    if got is None:
        log.warning("compiling in a child process took over %.0f s: killed it, compiling in the daemon", timeout)
        if stage:
            remove_stale_tmp(output.directory)  # what it staged
        return None
    if got == b"D":
        log.debug("the first compile reads TenantNetworks: compiling in the daemon")
        return None
    if status != 0 or not got.startswith(b"K"):
        why = got[1:].decode(errors="replace") if got else f"it ended with wait status {status} and no answer"
        log.warning("compiling in a child process failed, compiling in the daemon: %s", why)
        return None
    plan, staged, written, state = pickle.loads(memoryview(got)[1:])  # from our own child, through a pipe
    stager = Stager.handed(output, staged, {name: Path(p) for name, p in written.items()}) if stage else None
    return Handover(plan, stager, state)
