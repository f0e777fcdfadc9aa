"""This module enters containers' network namespaces: it opens a path only when it is one (a FIFO planted there
cannot hang the daemon), and does work inside it (`inside`) on a thread of a small crew kept for it, never on a
serving thread. A crew thread that cannot go back to the daemon's namespace ends, never working again. What a
namespace is and where a recorded one is found are netns.py's."""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from netcomp import libc
from netcomp.cni.codes import E_INVALID_ENV
from netcomp.errors import DelegateError, HostError

log = logging.getLogger("netcomp.netns")
CLONE_NEWNET = 0x40000000
NS_GET_NSTYPE = 0xB703  # _IO(0xb7, 0x3), linux/nsfs.h
T = TypeVar("T")


def _setns(fd: int) -> None:
    """The calling thread into the network namespace fd is on."""
    libc.setns(fd, CLONE_NEWNET)


def check_path(path: str) -> str:
    if not path.startswith("/") or "/../" in f"{path}/" or "\0" in path:
        raise DelegateError(E_INVALID_ENV, f"CNI_NETNS {path[:200]!r} must be an absolute path without '..'")
    return path


def _why(path: str, e: OSError) -> str:
    """Why a process's namespace may not be opened: without CAP_SYS_PTRACE the kernel opens /proc/<pid>/ns/* only
    of a process with no capability the daemon lacks (ptrace_may_access)."""
    if e.errno not in (errno.EACCES, errno.EPERM) or not path.startswith("/proc/"):
        return ""
    return (
        " (netcomp.service has no CAP_SYS_PTRACE, so the kernel lets it open only the namespaces of processes "
        "with no capability it lacks: have the runtime pin the namespace (a bind mount, as containerd, CRI-O and "
        "podman do), or give the unit the capability with a drop-in: docs/packaging.md, Hardening)"
    )


def open_netns(path: str) -> tuple[int, tuple[int, int]]:
    """An fd on the network namespace at path and its identity (netns.NetnsId); DelegateError (4) when there is none."""
    check_path(path)
    try:
        # O_NONBLOCK: a FIFO planted at that path must not hang us.
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as e:
        raise DelegateError(
            E_INVALID_ENV, f"cannot open network namespace {path}: {e.strerror}{_why(path, e)}"
        ) from None
    try:
        try:
            kind = fcntl.ioctl(fd, NS_GET_NSTYPE)
        except OSError:
            kind = -1
        if kind != CLONE_NEWNET:
            raise DelegateError(E_INVALID_ENV, f"{path} is not a network namespace")
        st = os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise
    return fd, (st.st_dev, st.st_ino)


def inside(netns: str | int, work: Callable[[], T], what: str) -> T:
    """work() run on a crew thread inside the network namespace (a path, or an fd on it); its exceptions are raised
    here. DelegateError (4) when netns is not a network namespace; an OSError of work is the host's: HostError,
    saying `what` was being done."""
    if isinstance(netns, int):
        fd, label, own_fd = netns, f"fd {netns}", False
    else:
        fd, _ = open_netns(netns)
        label, own_fd = netns, True
    try:
        error, value = _CREW.run(_Job(fd, label, work, what))
    finally:
        if own_fd:
            os.close(fd)
    if error is not None:
        raise error
    return value  # type: ignore[no-any-return]


@dataclass(slots=True)
class _Job:
    fd: int
    label: str
    work: Callable[[], Any]
    what: str
    reply: queue.SimpleQueue[tuple[BaseException | None, Any]] = field(default_factory=queue.SimpleQueue)


class _Crew:
    """The threads that do `inside`'s work: more start when all are busy, and at most KEEP are kept idle."""

    KEEP = 4

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[_Hand] = []

    def run(self, job: _Job) -> tuple[BaseException | None, Any]:
        with self._lock:
            hand = self._idle.pop() if self._idle else None
        if hand is None:
            hand = _Hand(self)
        hand.jobs.put(job)
        return job.reply.get()

    def back(self, hand: _Hand) -> bool:
        """Take an idle hand back; False when enough are idle (the hand then ends)."""
        with self._lock:
            if len(self._idle) >= self.KEEP:
                return False
            self._idle.append(hand)
            return True

    def reset(self) -> None:
        """In a forked child: the parent's threads are not there."""
        self._lock = threading.Lock()
        self._idle = []


class _Hand:
    def __init__(self, crew: _Crew) -> None:
        self.crew = crew
        self.jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        # Made by a serving thread, which is in the daemon's own namespace: the new thread's home. Opened here so
        # that a failure (out of fds) is the caller's error, not a thread that never answers.
        self.home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            self.thread = threading.Thread(target=self._serve, name="netns", daemon=True)
            self.thread.start()
        except BaseException:
            os.close(self.home)
            raise

    def _serve(self) -> None:
        try:
            while True:
                job = self.jobs.get()
                try:
                    error, value, at_home = _do(job, self.home)
                except BaseException as e:  # a bug around the work (the work's own errors are in `error`)
                    # Where the thread is now is not known: it answers, and ends, never working again.
                    job.reply.put((e, None))
                    return
                kept = at_home and self.crew.back(self)  # back in the crew before the answer: reused at once
                job.reply.put((error, value))
                del job, error, value  # an idle thread holds nothing of the last work
                if not kept:
                    return  # if going home failed, the thread ends here, never working again
        finally:
            os.close(self.home)


def _do(job: _Job, home: int) -> tuple[BaseException | None, Any, bool]:
    """(error, value, whether the thread is back home)."""
    try:
        _setns(job.fd)
    except OSError as e:
        return DelegateError(E_INVALID_ENV, f"{job.label} is not a network namespace: {e.strerror}"), None, True
    error: BaseException | None = None
    value: Any = None
    try:
        value = job.work()
    except OSError as e:  # netlink trouble is the host's, not the request's
        error = HostError(f"cannot {job.what} in {job.label}: {e}")
    except BaseException as e:  # raised to the caller, whatever it is
        error = e
    try:
        _setns(home)
    except OSError as e:
        log.critical("a thread could not leave the network namespace %s (%s); it is discarded", job.label, e)
        return error, value, False
    return error, value, True


_CREW = _Crew()
os.register_at_fork(after_in_child=_CREW.reset)
