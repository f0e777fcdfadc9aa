"""The daemon's plugin exec (netcomp.cni.invoke.real_exec): real child processes, no mocks. Each test would
fail if the exec lost the property it names (a deadlock shows as the test's own timeout)."""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time
from pathlib import Path

import pytest

from netcomp.cni.invoke import STDERR_TAIL, real_exec, seal_fds
from netcomp.errors import DelegateError
from tests.lab.checkout import ROOT

PY = sys.executable


def py(code: str, *, stdin: bytes = b"", env: dict[str, str] | None = None, timeout: float = 30):  # type: ignore[no-untyped-def]
    return real_exec([PY, "-I", "-c", code], env or {}, stdin, timeout)


def test_stdin_goes_in_stdout_and_stderr_come_back_apart() -> None:
    res = py(
        "import sys; d = sys.stdin.buffer.read(); sys.stdout.buffer.write(d[::-1]); sys.stderr.write('oops')",
        stdin=b"abc",
    )
    assert (res.returncode, res.stdout, res.stderr) == (0, b"cba", b"oops")


def test_exit_status_and_death_by_signal_are_reported() -> None:
    assert py("raise SystemExit(7)").returncode == 7
    assert py("import os, signal; os.kill(os.getpid(), signal.SIGTERM)").returncode == -signal.SIGTERM


def test_large_stdin_and_output_do_not_deadlock() -> None:
    """Both ways over the pipe's 64 KiB at once: the child writes 1 MiB of stdout and stderr before it reads."""
    code = (
        "import sys; sys.stdout.buffer.write(b'o' * (1 << 20)); sys.stdout.flush(); sys.stderr.write('e' * (1 << 20));"
        "sys.stderr.flush(); d = sys.stdin.buffer.read(); sys.stdout.buffer.write(str(len(d)).encode())"
    )
    res = py(code, stdin=b"i" * (3 << 20))
    assert res.returncode == 0
    assert res.stdout == b"o" * (1 << 20) + str(3 << 20).encode()
    assert res.stderr == b"e" * STDERR_TAIL  # all of it read (no deadlock), its tail kept


def test_output_is_bounded_stdout_refused_stderr_kept_to_its_tail() -> None:
    """A plugin printing without end must not exhaust the daemon: over MAX_STDOUT it is killed with a clear
    error; of stderr the last STDERR_TAIL bytes are kept (what the log and the error's details show)."""
    with pytest.raises(DelegateError, match=r"printed more than 16 MiB on stdout; killed"):
        py("import sys\nwhile True: sys.stdout.buffer.write(b'x' * 65536)")
    code = "import sys; sys.stderr.write('a' * (1 << 20) + 'THE END'); sys.stdout.write('{}')"
    res = py(code)
    assert res.stdout == b"{}" and len(res.stderr) == STDERR_TAIL and res.stderr.endswith(b"aTHE END")


def test_a_child_that_does_not_read_its_stdin_is_still_heard() -> None:
    res = py("import sys; print('early'); sys.stdout.flush()", stdin=b"x" * (4 << 20))
    assert (res.returncode, res.stdout) == (0, b"early\n")


def test_environment_is_exactly_what_was_given() -> None:
    res = py("import os, json; print(json.dumps(dict(os.environ)))", env={"CNI_COMMAND": "ADD", "PATH": "/usr/bin"})
    env = json.loads(res.stdout)
    env.pop("LC_CTYPE", None)  # the interpreter sets it for itself (PEP 538)
    assert env == {"CNI_COMMAND": "ADD", "PATH": "/usr/bin"}


