"""Hardening, on the real daemon and plugins: addresses that are no unicast never handed out, the host's
namespace known (or every ADD refused), refusals of peers logged once a minute with who they were, log lines of
bounded length, `netcomp status` as a user, a plugin's child that outlives it killed, a plugin binary being
replaced waited for."""

from __future__ import annotations

import base64
import ipaddress
import json
import logging
import os
import select
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.lab.daemonlab import DaemonLab, daemon_lab
from tests.lab.intents import intent
from tests.lab.poll import until
from tests.lab.procdaemon import ProcNode, proc_node
from tests.lab.wire import post, raw

pytestmark = pytest.mark.root


class Lines(logging.Handler):
    """Every record of netcomp's loggers, as the operator would read it."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def lines() -> Iterator[list[str]]:
    h = Lines()
    root = logging.getLogger("netcomp")
    old = root.level
    root.addHandler(h)
    root.setLevel(logging.DEBUG)
    try:
        yield h.lines
    finally:
        root.removeHandler(h)
        root.setLevel(old)


def addresses(dl: DaemonLab, ctr: str) -> list[str]:
    return [a.split("/")[0] for dev in dl.lab.links(ctr) if dev != "lo" for a in dl.lab.addrs(ctr, dev)]


def test_a_pool_hands_out_no_multicast_address(tmp_path: Path) -> None:
    """A cluster pool whose range spans the end of unicast space and the start of multicast (223.255.255.254
    to 224.0.0.1): the two unicast addresses are given, the multicast ones never; the third ADD finds the pool
    full."""
    with daemon_lab(tmp_path, extra={"ipamDir": str(tmp_path / "claims"), "defaultNetwork": None}) as dl:
        spec = (
            f"{{type: macvlan, hostDevice: {dl.lab.master}, ipam: {{type: cluster, subnet: 192.0.0.0/2, "
            "rangeStart: 223.255.255.254, rangeEnd: 224.0.0.1}}"
        )
        (dl.base / "networks.d" / "80-edge.yaml").write_text(intent("edge", spec))
        assert "edge" in dl.daemon.reload().networks
        ctrs = [dl.lab.container() for _ in range(3)]
        got = []
        for ctr in ctrs[:2]:
            rc, res = dl.shim("ADD", ctr, args="NETCOMP_NETWORKS=edge")
            assert rc == 0, res
            got += addresses(dl, ctr)
        assert sorted(got) == ["223.255.255.254", "223.255.255.255"]
        assert all(not ipaddress.ip_address(a).is_multicast for a in got)
        rc, err = dl.shim("ADD", ctrs[2], args="NETCOMP_NETWORKS=edge")
        assert rc == 1 and "no free address" in err["msg"], err
        for ctr in ctrs:
            assert dl.shim("DEL", ctr)[0] == 0
        assert list((tmp_path / "claims").glob("*.claim")) == []


def test_the_hosts_namespace_is_known_though_pid_1s_cannot_be_read(tmp_path: Path) -> None:
    """The daemon runs in a namespace of its own (the lab's host), so its own is not the host's; PID 1's
    namespace cannot be read on this machine, even by root. An ADD into the test's own namespace (the host's) is
    refused as the host's, named through kthreadd's namespace; before, the check let it through, and only the
    interface name `lo` being taken stopped it before any plugin ran."""
    with proc_node(tmp_path) as node:
        rc, err = node.shim("ADD", "host", ifname="lo", netns=f"/proc/{os.getpid()}/ns/net")
        assert rc == 1 and err["code"] == 4 and "is the host's network namespace" in err["msg"], err


def test_every_add_is_refused_while_the_hosts_namespace_cannot_be_read(tmp_path: Path) -> None:
    """Without CAP_SYS_PTRACE neither PID 1's nor kthreadd's namespace can be read here: the daemon cannot tell
    the host's namespace from a container's, and refuses every ADD (code 5) rather than let one through."""
    if _readable_without_ptrace():
        pytest.skip("PID 1's namespace can be read without CAP_SYS_PTRACE here")
    wrap = ["setpriv", "--bounding-set", "-sys_ptrace", "--inh-caps", "-sys_ptrace", "--"]
    with proc_node(tmp_path, wrap=wrap) as node:
        ctr = node.lab.container()
        rc, err = node.shim("ADD", ctr)
        assert rc == 1 and err["code"] == 5 and "cannot tell whether" in err["msg"], err
        assert node.lab.links(ctr) == ["lo"] and node.cache_files() == []
        assert "every ADD is refused" in node.logs()


def _readable_without_ptrace() -> bool:
    wrap = ["setpriv", "--bounding-set", "-sys_ptrace", "--inh-caps", "-sys_ptrace", "--"]
    code = "import os\nfor p in (1, 2):\n    try:\n        os.stat(f'/proc/{p}/ns/net'); print('yes')\n"
    code += "    except OSError: pass"
    p = subprocess.run([*wrap, sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    return "yes" in p.stdout


def test_refusals_of_a_peer_are_logged_once_a_minute_with_its_uid_and_pid(dl: DaemonLab, lines: list[str]) -> None:
    for _ in range(3):
        assert raw(dl.sock, b"POST /cni HTTP/1.1\r\nHost: x\r\n\r\n")[0] == 411
    said = [line for line in lines if line.startswith("refused a request")]
    assert said == [f"refused a request of pid {os.getpid()} (uid 0): 411 a request needs a Content-Length"], said


def test_log_lines_carry_a_peers_values_cut_short(dl: DaemonLab, lines: list[str]) -> None:
    """A 1 MB container ID and network name on /delegate, and on /cni's GC (whose container ID is not checked):
    every line logged is short."""
    huge = "a" * 1_000_000
    body = json.dumps({"command": "ADD", "containerID": huge, "netns": "/var/run/netns/x", "network": "n"})
    assert post(dl.sock, body.encode(), "/delegate")[0] == 400
    body = json.dumps({"command": "DEL", "containerID": "c", "network": huge[:900_000]})
    post(dl.sock, body.encode(), "/delegate")
    conf = base64.b64encode(json.dumps({"cniVersion": "1.1.0", "name": "n", "type": "netcomp"}).encode()).decode()
    env = {"CNI_COMMAND": "GC", "CNI_CONTAINERID": huge[:900_000], "CNI_IFNAME": "eth0"}
    post(dl.sock, json.dumps({"env": env, "config": conf}).encode())
    dl.settled()
    assert lines and max(len(line) for line in lines) < 2000, max(lines, key=len)[:300]


def test_status_as_a_user_says_the_socket_is_root_only(dl: DaemonLab, tmp_path: Path) -> None:
    netcomp = Path(sys.executable).parent / "netcomp"
    cfg_dir = Path(tempfile.mkdtemp(prefix="nc-cfg-", dir="/tmp"))
    try:
        cfg_dir.chmod(0o755)
        (cfg_dir / "netcomp.yaml").write_text(f"socket: {dl.sock}\n")
        (cfg_dir / "netcomp.yaml").chmod(0o644)
        user = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]
        # A checkout nobody can read (a clone under a 0700 directory, as mktemp -d makes) cannot run the command
        # as a user at all: there is nothing to say about the socket then.
        probe = [*user, sys.executable, "-c", f"import netcomp; open({str(netcomp)!r}).close()"]
        if subprocess.run(probe, capture_output=True, timeout=60).returncode != 0:
            pytest.skip(f"nobody cannot run {netcomp} from this checkout")
        for command in (["status"], ["explain", "--container", "c1"]):  # every command that asks the daemon
            argv = [*user, str(netcomp), *command, "--config", str(cfg_dir / "netcomp.yaml")]
            argv += ["--state", str(cfg_dir / "state.json")]
            p = subprocess.run(argv, capture_output=True, text=True, timeout=60)
            if p.returncode == 126:
                pytest.skip(f"nobody cannot run {netcomp}")
            assert p.returncode == 77 and "is root-only" in p.stderr, (command, p.returncode, p.stderr)
            assert "not answering" not in p.stderr
    finally:
        shutil.rmtree(cfg_dir, ignore_errors=True)


# ------------------------------------------------------------------------------------------- plugin processes


def _plugin_dir(base: Path) -> Path:
    d = base / "plugins"
    d.mkdir(exist_ok=True)
    return d


def _static_network(base: Path, name: str, ptype: str, subnet: str) -> None:
    conf = {
        "cniVersion": "1.0.0",
        "name": name,
        "plugins": [
            {
                "type": ptype,
                "bridge": f"br-{name}"[:15],
                "ipam": {"type": "host-local", "dataDir": f"{base}/ipam", "subnet": subnet},
            }
        ],
    }
    (base / "static.d" / f"{name}.conflist").write_text(json.dumps(conf))
    (base / "networks.d" / f"80-{name}.yaml").write_text(intent(name, f"{{type: static, networkID: {name}}}"))


def _gone(pid: int) -> bool:
    """Whether the process has ended (waited for on its pidfd; the deadline only ends a test that failed)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], 30)[0])
    finally:
        os.close(fd)


