"""This module runs a plugin as a process (libcni's invoke/raw_exec.go, with what it lacks): it execs it with
exactly the environment and stdin it is given, reads its output bounded in time and size, and leaves nothing it
started behind. It also knows what an exec can take, and kills the delegates an earlier daemon left running."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import select
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from netcomp.cni import spawn
from netcomp.cni.codes import E_OTHER
from netcomp.errors import DelegateError
from netcomp.fsutil import read_bounded

log = logging.getLogger("netcomp.cni")
# What execve(2) takes (include/uapi/linux/binfmts.h): each argument or environment string at most MAX_ARG_STRLEN
# bytes with its NUL, and all of them, with a pointer each, within ARG_MAX (sysconf: a quarter of the stack limit).
MAX_ARG_STRLEN = 32 * 4096
# libcni retries an exec that fails with "text file busy" (a plugin binary being replaced), 5 times, 1 s apart.
BUSY_RETRIES, BUSY_PAUSE = 5, 1.0


def exec_problem(argv: Sequence[str], env: Mapping[str, str]) -> str | None:
    """Why execve(2) could never take this argument list and environment (a NUL byte, which C ends a string at;
    a string over MAX_ARG_STRLEN; all of them over ARG_MAX), or None: such an exec fails however often it is
    tried."""
    total = 0
    for name, text in [*((f"argument {i}", a) for i, a in enumerate(argv)), *((k, f"{k}={v}") for k, v in env.items())]:
        raw = os.fsencode(text)
        if b"\0" in raw:
            return f"{name} holds a NUL byte"
        if len(raw) + 1 > MAX_ARG_STRLEN:
            return f"{name} is {len(raw)} bytes, over the {MAX_ARG_STRLEN >> 10} KiB the kernel takes for one"
        total += len(raw) + 1 + 8
    arg_max = os.sysconf("SC_ARG_MAX")
    if total > arg_max:
        return f"the plugin's arguments and environment are {total} bytes, over the kernel's {arg_max}"
    return None


@dataclass(frozen=True, slots=True)
class ExecResult:
    returncode: int
    stdout: bytes
    stderr: bytes


class Exec(Protocol):
    def __call__(self, argv: Sequence[str], env: Mapping[str, str], stdin: bytes, timeout: float) -> ExecResult: ...


def real_exec(argv: Sequence[str], env: Mapping[str, str], stdin: bytes, timeout: float) -> ExecResult:
    """Exec `argv[0]` (an absolute path: no shell, no PATH lookup) with exactly `env`, `stdin` on its stdin, and
    its output captured; killed after `timeout` seconds with what it started, and once it has exited, whatever it
    left holding its output is killed rather than waited for. posix_spawn(3) with the GIL released (spawn.py) and
    one poll loop cost less CPU than subprocess.run (bench/spawn.py) and give the child the same: only fds 0-2
    (`seal_fds`), SIGPIPE and SIGXFSZ at their defaults, an empty signal mask, no deadlock. Its stdin is in the
    pipe before it starts, as much as the pipe holds."""
    if not os.path.isabs(argv[0]):  # never resolved against the cwd or a PATH
        raise DelegateError(E_OTHER, f"cannot execute {argv[0]!r}: not an absolute path")
    deadline = time.monotonic() + timeout
    in_r, in_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
    out_r, out_w = os.pipe2(os.O_CLOEXEC)
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    try:
        os.set_blocking(in_r, True)  # the plugin's end: a plain blocking stdin
        left = _prefill(in_w, stdin)
        pid = _spawn(argv, env, (in_r, out_w, err_w), deadline)
    except (OSError, ValueError) as e:  # ValueError: a NUL byte in an argument or the environment
        for fd in (in_r, in_w, out_r, out_w, err_r, err_w):
            os.close(fd)
        # An exec the kernel can never take fails the same way however often it is tried (exec_problem).
        permanent = isinstance(e, ValueError) or e.errno == errno.E2BIG
        raise DelegateError(
            E_OTHER, f"cannot execute: {getattr(e, 'strerror', None) or e}", permanent=permanent
        ) from None
    for fd in (in_r, out_w, err_w):
        os.close(fd)
    pipes = (os.fstat(out_r).st_ino, os.fstat(err_r).st_ino)
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:  # a kernel before 5.3: the plugin's end is seen as its pipes' end
        pidfd = -1
    try:
        out, err, held = _communicate(in_w, out_r, err_r, left, deadline, pidfd)
    except TimeoutError:
        _kill(pid, pipes)
        raise DelegateError(E_OTHER, f"timed out after {timeout:g}s") from None
    except _TooMuch:
        _kill(pid, pipes)
        raise DelegateError(E_OTHER, f"printed more than {MAX_STDOUT >> 20} MiB on stdout; killed") from None
    except BaseException:
        _kill(pid, pipes)
        raise
    finally:
        if pidfd >= 0:
            os.close(pidfd)
    if held:
        status, n = _kill(pid, pipes)
        if n:  # none: another spawn's child held the pipes for a moment, until its exec closed them
            log.warning(
                "plugin %s exited leaving %d processes that hold its output; killed, with its process group",
                os.path.basename(argv[-1]),
                n,
            )
    else:
        _, status = os.waitpid(pid, 0)
    return ExecResult(os.waitstatus_to_exitcode(status), out, err)


def _spawn(argv: Sequence[str], env: Mapping[str, str], fds: tuple[int, int, int], deadline: float) -> int:
    for attempt in range(BUSY_RETRIES + 1):
        try:
            return spawn.posix_spawn(
                argv[0],
                argv,
                env,
                file_actions=[(os.POSIX_SPAWN_DUP2, fd, n) for n, fd in enumerate(fds)],
                setsigdef=_SIGDEF,
                setsigmask=(),
                setpgroup=0,  # its own process group: a timeout kills what it started too (bridge's IPAM plugin)
            )
        except OSError as e:
            # Retry the exec on "text file busy": the binary is being replaced (a package upgrade), as libcni does.
            if e.errno != errno.ETXTBSY or attempt == BUSY_RETRIES or time.monotonic() + BUSY_PAUSE > deadline:
                raise
            log.info("%s is being replaced (text file busy); trying again in %g s", argv[-1], BUSY_PAUSE)
            time.sleep(BUSY_PAUSE)
    raise AssertionError("unreachable")


def _prefill(fd: int, data: bytes) -> memoryview:
    """Write what the (non-blocking) pipe takes of data now; what is left."""
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view[:65536]) :]
    except BlockingIOError:
        pass
    return view


def _kill(pid: int, pipes: tuple[int, int]) -> tuple[int, int]:
    """Kill the plugin, its process group, and whatever still holds its output pipes (a child in a session of its
    own, which the group's kill misses); reap the plugin. (its wait status, how many holders were killed)."""
    for kill in (os.killpg, os.kill):  # the plugin itself even if its group is somehow gone
        with contextlib.suppress(ProcessLookupError):
            kill(pid, signal.SIGKILL)
    held = _kill_holders(pipes)
    _, status = os.waitpid(pid, 0)
    return status, held


def _kill_holders(pipes: tuple[int, int]) -> int:
    """SIGKILL every other process holding one of these pipes (by inode, as /proc/<pid>/fd shows them)."""
    names = {f"pipe:[{ino}]" for ino in pipes}
    me, killed = os.getpid(), 0
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            fds = os.listdir(f"/proc/{name}/fd")
        except OSError:  # gone, or a kernel thread's
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{name}/fd/{fd}")
            except OSError:
                continue
            if link in names:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(int(name), signal.SIGKILL)
                    killed += 1
                break
    return killed


# A result is a few KiB; a plugin printing without end must not exhaust the daemon's memory. Of stderr only the
# tail is kept (the log and the error's details show its end).
MAX_STDOUT, STDERR_TAIL = 16 << 20, 64 << 10
HOLD_GRACE = 0.2  # seconds a plugin's pipes may stay held once it exited before their holders are killed


class _TooMuch(Exception):
    pass


_SIGDEF = tuple(getattr(signal, n) for n in ("SIGPIPE", "SIGXFSZ") if hasattr(signal, n))


def _communicate(
    in_w: int, out_r: int, err_r: int, view: memoryview, deadline: float, pidfd: int
) -> tuple[bytes, bytes, bool]:
    """Feed what is left of the child's stdin (`in_w` non-blocking) and read its stdout and stderr until both
    close, or until the child has exited (`pidfd` readable) and what it wrote is read; closes all three fds.
    (stdout, stderr's tail, whether something else still held the pipes when the child had exited).
    TimeoutError when the deadline passes first, _TooMuch when stdout passes MAX_STDOUT."""
    got: dict[int, list[bytes]] = {out_r: [], err_r: []}
    size = {out_r: 0, err_r: 0}
    reading = {out_r, err_r}
    writing: set[int] = set()
    poller = select.poll()
    for fd in reading:
        poller.register(fd, select.POLLIN)
    if pidfd >= 0:
        poller.register(pidfd, select.POLLIN)
    if view:
        writing.add(in_w)
        poller.register(in_w, select.POLLOUT)
    else:
        os.close(in_w)  # all of it is in the pipe: the child reads it, then EOF

    def take(fd: int, block: bytes) -> None:
        got[fd].append(block)
        size[fd] += len(block)
        if fd == out_r and size[fd] > MAX_STDOUT:
            raise _TooMuch
        if fd == err_r and size[fd] > 2 * STDERR_TAIL:
            tail = b"".join(got[fd])[-STDERR_TAIL:]
            got[fd], size[fd] = [tail], len(tail)

    exited = False
    try:
        while (reading or writing or pidfd >= 0) and not exited:  # a child that closed its stdio may run on
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            for fd, _ in poller.poll(max(1, int(left * 1000))):
                if fd == pidfd:
                    exited = True
                elif fd in writing:
                    try:
                        view = view[os.write(fd, view[:65536]) :] if view else view
                    except BlockingIOError:  # full again: poll said writable, someone else wrote first
                        continue
                    except BrokenPipeError:  # the child stopped reading; what it says is still wanted
                        view = view[:0]
                    if not view:
                        poller.unregister(fd)
                        writing.discard(fd)
                        os.close(fd)
                elif block := os.read(fd, 65536):
                    take(fd, block)
                else:
                    poller.unregister(fd)
                    reading.discard(fd)
        # The child has exited: everything it wrote is in the pipes. One still open after that is held by another
        # process: a spawn's child until its exec closes it (a moment), or what the plugin left running (a child
        # in a session of its own, say), which must not keep the request waiting longer than HOLD_GRACE.
        for fd in [*writing, pidfd] if exited else []:
            poller.unregister(fd)
        grace = min(deadline, time.monotonic() + HOLD_GRACE)
        while reading and (left := grace - time.monotonic()) > 0:
            for fd, _ in poller.poll(max(1, int(left * 1000))):
                if block := os.read(fd, 65536):
                    take(fd, block)
                else:
                    poller.unregister(fd)
                    reading.discard(fd)
    finally:
        for fd in (*writing, out_r, err_r):
            os.close(fd)
    return b"".join(got[out_r]), b"".join(got[err_r])[-STDERR_TAIL:], bool(reading)


def seal_fds() -> None:
    """Called once as the daemon starts: make every inherited fd above 2 close-on-exec, so that no plugin sees
    one, and open 0-2 on /dev/null where they are closed, so that no pipe of real_exec's gets one of those numbers
    and is overwritten when the child's stdio is set up."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            opened = os.open(os.devnull, os.O_RDWR)  # the lowest free number: this one
            if opened != fd:
                os.close(opened)
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2:
            with contextlib.suppress(OSError):  # the listing's own fd, closed by now
                os.set_inheritable(fd, False)


MARKER_ENV = "NETCOMP_DELEGATE_OF"


def kill_marked(marker: str, *, rounds: int = 20) -> int:
    """Kill every process whose environment carries MARKER_ENV=marker, with its process group: delegates that a
    daemon of the same cache dir started and that outlived it. Called first at start-up, so that no delegate from
    before a crash races the DELs that undo its ADD. Returns how many were killed."""
    needle = f"{MARKER_ENV}={marker}".encode()
    me = os.getpid()
    killed = 0
    for _ in range(rounds):  # again until a scan finds none: one may have been exec'ing during the last
        found = []
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == me:
                continue
            try:
                env = read_bounded(f"/proc/{name}/environ", 1 << 20)
            except OSError:  # gone, a kernel thread, not ours to read, or not what a delegate's is
                continue
            if needle in env.split(b"\0"):
                found.append(int(name))
        if not found:
            return killed
        for pid in found:
            for kill in (os.killpg, os.kill):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    kill(pid, signal.SIGKILL)
            killed += 1
        # A zombie's environ stays readable until its parent reaps it: waited for (bounded), not counted twice.
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and any(_alive(pid) for pid in found):
            time.sleep(0.01)
    return killed


def _alive(pid: int) -> bool:
    """Not yet dead or a zombie."""
    try:
        state = read_bounded(f"/proc/{pid}/stat", 1 << 16).rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")
