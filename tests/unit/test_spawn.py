"""netcomp.cni.spawn (posix_spawn with the GIL released) and the runner's stdin put in the pipe before the plugin
starts: real children, no mocks. What the child gets (fds, signals, environment, errors) is test_exec.py's,
through real_exec, which spawns with this."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from netcomp.cni import process, spawn
from tests.lab.checkout import ROOT


def test_other_threads_run_while_the_child_has_not_exec_d_yet(tmp_path: Path) -> None:
    """The child stops before its exec: a file action opens a FIFO for reading, which blocks until a writer
    comes. The only writer is another thread of the parent, and it must run Python to get there (it tries a
    non-blocking open until the child is waiting). With the GIL held through the spawn, as os.posix_spawn holds
    it, that thread never runs and the spawn never returns: the script below then times out."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    script = textwrap.dedent(
        f"""
        import errno, os, sys, threading, time
        sys.path[:0] = [{str(ROOT)!r}]
        from netcomp.cni import spawn
        assert spawn.AVAILABLE
        fifo = {str(fifo)!r}
        ran = []

        def writer():
            while True:  # polls for the child, each try needing the GIL
                try:
                    fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
                except OSError as e:
                    if e.errno != errno.ENXIO:  # ENXIO: no reader yet
                        raise
                    time.sleep(0.001)
                    continue
                ran.append(fd)
                return

        t = threading.Thread(target=writer, daemon=True)
        t.start()
        wait_for_writer = [(os.POSIX_SPAWN_OPEN, 5, fifo, os.O_RDONLY, 0)]
        pid = spawn.posix_spawn("/bin/true", ["true"], {{}}, file_actions=wait_for_writer)
        _, status = os.waitpid(pid, 0)
        t.join()
        print(os.waitstatus_to_exitcode(status), len(ran))
        """
    )
    try:
        p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        # Let the child that waits in its open go (it execs /bin/true and ends), then fail.
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        pytest.fail("the spawn held the GIL: the writer thread never ran")
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["0", "1"]


def test_os_posix_spawn_is_the_fallback_without_libc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spawn, "_LIBC", None)
    res = process.real_exec(["/bin/cat"], {}, b"abc", 30)
    assert (res.returncode, res.stdout) == (0, b"abc")
    with pytest.raises(OSError) as e:
        spawn.posix_spawn("/nonexistent", ["x"], {})
    assert e.value.errno == 2


def test_spawn_takes_os_posix_spawns_arguments(tmp_path: Path) -> None:
    """Each file action kind, the process group, the signal mask and defaults, as os.posix_spawn does them."""
    out = tmp_path / "out"
    r, w = os.pipe()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    try:
        pid = spawn.posix_spawn(
            "/bin/sh",
            ["sh", "-c", 'echo "$X $$ $(ps -o pgid= -p $$)" >&3; grep -E "^Sig(Blk|Ign)" /proc/self/status >&3'],
            {"X": "é", "PATH": "/usr/bin:/bin"},
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 3, str(out), os.O_WRONLY | os.O_CREAT, 0o600),
                (os.POSIX_SPAWN_DUP2, w, 4),
                (os.POSIX_SPAWN_CLOSE, r),
            ],
            setpgroup=0,
            setsigmask=(),
            setsigdef=(signal.SIGPIPE,),
        )
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
        os.close(w)
    _, status = os.waitpid(pid, 0)
    os.close(r)
    assert os.waitstatus_to_exitcode(status) == 0
    first, *sigs = out.read_text().splitlines()
    value, child, group = first.split()
    assert value == "é" and child == group == str(pid)  # its own process group
    fields = dict(line.split(":\t") for line in sigs)
    assert int(fields["SigBlk"], 16) == 0
    assert not int(fields["SigIgn"], 16) & (1 << (signal.SIGPIPE - 1))


def test_a_failed_exec_is_an_oserror_naming_the_path(tmp_path: Path) -> None:
    with pytest.raises(OSError) as e:
        spawn.posix_spawn(str(tmp_path / "missing"), ["missing"], {})
    assert e.value.errno == 2 and e.value.filename == str(tmp_path / "missing")
    with pytest.raises(ValueError, match="unknown file action"):
        spawn.posix_spawn("/bin/true", ["true"], {}, file_actions=[(99, 1)])


def test_stdin_is_in_the_pipe_before_the_plugin_starts() -> None:
    """What fits is written before the spawn (the plugin never waits for the daemon to be scheduled); the rest,
    if any, is left for the poll loop."""
    r, w = os.pipe2(os.O_NONBLOCK)
    try:
        assert process._prefill(w, b"x" * 1000).nbytes == 0
        assert os.read(r, 4096) == b"x" * 1000
        size = os.fstat(w).st_size or 65536
        left = process._prefill(w, b"y" * (4 * size))
        assert 0 < left.nbytes < 4 * size
    finally:
        os.close(r)
        os.close(w)


@pytest.mark.parametrize("fallback", [False, True])
def test_a_string_c_cannot_take_is_a_cni_error(monkeypatch: pytest.MonkeyPatch, fallback: bool) -> None:
    """A NUL byte would end the C string early (the plugin would see another argument or value than the one
    given); an environment name with '=' would set another variable. Both are refused before anything runs, with
    or without libc, and real_exec reports them as a CNI error, closing every pipe it opened."""
    if fallback:
        monkeypatch.setattr(spawn, "_LIBC", None)
    for argv, env in ((["/bin/true", "a\0b"], {}), (["/bin/true"], {"X": "a\0b"}), (["/bin/true"], {"A=B": "c"})):
        with pytest.raises(ValueError):
            spawn.posix_spawn("/bin/true", argv, env)
        before = len(os.listdir("/proc/self/fd"))
        with pytest.raises(process.DelegateError) as e:
            process.real_exec(argv, env, b"", 30)
        assert e.value.code == process.E_OTHER and str(e.value.msg).startswith("cannot execute: ")
        assert len(os.listdir("/proc/self/fd")) == before
