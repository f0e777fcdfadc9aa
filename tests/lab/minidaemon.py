"""A real daemon, in process, with no network namespace and no root: a temp root with one static network whose
plugin is a stand-in, its socket in a short dir. For what needs the daemon's own answers (`/metrics`, `/status`)
but no attachment: the CLI's manners, the Grafana dashboard's metric names."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from netcomp.daemon.daemon import Daemon
from netcomp.settings import Settings
from tests.lab.standins import make_plugin_dir


@dataclass(frozen=True)
class MiniDaemon:
    daemon: Daemon
    settings: Settings
    config: Path  # a netcomp.yaml naming the daemon's socket, for `netcomp status -c`

    @property
    def sock(self) -> str:
        return self.settings.socket


@contextlib.contextmanager
def mini_daemon(base: Path, sockdir: Path, **extra: Any) -> Iterator[MiniDaemon]:
    """`extra`: more settings (netcomp.yaml's keys)."""
    static = base / "static.d"
    static.mkdir(parents=True)
    (static / "lab.conflist").write_text(
        json.dumps({"cniVersion": "1.0.0", "name": "lab", "plugins": [{"type": "bridge", "bridge": "nclab0"}]})
    )
    nets = base / "networks.d"
    nets.mkdir()
    (nets / "10-lab.yaml").write_text(
        "apiVersion: netcomp.io/v1\nkind: Network\nmetadata: {name: lab}\nspec: {type: static, networkID: lab}\n"
    )
    values = {
        "intentDirs": [str(nets)],
        "outputDir": str(base / "out"),
        "staticDirs": [str(static)],
        "pluginDirs": [str(make_plugin_dir(base / "cni-bin"))],
        "defaultNetwork": "lab",
        "socket": str(sockdir / "netcomp.sock"),
        "cacheDir": str(base / "cache"),
        "ipamDir": str(base / "ipam"),
        "runtimeConfDir": str(base / "net.d"),
        "templateDir": str(base / "templates"),
        "allowedUids": [os.getuid()],
        **extra,
    }
    config = base / "netcomp.yaml"
    config.write_text(json.dumps(values))  # JSON is YAML
    settings = Settings(**values)  # type: ignore[arg-type]
    daemon = Daemon(lambda: settings, state_path=base / "state.json")
    daemon.reload()
    daemon.start()
    try:
        yield MiniDaemon(daemon, settings, config)
    finally:
        daemon.stop(drain=5)
