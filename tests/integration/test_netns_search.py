"""host.netns without CAP_SYS_PTRACE, as netcomp.service runs it: a recorded namespace is found wherever it is
still pinned or held (by the kernel's file handles, and by the /proc search of kernels without them), the host's
namespace is known, and what cannot be read is never taken for gone. Each search runs in a child whose bounding
set lacks CAP_SYS_PTRACE, in real namespaces made here."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from netcomp.host import netns as nsutil
from netcomp.host.nsenter import open_netns
from tests.lab.checkout import ROOT
from tests.lab.netlab import Lab, ip, lab

pytestmark = pytest.mark.root
NO_PTRACE = ["setpriv", "--bounding-set", "-sys_ptrace", "--inh-caps", "-sys_ptrace", "--"]
CAP_SYS_PTRACE = 19

# Run in the child: find() (the /proc search alone with "proc"), or host_namespaces(); JSON on stdout.
CHILD = r"""
import json, os, re, sys
from netcomp.errors import DelegateError
from netcomp.host import netns as n
caps = int(re.search(r"CapEff:\s*(\w+)", open("/proc/self/status").read()).group(1), 16)
out = {"ptrace": bool(caps >> 19 & 1)}
if sys.argv[1] == "host":
    found, unsure = n.host_namespaces()
    out.update(host=sorted(found), unsure=unsure)
else:
    if sys.argv[1] == "proc":
        n._handles = lambda: False
        also, host, every = {int(a) for a in sys.argv[5:]}, os.stat("/proc/1/net/dev").st_ino, n._pids
        def mine(pid):
            try:
                return pid in also or os.stat(f"/proc/{pid}/net/dev").st_ino == host
            except OSError:
                return True
        n._pids = lambda: [p for p in every() if mine(p)]
    try:
        fd = n.find((int(sys.argv[2]), int(sys.argv[3])), int(sys.argv[4]))
    except DelegateError as e:
        out.update(code=e.code, msg=e.msg)
    else:
        if fd is not None:
            st = os.fstat(fd)
            out.update(found=[st.st_dev, st.st_ino], cookie=n.cookie(fd))
        else:
            out.update(found=None)
