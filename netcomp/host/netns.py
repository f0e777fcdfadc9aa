"""This module knows container network namespaces by identity (the (device, inode) of the nsfs file and the
cookie), never by the path that names them now, and gives DEL and CHECK a path to exactly the namespace ADD
attached, wherever it still is (`find`). It also tells the host's own namespaces apart, so that no ADD is given
one. It does not enter namespaces: nsenter.py does. docs/reliability.md, "Namespaces by identity"."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import functools
import logging
import os
import re
import socket
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

from netcomp import libc
from netcomp.cni.codes import E_TRY_LATER
from netcomp.errors import DelegateError, HostError
from netcomp.fsutil import read_bounded
from netcomp.host.nsenter import CLONE_NEWNET, inside, open_netns

log = logging.getLogger("netcomp.netns")
NS_GET_ID = 0x8008B70D  # _IOR(0xb7, 0xd, __u64), linux/nsfs.h: a network namespace's cookie, without entering it
SO_NETNS_COOKIE = 71  # asm-generic/socket.h (Linux 5.14)
AT_EMPTY_PATH = 0x1000
FILEID_NSFS = 0xF1  # linux/exportfs.h: a namespace's file handle (Linux 6.18)
_NSFS_HANDLE = struct.Struct("QII")  # struct nsfs_file_handle (linux/nsfs.h): ns_id, ns_type, ns_inum


class _FileHandle(ctypes.Structure):
    _fields_ = [("handle_bytes", ctypes.c_uint), ("handle_type", ctypes.c_int), ("f_handle", ctypes.c_ubyte * 64)]


NetnsId = tuple[int, int]  # (st_dev, st_ino) of the namespace: its identity, whatever path names it


class Recorded(Protocol):
    """What a record (records.record.Record) says of the namespace its ADD attached: its identity and its cookie,
    each None in records older than netcomp's keeping them."""

    @property
    def netns_id(self) -> NetnsId | None: ...

    @property
    def netns_cookie(self) -> int | None: ...


def identity(path: str) -> NetnsId | None:
    """The identity of the network namespace at path; None when there is none there now."""
    try:
        fd, nid = open_netns(path)
    except DelegateError:
        return None
    os.close(fd)
    return nid


def host_namespaces(extra: Iterable[str] = ()) -> tuple[set[NetnsId], str]:
    """The namespaces no container may be given: the daemon's own, `extra` (where the delegates run), and the
    host's: PID 1's, or kthreadd's (PID 2) where PID 1 is not in /proc. Without ptrace access to its nsfs file,
    the host's is whichever of the others has its /proc entries (`_proc_ino`). Returns the set and why the host's
    is not known ("" when it is): an ADD is refused while it is not."""
    out: dict[NetnsId, str] = {}
    problems = []
    for p in ("/proc/self/ns/net", *extra):
        try:
            fd, nid = open_netns(p)
        except DelegateError as e:
            problems.append(e.msg)
            continue
        os.close(fd)
        out[nid] = p
    for proc, comm in (("/proc/1", None), ("/proc/2", b"kthreadd\n")):
        try:
            if comm is not None and read_bounded(f"{proc}/comm", 64) != comm:
                continue
            host = _proc_ino(proc)
        except OSError as e:
            problems.append(f"{proc}: {e.strerror}")
            continue
        try:
            st = os.stat(f"{proc}/ns/net")
            return {*out, (st.st_dev, st.st_ino)}, ""
        except OSError as e:
            problems.append(f"{proc}/ns/net: {e.strerror}")
        if any(_proc_ino_of(p) == host for p in out.values()):
            return set(out), ""
    return set(out), "cannot read the host's network namespace (" + "; ".join(problems) + ")"


def _proc_ino(task: str) -> int:
    """The inode number of the /proc/net/dev entry of the namespace a task (its /proc dir) is in: equal for two
    tasks only in one namespace, and readable without ptrace access, unlike the task's nsfs file."""
    return os.stat(f"{task}/net/dev").st_ino


def _proc_ino_of(netns: str | int) -> int | None:
    """_proc_ino of the network namespace at a path or fd, read from inside it; None when it cannot be."""
    if netns == "/proc/self/ns/net":
        return _proc_ino("/proc/thread-self")
    try:
        return inside(netns, lambda: _proc_ino("/proc/thread-self"), "read its /proc entries")
    except (DelegateError, HostError):
        return None


