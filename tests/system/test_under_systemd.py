"""The installed package under a real systemd (systemd-nspawn), on Debian 12 and Debian 13: `systemctl start
netcomp` reaches active with all the unit's hardening, a container namespace is attached through the installed
shim by the real plugins (interface and address checked in the namespace), `systemctl reload` picks up an intent
edit, a `kill -9` of the daemon is restarted by systemd and DEL of the earlier attachment still works from the
cache and leaves nothing (no interface, no host-local lease, no cache entry), and `systemctl stop` is clean.

Debian 12 is this machine: the package is installed here (purged afterwards) and the container boots this
machine's /usr. Debian 13 is the root scripts/trixie-root.sh makes, booted on a throw-away overlay: the package is
installed in the container with apt, where its maintainer scripts start the units under that systemd."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.lab.debpackage import NSBRIDGE, Dist, installed_machine
from tests.lab.intents import intent
from tests.lab.nspawn import Machine
from tests.lab.poll import until

pytestmark = pytest.mark.root

SHIMCONF = json.dumps({"cniVersion": "1.0.0", "name": "netcomp", "type": "netcomp"}).encode()


def shim(m: Machine, command: str, ctr: str, args: str = "") -> tuple[int, dict[str, Any] | None]:
    env = {
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": ctr,
        "CNI_NETNS": f"/run/netns/{ctr}",
        "CNI_IFNAME": "eth0",
        "CNI_ARGS": args,
        "CNI_PATH": "/usr/lib/cni",
    }
    p = m.run("/usr/lib/cni/netcomp", input=SHIMCONF, env=env, check=False)
    out = p.stdout.decode().strip()
    return p.returncode, json.loads(out) if out else None


def links(m: Machine, ns: str) -> list[str]:
    return sorted(line.split()[0].split("@")[0] for line in m.text("ip", "-n", ns, "-br", "link").splitlines())


def leftovers(m: Machine) -> list[str]:
    """What an attachment leaves on the node: host-local leases (files named by address) and cache entries."""
    found = m.text("find", "/var/lib/cni/networks", "/var/lib/netcomp/cache", "-type", "f")
    return [f for f in found.splitlines() if not f.rsplit("/", 1)[-1].startswith(("last_reserved_ip", "lock"))]


def test_service_under_real_systemd(dist: Dist, request: pytest.FixtureRequest) -> None:
    with installed_machine(dist, request) as m:
        m.put("/etc/netcomp/netcomp.yaml", "defaultNetwork: mgmt\n")
        m.put("/etc/netcomp/static.d/nsbridge.conflist", json.dumps(NSBRIDGE))
        m.put("/etc/netcomp/networks.d/mgmt.yaml", intent("mgmt", "{type: static, networkID: nsbridge}"))
        m.put(
            "/etc/netcomp/networks.d/storage.yaml",
            intent(
                "storage",
                "{type: macvlan, hostDevice: m0, interfacePrefix: stor, ipam: {type: host-local, "
                "subnet: 10.202.0.0/24}}",
            ),
        )
        m.run("systemctl", "start", "netcomp.socket", "netcomp.service")  # returns once READY=1 (Type=notify)
        assert m.show("netcomp.service", "ActiveState") == "active"
        assert m.show("netcomp.service", "Type") == "notify"
        assert "networks" in m.show("netcomp.service", "StatusText")

        m.run("ip", "link", "add", "m0", "type", "veth", "peer", "name", "m0p")
        m.run("ip", "link", "set", "m0", "up")
        m.run("ip", "link", "set", "m0p", "up")
        m.run("ip", "netns", "add", "ctr1")
        rc, res = shim(m, "ADD", "ctr1", "NETCOMP_NETWORKS=storage")
        assert rc == 0, res
        assert links(m, "ctr1") == ["eth0", "lo", "stor0"]
        assert res is not None and res["ips"][0]["address"] == "10.201.0.2/24"
        assert "10.201.0.2/24" in m.text("ip", "-n", "ctr1", "-br", "addr", "show", "eth0")
        assert "10.202.0.2/24" in m.text("ip", "-n", "ctr1", "-br", "addr", "show", "stor0")
        assert len(leftovers(m)) == 3  # two leases and the cache entry

        # An intent edit, then `systemctl reload`: the new network is served.
        m.put(
            "/etc/netcomp/networks.d/backup.yaml",
            intent("backup", "{type: macvlan, hostDevice: m0, ipam: {type: host-local, subnet: 10.203.0.0/24}}"),
        )
        m.run("systemctl", "reload", "netcomp")
        status = json.loads(m.text("netcomp", "status", "-o", "json"))
        assert {n["name"] for n in status["networks"]} == {"mgmt", "storage", "backup"}

        # kill -9: systemd restarts it (Restart=on-failure) and DEL still works, from the cache.
        pid = m.show("netcomp.service", "MainPID")
        m.run("kill", "-9", pid)
        until(
            lambda: (
                m.show("netcomp.service", "NRestarts") == "1"
                and m.show("netcomp.service", "ActiveState") == "active"
                and m.show("netcomp.service", "MainPID") not in ("0", pid)
            ),
            "timed out waiting for systemd to restart netcomp",
        )
        rc, res = shim(m, "DEL", "ctr1")
        assert rc == 0, res
        assert links(m, "ctr1") == ["lo"]
        assert leftovers(m) == []

        m.run("systemctl", "stop", "netcomp.service")
        assert m.show("netcomp.service", "ActiveState") == "inactive"
        assert m.show("netcomp.service", "Result") == "success"
        journal = m.text("journalctl", "-u", "netcomp", "--no-pager", "-o", "cat")
        assert "CNI ADD container=ctr1 networks=mgmt,storage ok" in journal
        assert "Traceback" not in journal
