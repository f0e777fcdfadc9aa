"""`netcomp daemon`, the process: signals first, then the Daemon started (compile, recover, serve, READY=1), then
the main loop: SIGHUP re-reads netcomp.yaml and every intent (keeping the last good), SIGTERM drains and stops,
and every few minutes what rollbacks could not undo is tried again."""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import resource
import signal
import threading
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


def run(load_settings: Callable[[], Settings], *, exec_: Exec = real_exec, state_path: Path | None = None) -> int:
    """`netcomp daemon`: runs until SIGTERM/SIGINT; SIGHUP re-reads netcomp.yaml and every intent."""
    # Signals first: systemd may send SIGTERM at any moment, even before READY=1.
    wake = threading.Event()
    hup = threading.Event()
    term = threading.Event()

    def on_term(signum: int, _: Any) -> None:
        term.set()
        wake.set()

    def on_hup(signum: int, _: Any) -> None:
        hup.set()
        wake.set()

    # A hung daemon, killed by systemd's watchdog (SIGABRT, WatchdogSec=) or by an operator's kill -ABRT, leaves
    # every thread's traceback in the journal, and so does a crash in an extension module.
    faulthandler.enable(all_threads=True)
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    signal.signal(signal.SIGHUP, on_hup)
    seal_fds()  # no fd we were started with reaches a plugin
    _raise_nofile()
    d = Daemon(load_settings, exec_=exec_, state_path=state_path)
    # Watch before the first compile: an edit made at any moment after this is seen (one made while the compile
    # runs recompiles once more), never lost between the compile and READY=1. The watches' events wait in the
    # kernel until the first compile is done: it runs while this is the only thread, so it can run in a child
    # process and leave the daemon small (compiler/coldstart.py).
    d.watch(start=False)
    d.start_cluster()
    d.reload()
    d.start_watching()
    d.start()
    # READY=1 only now: the first compile and the recovery are done, and the socket is served.
    d.notifier.ready(d.status_line())
    while not term.is_set():
        wake.wait()
        wake.clear()
        if hup.is_set() and not term.is_set():
            hup.clear()
            log.info("reloading (SIGHUP)")
            d.notifier.reloading()
            d.reload(reread_config=True)
            d.notifier.ready(d.status_line())
    log.info("stopping: draining requests in flight")
    return 0 if d.stop() else 1