@dataclass(frozen=True, slots=True)
class Target:
    """Where a DEL or CHECK acts: `path` for the plugins ("" when the namespace ADD attached is gone: they then
    free only what they hold outside it), and `found` whether the recorded namespace still exists."""

    path: str
    found: bool


@contextlib.contextmanager
def recorded(entry: Recorded, *paths: str, pin: bool) -> Iterator[Target]:
    """The namespace the entry's ADD recorded, looked for at each of `paths` in order, then, with `pin`, anywhere
    it can still be (`find`). Only a namespace of the recorded identity counts. With `pin` the plugins get a path
    to the daemon's own descriptor on it, which no later mount or PID reuse can redirect; without (CHECK, whose
    plugins compare it with their result's `sandbox`), the path itself. An entry without an identity trusts the
    first path that is a network namespace; one without a cookie is looked for at its paths only, an inode number
    alone being no proof. DelegateError (11) when whether it is gone cannot be told."""
    fd: int | None = None
    path = ""
    for p in filter(None, paths):
        try:
            opened, nid = open_netns(p)
        except DelegateError:
            continue
        if entry.netns_id is None or (nid == entry.netns_id and _same(opened, entry.netns_cookie)):
            fd, path = opened, p
            break
        os.close(opened)
    else:
        recorded_id, want = entry.netns_id, entry.netns_cookie
        fd = find(recorded_id, want) if pin and recorded_id and want is not None else None
    if fd is None:
        yield Target("", False)
        return
    try:
        yield Target(f"/proc/{os.getpid()}/fd/{fd}" if pin else path, True)
    finally:
        os.close(fd)


def cookie(fd: int) -> int | None:
    """The cookie of the network namespace fd is on, which the kernel gives no other namespace while it runs
    (NS_GET_ID, Linux 6.18, or SO_NETNS_COOKIE of a socket made in it, Linux 5.14). None on a kernel with neither."""
    with contextlib.suppress(OSError):
        return int(struct.unpack("Q", fcntl.ioctl(fd, NS_GET_ID, bytes(8)))[0])
    try:
        return inside(fd, _own_cookie, "read its cookie")
    except (DelegateError, HostError):
        return None


def _own_cookie() -> int:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        return int(struct.unpack("Q", s.getsockopt(socket.SOL_SOCKET, SO_NETNS_COOKIE, 8))[0])


def _same(fd: int, want: int | None) -> bool:
    """Whether the namespace fd is on has the recorded cookie (any, when none was recorded)."""
    return want is None or cookie(fd) == want


def find(nid: NetnsId, want: int) -> int | None:
    """A descriptor on the network namespace of this identity (inode and cookie) wherever it still is; None when
    it is gone. A kernel that opens namespaces by file handle (Linux 6.18) answers that itself, whatever holds
    the namespace; elsewhere it is looked for in /proc (`_search`), which misses a namespace held only by a socket
    of a process outside it. DelegateError (11) when /proc cannot be read well enough to tell."""
    if _handles():
        try:
            return _by_handle(nid, want)
        except OSError as e:  # refused (a seccomp filter without open_by_handle_at): looked for in /proc
            log.debug("cannot open a network namespace by its handle (%s); looking for it in /proc", e.strerror)
    try:
        return _search(nid, want)
    except _Gone:
        return None


@functools.cache
def _handles() -> bool:
    """Whether this kernel opens namespaces by file handle: a handle of the daemon's own namespace is of type
    FILEID_NSFS and holds its id, type and inode as struct nsfs_file_handle lays them out."""
    fd = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        h, mount_id = _FileHandle(handle_bytes=64), ctypes.c_int()
        try:
            libc.name_to_handle_at(fd, b"", ctypes.byref(h), ctypes.byref(mount_id), AT_EMPTY_PATH)
        except OSError:
            return False
        own = (cookie(fd), CLONE_NEWNET, os.fstat(fd).st_ino)
    finally:
        os.close(fd)
    if h.handle_type != FILEID_NSFS or h.handle_bytes != _NSFS_HANDLE.size:
        return False
    return _NSFS_HANDLE.unpack(bytes(h.f_handle[: _NSFS_HANDLE.size])) == own


