"""The daemon's main loop hears SIGTERM and SIGHUP whichever thread the kernel gives them to (daemon/run.py's
Signals). Real signals, in a child interpreter of its own: the test's process keeps its handlers."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.lab.checkout import ROOT

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


ONCE = textwrap.dedent(
    f"""
    import signal, sys
    sys.path[:0] = [{str(ROOT)!r}]
    from netcomp.daemon.run import Signals

    s = Signals()
    s.install()
    signal.raise_signal(signal.SIGTERM)  # before the pipe: the handler keeps it
    s.attach()
    print(s.wait(0), s.term, flush=True)
    s.term = False
    signal.raise_signal(signal.SIGHUP)  # its handler has run when this returns, and its byte is in the pipe
    assert not s.hup  # the byte is its only record: never taken twice
    print(s.wait(5), s.take_hup(), flush=True)
    print(s.wait(0.2), s.hup, s.term, flush=True)  # nothing left: the one SIGHUP was taken once
    """
)


def test_one_signal_is_taken_once() -> None:
    """A SIGHUP is one reload: no byte left in the pipe to read as a second SIGHUP at the next wait (a reload
    nobody asked for, or a SIGTERM's wait that returns on the stale SIGHUP). A signal that came before the pipe
    was there is kept."""
    p = subprocess.run([sys.executable, "-c", ONCE], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["True True", "True True", "False False False"]


WINDOW = textwrap.dedent(
    f"""
    import signal, sys
    sys.path[:0] = [{str(ROOT)!r}]
    from netcomp.daemon.run import Signals

    s = Signals()
    s.install()
    real = signal.set_wakeup_fd

    def set_wakeup_fd(fd, **kw):  # a SIGTERM at the worst moment of attach: before the pipe takes over
        signal.raise_signal(signal.SIGTERM)
        return real(fd, **kw)

    signal.set_wakeup_fd = set_wakeup_fd
    s.attach()
    print(s.wait(5), s.term, flush=True)
    """
)


def test_a_signal_while_the_pipe_is_attached_is_kept() -> None:
    p = subprocess.run([sys.executable, "-c", WINDOW], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["True True"]
