"""The daemon's main loop hears SIGTERM and SIGHUP whichever thread the kernel gives them to (daemon/run.py's
Signals). Real signals, in a child interpreter of its own: the test's process keeps its handlers."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    f"""
    import os, signal, sys, threading
    sys.path[:0] = [{str(ROOT)!r}]
    from netcomp.daemon.run import Signals

    s = Signals()
    s.install()
    s.attach()
    # Another thread that takes the signals; the main thread blocks them, so the kernel can give them to that
    # thread only: what happens when a signal arrives while the daemon's loop or a worker thread is running.
    idle = threading.Event()
    other = threading.Thread(target=idle.wait, daemon=True)
    other.start()
    signal.pthread_sigmask(signal.SIG_BLOCK, set(Signals.WATCHED))
    os.kill(os.getpid(), signal.SIGHUP)
    s.wait()
    print("hup", s.take_hup(), s.term, flush=True)
    os.kill(os.getpid(), signal.SIGTERM)
    s.wait()  # the old loop slept on a threading.Event here for good
    print("term", s.take_hup(), s.term, flush=True)
    """
)


def test_a_signal_taken_by_another_thread_wakes_the_main_loop() -> None:
    try:
        p = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"the main loop never heard the signal: {e.stdout!r}") from None
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["hup True False", "term False True"]
