"""`netcomp daemon`, the process: signals first, then the Daemon started (compile, recover, serve, READY=1), then
the main loop: SIGHUP reloads (keeping the last good) on a thread of its own, SIGTERM drains and stops."""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import os
import resource
import select
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from netcomp.cni.invoke import Exec, real_exec, seal_fds
from netcomp.daemon.daemon import Daemon
from netcomp.settings import Settings

log = logging.getLogger("netcomp.daemon")


def _raise_nofile() -> None:
    """Connections are file descriptors: take the hard limit (systemd gives services a soft 1024)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft != resource.RLIM_INFINITY and soft < want:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


class Signals:
    """SIGTERM, SIGINT and SIGHUP as the main loop sees them, whichever thread the kernel gave them to. CPython
    runs a Python handler only in the main thread, once that thread runs Python again: a main thread asleep on a
    lock would miss a SIGTERM. So the handler's C part also writes the signal's number to a pipe
    (signal.set_wakeup_fd), which the main loop sleeps reading. Once the pipe is there, its bytes are the only
    record of a signal: one signal is one byte, read once, never taken twice."""

    WATCHED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

    def __init__(self) -> None:
        self.term = False
        self.hup = False
        self._r = self._w = -1

    def install(self) -> None:
        """The handlers: first thing, so that a SIGTERM at any moment of the start is kept."""
        for signum in self.WATCHED:
            signal.signal(signum, self._handler)

    def attach(self) -> None:
        """The pipe, once fds 0-2 are sure to be open (seal_fds), so that it gets none of them. The signals are
        held meanwhile (the only thread is this one): one that came between the pipe's taking over and the
        handler's knowing it would be recorded by neither; held, it is delivered once the pipe is in place."""
        old = signal.pthread_sigmask(signal.SIG_BLOCK, self.WATCHED)
        try:
            r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
            signal.set_wakeup_fd(w, warn_on_full_buffer=False)
            self._r, self._w = r, w
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)

    def _handler(self, signum: int, _: Any) -> None:
        if self._w < 0:  # before the pipe: the handler is the record
            self._note(signum)

    def _note(self, signum: int) -> None:
        if signum == signal.SIGHUP:
            self.hup = True
        elif signum in self.WATCHED:
            self.term = True

    def _drain(self) -> None:
        while True:
            try:
                data = os.read(self._r, 512)
            except BlockingIOError:
                return
            for signum in data:
                self._note(signum)

    def wait(self, timeout: float | None = None) -> bool:
        """Until a watched signal came (True), or timeout; at once when one came since it was last taken."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self._drain()
            if self.term or self.hup:
                return True
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            select.select([self._r], [], [], left)

    def take_hup(self) -> bool:
        hup, self.hup = self.hup, False
        return hup


def _reloads(d: Daemon, wanted: threading.Event) -> None:
    """SIGHUP's reloads, on a thread of their own: the main loop stays on the signal pipe, so that a SIGTERM is
    acted on whatever a reload is doing, one that never finishes included (the daemon meanwhile says it is not
    ready: Daemon.stuck). SIGHUPs that come during a reload make one more."""
    while True:
        wanted.wait()
        wanted.clear()
        log.info("reloading (SIGHUP)")
        d.notifier.reloading()
        d.reload(reread_config=True)  # a failure is the daemon's to report (degraded), never this thread's end
        d.notifier.ready(d.status_line())


def run(load_settings: Callable[[], Settings], *, exec_: Exec = real_exec, state_path: Path | None = None) -> int:
    """`netcomp daemon`: runs until SIGTERM/SIGINT; SIGHUP re-reads netcomp.yaml and every intent."""
    # Signals first: systemd may send SIGTERM at any moment, even before READY=1.
    signals = Signals()
    # A hung daemon, killed by systemd's watchdog (SIGABRT, WatchdogSec=) or by an operator's kill -ABRT, leaves
    # every thread's traceback in the journal, and so does a crash in an extension module.
    faulthandler.enable(all_threads=True)
    signals.install()
    seal_fds()  # no fd we were started with reaches a plugin
    signals.attach()
    _raise_nofile()
    d = Daemon(load_settings, exec_=exec_, state_path=state_path)
    # Watch before the first compile, so that no edit is lost before READY=1; the events wait in the kernel until
    # the first compile is done, which runs while this is the only thread and so can fork (compiler/coldstart.py).
    d.watch(start=False)
    d.start_cluster()
    d.reload()
    d.start_watching()
    d.start()
    # READY=1 only now: the first compile and the recovery are done, and the socket is served.
    d.notifier.ready(d.status_line())
    reload_wanted = threading.Event()
    threading.Thread(target=_reloads, args=(d, reload_wanted), name="reload", daemon=True).start()
    while True:
        signals.wait()
        if signals.term:
            break
        if signals.take_hup():
            reload_wanted.set()
    log.info("stopping: draining requests in flight")
    code = 0 if d.stop() else 1
    if d.compiling:  # one that never ends (a file that never answers) must not hold the interpreter's shutdown
        log.warning("stopping with a compile unfinished")
        logging.shutdown()
        os._exit(code)
    return code
