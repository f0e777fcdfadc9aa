"""The daemon as a process of its own, for tests that kill it: `netcomp daemon` run inside a lab's "host" netns
(so the delegates it runs, the links they make and the host links it makes stay there), serving a listening
socket this harness holds and passes on start as systemd's socket unit does (LISTEN_FDS), so that a shim calling
while the daemon is dead or restarting waits in the backlog, as on a node. The real shim is exec'd as a runtime
would. Everything is removed on exit, even on failure: the daemon, the delegates it left, the lab's netns."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.lab.checkout import NETCOMP
from tests.lab.daemonlab import PYTHON, run_shim, write_networks
from tests.lab.kubeapi import NODE_TOKEN, ApiServer, reachable_from
from tests.lab.netlab import IP, PLUGIN_DIR, Lab, ip, lab
from tests.lab.sdnotify import wait_ready

# Puts the listening socket (passed as fd N) on fd 3 with LISTEN_PID set to its own pid, then execs the daemon
# through `ip netns exec` (which execs without forking: the pid stays the one LISTEN_PID names).
_ACTIVATE = (
    "import os, sys\n"
    "fd = int(sys.argv[1])\n"
    "if fd != 3:\n"
    "    os.dup2(fd, 3)\n"
    "    os.close(fd)\n"
    "os.environ.update(LISTEN_FDS='1', LISTEN_PID=str(os.getpid()))\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


@dataclass
class ProcNode:
    lab: Lab
    base: Path
    config: Path
    settings: dict[str, Any]
    listener: socket.socket
    notify: socket.socket
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    starts: int = 0
    # A command the daemon is exec'd through (prlimit, setpriv): it must exec, keeping the pid.
    wrap: list[str] = field(default_factory=list)
    # Run between `ip netns exec` and the daemon (it must exec what follows it): a step in the daemon's own mount
    # namespace, which its delegates inherit.
    inner: list[str] = field(default_factory=list)

    @property
    def sock(self) -> str:
        return str(self.settings["socket"])

    @property
    def cache_dir(self) -> Path:
        return Path(self.settings["cacheDir"])

    def start(self, *, wait: bool = True, **env: str) -> None:
        """Start the daemon (it may be killed and started again any number of times) and, with `wait`, return
        once it has said READY=1 on its notify socket; `env`: extra environment (NETCOMP_CRASH_AT)."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self._drain_notify()
        self.starts += 1
        self.log = self.base / f"daemon-{self.starts}.log"
        argv = [
            *self.wrap,
            PYTHON,
            "-c",
            _ACTIVATE,
            str(self.listener.fileno()),
            IP,
            "netns",
            "exec",
            self.lab.host,
            *self.inner,
            NETCOMP,
            "daemon",
            "--config",
            str(self.config),
            "--state",
            str(self.base / "state.json"),
        ]
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                argv,
                env={**os.environ, **self.env, **env, "NOTIFY_SOCKET": self.notify.getsockname()},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                pass_fds=(self.listener.fileno(),),
            )
        if wait:
            self.wait_ready()

    def wait_ready(self, timeout: float = 60) -> None:
        assert self.proc is not None
        wait_ready(self.notify, self.proc, timeout, self.logs)

    def kill(self) -> None:
        """SIGKILL, as the OOM killer or a watchdog would; its delegates live on (their own process groups)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def _drain_notify(self) -> None:
        self.notify.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            while True:  # what was said before
                self.notify.recv(65536)

    def reload(self) -> None:
        """SIGHUP, then the READY=1 that follows the reload."""
        assert self.proc is not None
        self._drain_notify()
        self.proc.send_signal(signal.SIGHUP)
        self.wait_ready()

    def restart(self, *, wait: bool = True, **env: str) -> None:
        self.kill()
        self.start(wait=wait, **env)

    def logs(self) -> str:
        return "".join(p.read_text(errors="replace") for p in sorted(self.base.glob("daemon-*.log")))

    def shim(
        self,
        command: str,
        container: str,
        *,
        args: str = "",
        ifname: str = "eth0",
        netns: str | None = None,
        ready_timeout: float = 30,
        timeout: float = 180,
        shim: list[str] | None = None,
    ) -> tuple[int, Any]:
        conf = {"socket": self.sock, "readyTimeout": ready_timeout}
        return run_shim(conf, command, container, ifname=ifname, args=args, netns=netns, timeout=timeout, shim=shim)

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [NETCOMP, *args, "--config", str(self.config), "--state", str(self.base / "state.json")],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    # ------------------------------------------------------------------------------------------- leftovers

    def leases(self) -> list[str]:
        d = self.base / "ipam"
        return sorted(
            str(p.relative_to(d))
            for p in d.rglob("*")
            if p.is_file() and not p.name.startswith(("last_reserved", "lock"))
        )

    def cache_files(self) -> list[str]:
        return sorted(p.name for p in self.cache_dir.glob("*.json")) if self.cache_dir.exists() else []

    def owned_host_links(self) -> list[str]:
        out = ip("-d", "-o", "link", "show", netns=self.lab.host)
        return sorted(line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if "netcomp:owned" in line)

    def write_config(self, **changes: Any) -> None:
        self.settings.update(changes)
        self.config.write_text(yaml.safe_dump(self.settings))


@contextlib.contextmanager
def proc_node(
    base: Path,
    *,
    extra: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    setup: Callable[[Path, Lab], object] | None = None,
    wrap: list[str] | None = None,
    inner: list[str] | None = None,
) -> Iterator[ProcNode]:
    """A lab, the networks of daemonlab.write_networks (and what `setup` adds), and a daemon process serving
    them (started); `wrap` and `inner`: ProcNode's."""
    with lab() as lb:
        write_networks(base, lb.master)
        if setup is not None:
            setup(base, lb)
        settings: dict[str, Any] = {
            "intentDirs": [str(base / "networks.d")],
            "outputDir": str(base / "out"),
            "staticDirs": [str(base / "static.d")],
            "pluginDirs": [PLUGIN_DIR],
            "defaultNetwork": "mgmt",
            "socket": str(base / "run" / "netcomp.sock"),
            "cacheDir": str(base / "cache"),
            "runtimeConfDir": str(base / "net.d"),
            "templateDir": str(base / "templates"),
            **(extra or {}),
        }
        config = base / "netcomp.yaml"
        config.write_text(yaml.safe_dump(settings))
        (base / "run").mkdir(mode=0o700, exist_ok=True)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(settings["socket"])
        os.chmod(settings["socket"], 0o600)
        listener.listen(4096)
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        notify.bind(str(base / "notify.sock"))
        node = ProcNode(
            lb,
            base,
            config,
            settings,
            listener,
            notify,
            dict(env or {}),
            wrap=list(wrap or []),
            inner=list(inner or []),
        )
        try:
            node.start()
            yield node
        finally:
            node.stop()
            node.kill()
            listener.close()
            notify.close()
            _kill_leftover_delegates(node)
            shutil.rmtree(base / "run", ignore_errors=True)


