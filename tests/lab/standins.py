"""Stand-ins for what netcomp meets on a node, for tests that run no real plugin: executable plugin files (the
compiler only checks that a plugin file exists and is executable) and a network namespace any user can open."""

from __future__ import annotations

import stat
from pathlib import Path

KNOWN_PLUGINS = ("macvlan", "ipvlan", "sriov", "bridge", "host-local", "static", "dhcp", "whereabouts")
# The test process's own network namespace stands in for a container's: a real namespace any user can open, so
# the delegator's checks of it run for real; the plugins of these tests are fakes and attach nothing to it.
OWN_NETNS = "/proc/self/ns/net"


def make_plugin_dir(path: Path, names: tuple[str, ...] = KNOWN_PLUGINS) -> Path:
    """Executable stand-ins for plugins: each exits 1, whatever it is asked."""
    path.mkdir(parents=True, exist_ok=True)
    for n in names:
        p = path / n
        p.write_text("#!/bin/sh\nexit 1\n")
        p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return path
