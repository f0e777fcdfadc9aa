"""A daemon serving a test's own netns lab: real plugins (run inside the lab's host netns through the Exec seam),
real shim (exec'd as the runtime would: /usr/bin/python3 -I -S), real socket, temp dirs for everything; with
`kubernetes:` configured, one following a cluster (kube_lab)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from netcomp.daemon.daemon import Daemon
from netcomp.settings import KubeSettings, Settings
from tests.lab.checkout import PACKAGE
from tests.lab.intents import intent
from tests.lab.netlab import PLUGIN_DIR, Lab, lab

SHIM = PACKAGE / "shim" / "plugin.py"
PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable


def run_shim(
    conf: dict[str, Any],
    command: str,
    container: str,
    *,
    ifname: str = "eth0",
    args: str = "",
    netns: str | None = None,
    timeout: float = 120,
    shim: list[str] | None = None,
) -> tuple[int, Any]:
    """Exec the shim as a runtime would (the Python one unless `shim` says another): the CNI environment for
    `container` (its netns /var/run/netns/<container>), `conf` on stdin (name and type added). (exit code, the
    JSON it printed or None)."""
    env = {
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": f"ctr-{container}",
        "CNI_IFNAME": ifname,
        "CNI_NETNS": netns if netns is not None else f"/var/run/netns/{container}",
        "CNI_ARGS": args,
        "CNI_PATH": PLUGIN_DIR,
    }
    p = subprocess.run(
        shim or [PYTHON, "-I", "-S", str(SHIM)],
        input=json.dumps({"cniVersion": "1.0.0", "name": "netcomp", "type": "netcomp", **conf}).encode(),
        env=env,
        capture_output=True,
        timeout=timeout,
        check=False,
    )
    out = p.stdout.decode()
    return p.returncode, json.loads(out) if out.strip() else None


@dataclass
class DaemonLab:
    lab: Lab
    base: Path
    settings: Settings
    daemon: Daemon

    @property
    def sock(self) -> str:
        return self.settings.socket

    def shim(
        self,
        command: str,
        container: str,
        ifname: str = "eth0",
        args: str = "",
        version: str = "1.0.0",
        netns: str | None = None,
        extra: dict[str, Any] | None = None,
        ready_timeout: float = 2,
    ) -> tuple[int, Any]:
        conf = {"cniVersion": version, "socket": self.sock, "readyTimeout": ready_timeout, **(extra or {})}
        return run_shim(conf, command, container, ifname=ifname, args=args, netns=netns, timeout=120)

    def settled(self, timeout: float = 30) -> None:
        """Until no request is in flight: a request's log line is written after its answer is out (api.cni), and
        before it leaves flight."""
        server = self.daemon.server
        assert server is not None and server.wait_for(lambda: server.in_flight == 0, timeout)

    def leases(self) -> list[str]:
        return sorted(
            str(p.relative_to(self.base / "ipam"))
            for p in (self.base / "ipam").rglob("*")
            if p.is_file() and not p.name.startswith(("last_reserved", "lock"))
        )

    def cache_files(self) -> list[str]:
        d = Path(self.settings.cacheDir)
        return sorted(p.name for p in d.glob("*.json")) if d.exists() else []

    def restart(self, *, follow: bool = False) -> None:
        """A new daemon on the same dirs; `follow`: it follows the cluster and watches the intent dirs as the
        first one did (otherwise it serves what it compiles and records alone)."""
        watched = self.daemon.watcher is not None
        self.daemon.stop(drain=5)
        self.daemon = Daemon(
            lambda: self.settings,
            exec_=self.lab.exec_in_host,
            link_netns=self.lab.host,
            state_path=self.base / "state.json",
        )
        if follow:
            self.daemon.start_cluster()
        self.daemon.reload()
        self.daemon.start()
        if follow and watched:
            self.daemon.watch()


def write_networks(base: Path, master: str) -> None:
    nets = base / "networks.d"
    static = base / "static.d"
    nets.mkdir(parents=True, exist_ok=True)
    static.mkdir(parents=True, exist_ok=True)
    (static / "lab-bridge.conflist").write_text(
        json.dumps(
            {
                "cniVersion": "1.0.0",
                "name": "lab-bridge",
                "plugins": [
                    {
                        "type": "bridge",
                        "bridge": "ncbr0",
                        "isGateway": True,
                        "ipam": {
                            "type": "host-local",
                            "dataDir": f"{base}/ipam",
                            "subnet": "10.77.0.0/24",
                            "routes": [{"dst": "10.78.0.0/16", "gw": "10.77.0.1"}],
                        },
                    }
                ],
            }
        )
    )
    (nets / "10-mgmt.yaml").write_text(intent("mgmt", "{type: static, networkID: lab-bridge}"))
    (nets / "20-storage.yaml").write_text(
        intent(
            "storage",
            f"{{type: macvlan, hostDevice: {master}, interfacePrefix: stor, ipam: {{type: host-local, "
            f"dataDir: {base}/ipam, subnet: 10.79.0.0/24, rangeStart: 10.79.0.10}}}}",
        )
    )
    (nets / "30-backup.yaml").write_text(
        intent(
            "backup",
            f"{{type: macvlan, hostDevice: {master}, interfacePrefix: stor, mode: private, ipam: "
            f"{{type: host-local, dataDir: {base}/ipam, subnet: 10.80.0.0/24}}}}",
        )
    )
    (nets / "40-broken.yaml").write_text(
        intent(
            "nowhere",
            f"{{type: macvlan, hostDevice: nosuchdev0, ipam: {{type: host-local, dataDir: {base}/ipam, "
            f"subnet: 10.81.0.0/24}}}}",
        )
    )
    (nets / "50-signal.yaml").write_text(
        intent(
            "signal",
            f"{{type: ipvlan, hostDevice: {master}, mode: l2, ipam: {{type: host-local, dataDir: "
            f"{base}/ipam, subnet: 10.82.0.0/24}}}}",
        )
    )
    tunnel = (
        f"{{type: macvlan, hostDevice: {master}, vxlan: {{vni: 4242, group: 239.1.1.42}}, interfacePrefix: tun, "
        f"ipam: {{type: host-local, dataDir: {base}/ipam, subnet: 10.83.0.0/24}}}}"
    )
    (nets / "60-tunnel.yaml").write_text(intent("tunnel", tunnel))
    tagged = (
        f"{{type: macvlan, hostDevice: {master}, vlan: 120, ipam: {{type: host-local, dataDir: {base}/ipam, "
        f"subnet: 10.84.0.0/24}}}}"
    )
    (nets / "70-tagged.yaml").write_text(intent("tagged", tagged))


@contextlib.contextmanager
def daemon_lab(
    base: Path, socket_path: str | None = None, *, extra: dict[str, Any] | None = None, watch: bool = False
) -> Iterator[DaemonLab]:
    """`extra`: more settings (kubernetes, ...); `watch`: follow the intent dirs with inotify as a node does."""
    with lab() as lb:
        write_networks(base, lb.master)
        settings = Settings(
            **{
                "intentDirs": [str(base / "networks.d")],
                "outputDir": str(base / "out"),
                "staticDirs": [str(base / "static.d")],
                "pluginDirs": [PLUGIN_DIR],
                "defaultNetwork": "mgmt",
                "socket": socket_path or str(base / "run" / "netcomp.sock"),
                "cacheDir": str(base / "cache"),
                "runtimeConfDir": str(base / "net.d"),
                "writeRuntimeConfig": True,
                "templateDir": str(base / "templates"),
                **(extra or {}),
            }
        )
        d = Daemon(lambda: settings, exec_=lb.exec_in_host, link_netns=lb.host, state_path=base / "state.json")
        d.start_cluster()
        d.reload()
        d.start()
        if watch:
            d.watch()
        dl = DaemonLab(lb, base, settings, d)
        try:
            yield dl
        finally:
            dl.daemon.stop(drain=5)


def kube_lab(
    base: Path, kubeconfig: Path, timeout: float = 10, settings: dict[str, Any] | None = None, **kube_settings: Any
) -> contextlib.AbstractContextManager[DaemonLab]:
    """A daemon lab following the cluster; `settings`: more of netcomp.yaml's, `kube_settings`: of kubernetes:."""
    kube = KubeSettings(kubeconfig=str(kubeconfig), timeout=timeout, **kube_settings)
    extra = {"kubernetes": kube, "clusterIntentDir": str(base / "cluster.d"), **(settings or {})}
    return daemon_lab(base, extra=extra, watch=True)


def wait_for(dl: DaemonLab, cond: Callable[[], bool], what: str, timeout: float = 60) -> None:
    """Until cond holds after a compile (the daemon notifies every one), or fail saying what did not happen."""
    with dl.daemon.reloaded:
        assert dl.daemon.reloaded.wait_for(cond, timeout), f"not within {timeout}s: {what}"