def test_a_plugins_child_that_keeps_its_output_is_killed_when_it_exits(tmp_path: Path) -> None:
    """A plugin that starts a child in a session of its own (setsid), which keeps its stdout and stderr, then
    execs the real bridge plugin: the ADD is answered once the plugin exits, and the child is killed. Before, the
    daemon waited for the pipes to close until pluginTimeout, answered "timed out", and left the child running
    (its process group's kill does not reach another session)."""
    pidfile = tmp_path / "child.pid"

    def setup(base: Path, _: Any) -> None:
        plugin = _plugin_dir(base) / "holdout"
        plugin.write_text(
            "#!/bin/sh\n"
            'if [ "$CNI_COMMAND" = ADD ]; then\n'
            f"  setsid sleep 600 &\n  echo $! > {pidfile}\n"
            "fi\nexec /usr/lib/cni/bridge\n"
        )
        plugin.chmod(0o755)
        _static_network(base, "held", "holdout", "10.74.0.0/24")

    extra = {"pluginDirs": [str(tmp_path / "plugins"), "/usr/lib/cni"], "pluginTimeout": 20}
    with proc_node(tmp_path, extra=extra, setup=setup) as node:
        ctr = node.lab.container()
        rc, res = node.shim("ADD", ctr, args="NETCOMP_NETWORKS=held")
        child = int(pidfile.read_text())
        try:
            assert rc == 0, res
            assert _gone(child)
            assert "exited leaving 1 processes that hold its output" in node.logs()
            assert node.shim("DEL", ctr)[0] == 0
            assert node.leases() == [] and node.cache_files() == []
        finally:
            if not _gone(child):
                os.kill(child, 9)


