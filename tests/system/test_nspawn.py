"""The installed package under a real systemd (systemd-nspawn): `systemctl start netcomp` reaches active with all
the unit's hardening, a container namespace is attached through the installed shim by the real plugins,
`systemctl reload` picks up an intent edit, a `kill -9` of the daemon is restarted by systemd and DEL of the
earlier attachment still works from the cache, and `systemctl stop` is clean."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.system.nspawn import Machine, machine

pytestmark = pytest.mark.root

INTENT = "apiVersion: netcomp.io/v1\nkind: Network\nmetadata: {{name: {name}}}\nspec: {spec}\n"
SHIMCONF = json.dumps({"cniVersion": "1.0.0", "name": "netcomp", "type": "netcomp"}).encode()


def shim(m: Machine, command: str, ctr: str, args: str = "") -> tuple[int, dict | None]:
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


def test_service_under_real_systemd(installed: None, tmp_path: Path) -> None:
    etc = tmp_path / "etc-netcomp"
    (etc / "networks.d").mkdir(parents=True)
    (etc / "static.d").mkdir()
    (etc / "netcomp.yaml").write_text("defaultNetwork: mgmt\n")
    (etc / "static.d" / "nsbridge.conflist").write_text(
        json.dumps(
            {
                "cniVersion": "1.0.0",
                "name": "nsbridge",
                "plugins": [
                    {
                        "type": "bridge",
                        "bridge": "ncns0",
                        "isGateway": True,
                        "ipam": {"type": "host-local", "subnet": "10.201.0.0/24"},
                    }
                ],
            }
        )
    )
    (etc / "networks.d" / "mgmt.yaml").write_text(
        INTENT.format(name="mgmt", spec="{type: static, networkID: nsbridge}")
    )
    (etc / "networks.d" / "storage.yaml").write_text(
        INTENT.format(
            name="storage",
            spec="{type: macvlan, hostDevice: m0, interfacePrefix: stor, ipam: {type: host-local, "
            "subnet: 10.202.0.0/24}}",
        )
    )
    with machine("ncsys", binds=[(str(etc), "/etc/netcomp", True)]) as m:
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

        # An intent edit, then `systemctl reload`: the new network is served.
        (etc / "networks.d" / "backup.yaml").write_text(
            INTENT.format(
                name="backup", spec="{type: macvlan, hostDevice: m0, ipam: {type: host-local, subnet: 10.203.0.0/24}}"
            )
        )
        m.run("systemctl", "reload", "netcomp")
        status = json.loads(m.text("netcomp", "status", "-o", "json"))
        assert {n["name"] for n in status["networks"]} == {"mgmt", "storage", "backup"}

        # kill -9: systemd restarts it (Restart=on-failure) and DEL still works, from the cache.
        pid = m.show("netcomp.service", "MainPID")
        m.run("kill", "-9", pid)
        m.until(
            "systemd to restart netcomp",
            lambda: (
                m.show("netcomp.service", "NRestarts") == "1"
                and m.show("netcomp.service", "ActiveState") == "active"
                and m.show("netcomp.service", "MainPID") not in ("0", pid)
            ),
        )
        rc, res = shim(m, "DEL", "ctr1")
        assert rc == 0, res
        assert links(m, "ctr1") == ["lo"]

        m.run("systemctl", "stop", "netcomp.service")
        assert m.show("netcomp.service", "ActiveState") == "inactive"
        assert m.show("netcomp.service", "Result") == "success"
        journal = m.text("journalctl", "-u", "netcomp", "--no-pager", "-o", "cat")
        assert "CNI ADD container=ctr1 networks=mgmt,storage ok" in journal
        assert "Traceback" not in journal