def _exits_within(pid: int, seconds: float) -> bool:
    """Whether the process is gone (or a zombie) within `seconds`: waits on a pidfd, which turns readable when
    the process exits (no polling loop)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], seconds)[0])
    finally:
        os.close(fd)


def test_a_hung_plugin_is_killed_at_its_timeout_with_what_it_started(tmp_path: Path) -> None:
    """As bridge execs host-local: the plugin starts a child of its own; both hang, both are killed."""
    pids = tmp_path / "pids"
    code = (
        "import os, subprocess, sys, time; "
        "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{c.pid}}'); time.sleep(600)"
    )
    t = time.monotonic()
    with pytest.raises(DelegateError, match=r"timed out after 0.5s"):
        py(code, timeout=0.5)
    assert time.monotonic() - t < 30
    plugin, child = map(int, pids.read_text().split())
    # Each still running is killed before failing, so a failure leaves no sleeper behind (and a pid is signalled
    # only while it is known to be ours: still alive).
    survivors = [pid for pid in (plugin,) if _alive(pid)] + [child] * (not _exits_within(child, 10))
    for pid in survivors:
        os.kill(pid, signal.SIGKILL)
    assert survivors == []  # the plugin killed and reaped; its child killed (the pidfd says when it is gone)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_missing_or_unexecutable_plugin_is_a_cni_error(tmp_path: Path) -> None:
    with pytest.raises(DelegateError, match="cannot execute: No such file"):
        real_exec([str(tmp_path / "nope")], {}, b"", 5)
    f = tmp_path / "notexec"
    f.write_text("#!/bin/sh\n")
    f.chmod(0o644)
    with pytest.raises(DelegateError, match="cannot execute: Permission denied"):  # no x bit: root too
        real_exec([str(f)], {}, b"", 5)
    with pytest.raises(DelegateError, match="not an absolute path"):  # never looked up in the cwd
        real_exec(["true"], {"PATH": "/usr/bin:/bin"}, b"", 5)


def _open_fds() -> set[int]:
    return {int(n) for n in os.listdir("/proc/self/fd")}


def test_no_fd_is_leaked_in_the_daemon_or_into_the_child() -> None:
    before = _open_fds()
    r, w = os.pipe()
    os.set_inheritable(r, True)  # as an fd the daemon was started with (systemd's socket, say)
    try:
        seal_fds()
        res = py("import os; print(sorted(int(n) for n in os.listdir('/proc/self/fd')))")
        for _ in range(5):
            py("pass", stdin=b"x")
        with pytest.raises(DelegateError):
            real_exec(["/nonexistent"], {}, b"", 5)
    finally:
        os.close(r)
        os.close(w)
    assert res.stdout.strip() == b"[0, 1, 2, 3]"  # 3: the listing's own fd
    assert _open_fds() == before


def test_signals_python_ignores_are_default_in_the_child() -> None:
    """Python ignores SIGPIPE; a Go plugin writing to a closed pipe must die of it as it would from a shell.
    cat(1) reports its own ignored and blocked signals as the kernel sees them."""
    assert signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    try:
        res = real_exec(["/bin/cat", "/proc/self/status"], {}, b"", 30)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    fields = dict(line.split(":\t", 1) for line in res.stdout.decode().splitlines() if ":\t" in line)
    ignored, blocked = int(fields["SigIgn"], 16), int(fields["SigBlk"], 16)
    assert not ignored & (1 << (signal.SIGPIPE - 1)) and not ignored & (1 << (signal.SIGXFSZ - 1))
    assert blocked == 0


def test_seal_fds_fills_a_closed_stdin_so_pipes_never_take_0_to_2() -> None:
    """A daemon started with stdin closed: seal_fds puts /dev/null there, and a plugin still gets its own stdin
    (were fd 0 free, a pipe would take it and the child's stdio set-up could overwrite it)."""
    code = (
        "import os, sys; os.close(0); sys.path[:0] = [" + repr(str(ROOT)) + "]\n"
        "from netcomp.cni.invoke import real_exec, seal_fds\n"
        "seal_fds(); print(os.readlink('/proc/self/fd/0'))\n"
        "r = real_exec([sys.executable, '-I', '-c', 'import sys; print(sys.stdin.read()[::-1])'], {}, b'abc', 30)\n"
        "print(r.stdout.decode().strip())"
    )
    res = py(code)
    assert res.returncode == 0, res.stderr
    assert res.stdout.decode().split() == ["/dev/null", "cba"]