print(json.dumps(out))
"""


def child(code: str, *args: str) -> dict[str, Any]:
    """What `code` prints (JSON), run in a child whose bounding set lacks CAP_SYS_PTRACE."""
    p = subprocess.run(
        [*NO_PTRACE, sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert p.returncode == 0, p.stderr
    out: dict[str, Any] = json.loads(p.stdout)
    return out


def without_ptrace(*args: str) -> dict[str, Any]:
    out = child(CHILD, *args)
    assert out["ptrace"] is False  # the child really lacks it
    return out


@pytest.fixture
def lb() -> Iterator[Lab]:
    with lab() as it:
        yield it


def recorded(path: str) -> tuple[int, int, int]:
    """(device, inode, cookie) of the namespace at path, as ADD records them."""
    fd, nid = open_netns(path)
    try:
        ck = nsutil.cookie(fd)
    finally:
        os.close(fd)
    assert ck is not None
    return nid[0], nid[1], ck


def find(how: str, rec: tuple[int, int, int], *also: int) -> dict[str, Any]:
    """find() without CAP_SYS_PTRACE. The /proc search looks at the host's processes and `also`: containers of
    other tests running on this machine hold namespaces it could not tell from the one looked for."""
    return without_ptrace(how, *map(str, rec), *map(str, also))


class Holder:
    """A process that holds a namespace by being in it (root, with every capability: the daemon without
    CAP_SYS_PTRACE may not read its namespaces), made non-dumpable when asked."""

    def __init__(self, path: str, dumpable: bool) -> None:
        code = (
            "import ctypes, os, sys\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            f"fd = os.open({path!r}, os.O_RDONLY)\nassert libc.setns(fd, 0x40000000) == 0\nos.close(fd)\n"
            + ("" if dumpable else "assert libc.prctl(4, 0, 0, 0, 0) == 0\n")  # PR_SET_DUMPABLE 0
            + "print('in', flush=True)\nsys.stdin.read()\n"
        )
        self.p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self.p.stdout is not None and self.p.stdout.readline() == b"in\n"

    def end(self) -> None:
        self.p.send_signal(signal.SIGKILL)
        self.p.wait()


@pytest.fixture
def holders() -> Iterator[list[Holder]]:
    made: list[Holder] = []
    yield made
    for h in made:
        h.end()


def test_a_namespace_pinned_in_run_netns_is_found(lb: Lab, search: str) -> None:
    """Pinned by `ip netns add` only: found, with no process of it to read."""
    ctr = lb.container()
    rec = recorded(f"/var/run/netns/{ctr}")
    got = find(search, rec)
    assert got.get("found") == list(rec[:2]) and got["cookie"] == rec[2], got


def test_a_namespace_bind_mounted_only_elsewhere_is_found(lb: Lab, search: str, tmp_path: Path) -> None:
    """Its /run/netns pin removed, a bind mount elsewhere (a runtime's own dir) still holds it: found there."""
    ctr = lb.container()
    rec = recorded(f"/var/run/netns/{ctr}")
    pin = tmp_path / "runtime-netns"
    pin.touch()
    subprocess.run(["mount", "--bind", f"/var/run/netns/{ctr}", str(pin)], check=True)
    try:
        ip("netns", "del", ctr)
        got = find(search, rec)
        assert got.get("found") == list(rec[:2]) and got["cookie"] == rec[2], got
    finally:
        subprocess.run(["umount", str(pin)], check=True)


def test_a_namespace_bind_mounted_only_in_another_mount_namespace(lb: Lab, search: str, tmp_path: Path) -> None:
    """Pinned only by a bind mount in a mount namespace of its own (a runtime's), by a process the daemon may
    not read: the file handle opens it; the /proc search sees the mount in that process's mountinfo but cannot
    open it there, and never takes the namespace for gone (code 11)."""
    ctr = lb.container()
    rec = recorded(f"/var/run/netns/{ctr}")
    pin = tmp_path / "private-pin"
    pin.touch()
    script = f"mount --bind /var/run/netns/{ctr} {pin} && echo in && exec cat"
    runtime = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert runtime.stdout is not None and runtime.stdout.readline() == b"in\n"
        ip("netns", "del", ctr)
        got = find(search, rec)
        if search == "handle":
            assert got.get("found") == list(rec[:2]) and got["cookie"] == rec[2], got
        else:
            assert got.get("code") == 11 and f"/proc/{runtime.pid}/root" in got["msg"], got
    finally:
        runtime.kill()
        runtime.wait()
    assert find(search, rec) == {"ptrace": False, "found": None}  # its mount namespace gone, so is it


@pytest.mark.parametrize("dumpable", [True, False], ids=["dumpable", "not-dumpable"])
def test_a_namespace_held_only_by_a_process_is_found_or_never_taken_for_gone(
    lb: Lab, search: str, holders: list[Holder], dumpable: bool
) -> None:
    """Held only by a process the daemon may not read (every capability; not dumpable, too): the kernel's file
    handles find it. The /proc search cannot read the process's namespace; it holds an interface, so it may be
    the container's: code 11, never gone."""
    ctr = lb.container()
    ip("link", "add", "eth0", "type", "veth", "peer", "name", "eth1", netns=ctr)
    rec = recorded(f"/var/run/netns/{ctr}")
    holders.append(Holder(f"/var/run/netns/{ctr}", dumpable))
    ip("netns", "del", ctr)
    got = find(search, rec, holders[0].p.pid)
    if search == "handle":
        assert got.get("found") == list(rec[:2]) and got["cookie"] == rec[2], got
    else:
        assert got.get("code") == 11 and "cannot tell whether" in got["msg"], got
    holders.pop().end()
    assert find(search, rec) == {"ptrace": False, "found": None}  # now it is gone


def test_an_unreadable_process_in_a_namespace_of_lo_alone_is_no_holder(
    lb: Lab, search: str, holders: list[Holder]
) -> None:
    """A process the daemon may not read, in a namespace with no interface but lo (a service's private one):
    nothing of an attachment can be there; the /proc search does not wait for it."""
    ctr = lb.container()
    rec = recorded(f"/var/run/netns/{ctr}")
    holders.append(Holder(f"/var/run/netns/{ctr}", dumpable=False))
    ip("netns", "del", ctr)
    got = find(search, rec, holders[0].p.pid)
    if search == "handle":
        assert got.get("found") == list(rec[:2]), got
    else:
        assert got == {"ptrace": False, "found": None}, got


def test_a_gone_namespace_is_gone_though_processes_of_other_pinned_ones_cannot_be_read(
    lb: Lab, search: str, holders: list[Holder]
) -> None:
    """The recorded namespace is gone; other containers' processes, which the daemon may not read, run in
    namespaces pinned in /run/netns (with interfaces): they are known not to be it, and the answer is gone."""
    gone, other = lb.container(), lb.container()
    rec = recorded(f"/var/run/netns/{gone}")
    ip("netns", "del", gone)
    ip("link", "add", "eth0", "type", "veth", "peer", "name", "eth1", netns=other)
    holders.append(Holder(f"/var/run/netns/{other}", dumpable=False))
    zombie = subprocess.Popen(["true"])  # an exiting process (its mountinfo: EINVAL) holds nothing either
    os.waitid(os.P_PID, zombie.pid, os.WEXITED | os.WNOWAIT)
    try:
        assert find(search, rec, holders[0].p.pid, zombie.pid) == {"ptrace": False, "found": None}
    finally:
        zombie.wait()


def test_the_hosts_namespace_is_known_without_cap_sys_ptrace() -> None:
    """PID 1's and kthreadd's namespaces cannot be opened without CAP_SYS_PTRACE; a daemon in the host's
    namespace (as netcomp.service is) knows it is there from their /proc entries, and refuses no ADD for it."""
    got = without_ptrace("host")
    assert got["unsure"] == "", got
    own = os.stat("/proc/self/ns/net")
    assert [own.st_dev, own.st_ino] in got["host"]


def test_a_namespace_mounted_while_the_search_ran_is_never_a_known_one(lb: Lab) -> None:
    """The /proc search learns the namespaces pinned in its mount namespace (to tell them from the one looked
    for) only after it looked for that one among them: one mounted in between is the one looked for, found,
    and never counted among those it is not."""
    ctr = lb.container()
    rec = recorded(f"/var/run/netns/{ctr}")
    known: set[int] = set()
    fd = nsutil._pinned(rec[:2], rec[2], known)
    assert fd is not None
    try:
        assert (os.fstat(fd).st_dev, os.fstat(fd).st_ino) == rec[:2]
    finally:
        os.close(fd)
    assert nsutil._proc_ino_of(f"/var/run/netns/{ctr}") not in known


OPEN_CHILD = r"""
import json, sys
from netcomp.errors import DelegateError
from netcomp.host.nsenter import open_netns
try:
    open_netns(sys.argv[1])
except DelegateError as e:
    print(json.dumps({"code": e.code, "msg": e.msg}))
else:
    print(json.dumps({"opened": True}))
"""


def test_a_process_namespace_it_may_not_open_is_refused_naming_the_remedy(lb: Lab, holders: list[Holder]) -> None:
    """A CNI_NETNS of /proc/<pid>/ns/net (nerdctl, cri-dockerd) of a process with capabilities the daemon lacks:
    without CAP_SYS_PTRACE the kernel refuses it, and the ADD's error says why and what to do, not only
    'Permission denied'."""
    ctr = lb.container()
    holders.append(Holder(f"/var/run/netns/{ctr}", dumpable=True))
    path = f"/proc/{holders[-1].p.pid}/ns/net"
    got = child(OPEN_CHILD, path)
    assert got.get("code") == 4, got
    assert got["msg"].startswith(f"cannot open network namespace {path}: Permission denied"), got
    assert "CAP_SYS_PTRACE" in got["msg"] and "drop-in" in got["msg"], got