def test_a_plugin_binary_being_replaced_is_waited_for(tmp_path: Path) -> None:
    """The bridge plugin's binary is open for writing (a package upgrade replacing it) when an ADD execs it:
    exec fails with ETXTBSY, and the daemon tries again a second later, as libcni does; once the writer is done
    the ADD succeeds. Before, the ADD failed at once."""

    def setup(base: Path, _: Any) -> None:
        shutil.copy2("/usr/lib/cni/bridge", _plugin_dir(base) / "bridge")

    extra = {"pluginDirs": [str(tmp_path / "plugins"), "/usr/lib/cni"]}
    with proc_node(tmp_path, extra=extra, setup=setup) as node:
        ctr = node.lab.container()
        writer = os.open(tmp_path / "plugins" / "bridge", os.O_WRONLY)
        result: dict[str, Any] = {}
        add = threading.Thread(target=lambda: result.update(out=node.shim("ADD", ctr)))
        add.start()
        try:
            _wait_for(node, "is being replaced (text file busy)")
        finally:
            os.close(writer)
        add.join(120)
        rc, res = result["out"]
        assert rc == 0, res
        assert node.shim("DEL", ctr)[0] == 0
        assert node.leases() == [] and node.cache_files() == []


def _wait_for(node: ProcNode, words: str) -> None:
    """Until the daemon's log says `words`: a poll of another process's output, bounded."""
    until(lambda: words in node.logs(), lambda: f"the daemon never said {words!r}:\n{node.logs()[-3000:]}", 30, 0.05)