def _by_handle(nid: NetnsId, want: int) -> int | None:
    """The namespace of id `want` opened by its handle; None when the kernel has no such namespace any more."""
    h = _FileHandle(handle_bytes=_NSFS_HANDLE.size, handle_type=FILEID_NSFS)
    ctypes.memmove(h.f_handle, _NSFS_HANDLE.pack(want, CLONE_NEWNET, nid[1]), _NSFS_HANDLE.size)
    mount = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)  # any nsfs file names the filesystem
    try:
        fd = libc.open_by_handle_at(mount, ctypes.byref(h), os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        if e.errno == errno.ESTALE:
            return None
        raise
    finally:
        os.close(mount)
    st = os.fstat(fd)
    if (st.st_dev, st.st_ino) != nid:  # never: an id names one namespace
        os.close(fd)
        return None
    log.info("network namespace net:[%d] found by its id", nid[1])
    return int(fd)


def _search(nid: NetnsId, want: int) -> int | None:
    """find() in /proc without ptrace access: the nsfs mounts of the daemon's mount namespace first, then for
    each process the nsfs mounts of its mount namespace, its tasks' namespaces and its descriptors, where they can
    be read. A task whose namespace cannot be read is not in this one when its namespace is one the daemon knows
    or has no interface but lo; otherwise, and for a mount of this inode that cannot be opened, DelegateError 11.
    The first namespace of the recorded inode number opened decides: it is the one, or that one is gone (_Gone)."""
    tag = f"net:[{nid[1]}]"
    refused: list[str] = []  # what may be the namespace but cannot be opened
    unread: list[str] = []  # the /proc dirs of tasks whose namespace cannot be read
    for p in _nsfs_mounts("/proc/self/mountinfo", tag):
        if (fd := _open(p, nid, want, refused)) is not None:
            return fd
    seen_mnt = {_link("/proc/self/ns/mnt")}
    for pid in _pids():
        proc = f"/proc/{pid}"
        mnt = _link(f"{proc}/ns/mnt")
        if mnt == _REFUSED:
            mnt = _first_mount(proc)
        paths = []
        if mnt is not None and mnt not in seen_mnt:  # None: gone, or exiting (then it holds no namespace)
            seen_mnt.add(mnt)
            paths += [f"{proc}/root{p}" for p in _nsfs_mounts(f"{proc}/mountinfo", tag)]
        before = len(unread)
        for tid in _listing(f"{proc}/task"):
            link = _link(f"{proc}/task/{tid}/ns/net")
            if link == tag:
                paths.append(f"{proc}/task/{tid}/ns/net")
            elif link == _REFUSED:
                unread.append(f"{proc}/task/{tid}")
        if len(unread) == before:  # the descriptors of a process whose namespaces are refused are refused too
            paths += [f"{proc}/fd/{n}" for n in _listing(f"{proc}/fd") if _link(f"{proc}/fd/{n}") == tag]
        for p in paths:
            if (fd := _open(p, nid, want, refused)) is not None:
                return fd
    if refused:
        raise _unsure(refused[0], OSError(errno.EACCES, os.strerror(errno.EACCES)))
    known, pinned = {_proc_ino("/proc/thread-self")}, False
    for task in unread:
        net = _task_net(task)
        if net is None or net[0] in known or net[1]:
            continue
        if not pinned and (fd := _pinned(nid, want, known)) is not None:
            return fd
        pinned = True
        if net[0] not in known:
            raise _unsure(f"{task}/ns/net", OSError(errno.EACCES, os.strerror(errno.EACCES)))
    return None


_REFUSED = ""  # what _link says of a link it may not read (no ptrace access): no namespace link is empty


def _first_mount(proc: str) -> str | None:
    """A process's mount namespace told without ptrace access: the id of the first mount its mountinfo lists
    (a mount belongs to one namespace). None when the process is gone."""
    try:
        fd = os.open(f"{proc}/mountinfo", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        head = os.read(fd, 64)
    except OSError:
        return None
    finally:
        os.close(fd)
    return "mount " + head.split(b" ", 1)[0].decode("ascii", "replace")


class _Gone(Exception):
    """A namespace of the recorded inode number has another cookie: the recorded one is gone, since no two live
    namespaces have one inode number."""


def _open(path: str, nid: NetnsId, want: int, refused: list[str]) -> int | None:
    """A descriptor on the namespace at path when it is the one looked for; None when path is no namespace of
    its inode number now, or cannot be opened (then it joins `refused`). _Gone when it is another of that number."""
    try:
        os.stat(path)
    except PermissionError:
        refused.append(path)
        return None
    except OSError:
        return None
    try:
        fd, got = open_netns(path)
    except DelegateError:  # gone since it was listed, or not a namespace
        return None
    if got != nid:
        os.close(fd)
        return None
    if cookie(fd) != want:
        os.close(fd)
        raise _Gone
    log.info("network namespace net:[%d] found at %s", nid[1], path)
    return fd


def _pinned(nid: NetnsId, want: int, known: set[int]) -> int | None:
    """Add to `known` the _proc_ino of every network namespace mounted in the daemon's mount namespace; one of the
    recorded inode number decides, as in _open, and never joins `known`."""
    for p in _nsfs_mounts("/proc/self/mountinfo", None):
        try:
            fd, got = open_netns(p)
        except DelegateError:  # gone since it was listed
            continue
        ino = _proc_ino_of(fd) if got != nid else None
        os.close(fd)
        if got == nid and (found := _open(p, nid, want, [])) is not None:
            return found
        if ino is not None:
            known.add(ino)
    return None


def _task_net(task: str) -> tuple[int, bool] | None:
    """Of the namespace a task is in: _proc_ino, and whether it has no interface but lo. None when it is gone."""
    try:
        ino = _proc_ino(task)
        lines = read_bounded(f"{task}/net/dev", 1 << 20).splitlines()[2:]  # two lines of headings
    except (FileNotFoundError, ProcessLookupError):
        return None
    except OSError as e:
        raise _unsure(f"{task}/net/dev", e) from None
    return ino, [line.split(b":", 1)[0].strip() for line in lines] == [b"lo"]


def _unsure(what: str, e: OSError) -> DelegateError:
    return DelegateError(
        E_TRY_LATER,
        f"cannot tell whether the container's network namespace is gone: {what}: {e.strerror}",
        "nothing was freed; it may still be held where netcomp cannot look",
    )


def _pids() -> list[int]:
    try:
        return [int(n) for n in os.listdir("/proc") if n.isdigit()]
    except OSError as e:
        raise _unsure("/proc", e) from None


def _listing(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except (FileNotFoundError, ProcessLookupError, PermissionError):  # gone, or another uid's: not searched
        return []
    except OSError as e:
        raise _unsure(path, e) from None


def _link(path: str) -> str | None:
    try:
        return os.readlink(path)
    except (FileNotFoundError, ProcessLookupError):
        return None
    except PermissionError:  # no ptrace access to the process
        return _REFUSED
    except OSError as e:
        if e.errno == errno.EINVAL:  # not a link
            return None
        raise _unsure(path, e) from None


_ESCAPE = re.compile(rb"\\([0-7]{3})")


def _nsfs_mounts(mountinfo: str, tag: str | None) -> list[str]:
    """The mount points of nsfs mounts of `tag` (None: of every network namespace) in a mountinfo file, which any
    process may read (proc(5): root is field 4, the mount point field 5 with octal escapes, the type after ' - ')."""
    try:
        data = read_bounded(mountinfo, 64 << 20)
    except (FileNotFoundError, ProcessLookupError):
        return []
    except OSError as e:
        if e.errno == errno.EINVAL:  # an exiting process, its namespaces let go already
            return []
        raise _unsure(mountinfo, e) from None
    want = b"net:[" if tag is None else tag.encode()
    out = []
    for line in data.splitlines():
        if want not in line:
            continue
        head, sep, tail = line.partition(b" - ")
        fields = head.split(b" ")
        if not (sep and len(fields) > 4 and tail.split(b" ", 1)[0] == b"nsfs"):
            continue
        if fields[3] == want or (tag is None and fields[3].startswith(want)):
            point = _ESCAPE.sub(lambda m: bytes([int(m.group(1), 8)]), fields[4])
            out.append(os.fsdecode(point))
    return out