@contextlib.contextmanager
def kube_proc_node(
    api: ApiServer,
    base: Path,
    node_name: str,
    *,
    extra: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    setup: Callable[[Path, Lab], object] | None = None,
) -> Iterator[ProcNode]:
    """proc_node following `api` as the node `node_name`, with the node's token (the packaged ClusterRole's
    rights). The daemon runs in its lab's netns, so it reaches the API server through a forwarder made there,
    which outlives the daemon."""
    with contextlib.ExitStack() as stack:

        def kube_setup(base: Path, lb: Lab) -> None:
            fwd = stack.enter_context(reachable_from(lb.host, int(api.url.rsplit(":", 1)[1])))
            api.kubeconfig(base / "lab.kubeconfig", NODE_TOKEN, server=f"https://127.0.0.1:{fwd}")
            if setup is not None:
                setup(base, lb)

        settings = {
            "kubernetes": {"kubeconfig": str(base / "lab.kubeconfig"), "timeout": 10},
            "clusterIntentDir": str(base / "cluster.d"),
            "nodeName": node_name,
            **(extra or {}),
        }
        yield stack.enter_context(proc_node(base, extra=settings, env=env, setup=kube_setup))


def _kill_leftover_delegates(node: ProcNode) -> None:
    """Whatever delegate a killed daemon left is killed with the lab (the daemon's own start-up sweep does the
    same; this is for a test that fails before a restart)."""
    from netcomp.cni.invoke import kill_marked
    from netcomp.daemon.wiring import marker as _marker

    kill_marked(_marker(str(node.cache_dir)))
