"""Compiled configs run for real: the Debian containernetworking-plugins binaries, in network namespaces the
test makes (a "host" netns with a veth master, and a container netns), ADD, CHECK and DEL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from netcomp.cni.invoke import Runner
from netcomp.compiler.compiler import Compiler
from netcomp.errors import DelegateError
from netcomp.settings import Settings
from tests.lab.netlab import PLUGIN_DIR, Lab, lab

pytestmark = pytest.mark.root


def compile_one(tmp_path: Path, name: str, spec: str, static_dir: Path | None = None) -> dict:
    """Compile one intent, `spec` being its spec block as YAML (indented two spaces)."""
    f = tmp_path / "intent.yaml"
    f.write_text(f"apiVersion: netcomp.io/v1\nkind: Network\nmetadata: {{name: {name}}}\nspec:\n{spec}")
    settings = Settings(pluginDirs=[PLUGIN_DIR], staticDirs=[str(static_dir or tmp_path)])
    plan = Compiler(settings, offline=False).compile([f])
    assert plan.ok, plan.errors
    (art,) = plan.artifacts.values()
    return json.loads(art.data)


def attach_check_detach(lb: Lab, conflist: dict, ifname: str) -> tuple[str, list[str]]:
    ctr, runner, rt = lb.attachment(ifname)
    result = runner.add(conflist, rt)
    try:
        assert ifname in lb.links(ctr)
        addrs = lb.addrs(ctr, ifname)
        assert [i["address"] for i in result["ips"]] == addrs
        runner.check(conflist, rt, result)
    finally:
        runner.delete(conflist, rt, result)
    assert ifname not in lb.links(ctr)
    runner.delete(conflist, rt, result)  # DEL twice is fine (CNI spec)
    return ctr, addrs


def test_macvlan_add_check_del(tmp_path: Path) -> None:
    with lab() as lb:
        conf = compile_one(
            tmp_path,
            "storage",
            f"""\
  type: macvlan
  hostDevice: {lb.master}
  mode: bridge
  mtu: 1400
  ipam:
    type: host-local
    dataDir: {tmp_path}/ipam
    subnet: 10.250.0.0/24
    rangeStart: 10.250.0.10
    rangeEnd: 10.250.0.20
    routes: [{{dst: 10.251.0.0/16}}]
""",
        )
        assert conf["plugins"][0]["ipam"]["routes"] == [{"dst": "10.251.0.0/16", "gw": "10.250.0.1"}]
        _, addrs = attach_check_detach(lb, conf, "stor0")
        assert addrs == ["10.250.0.10/24"]
        assert not list((tmp_path / "ipam" / "storage").glob("10.*"))  # the lease was released


def test_static_bridge_add_check_del(tmp_path: Path) -> None:
    static = tmp_path / "static"
    static.mkdir()
    (static / "br.conf").write_text(
        json.dumps(
            {
                "cniVersion": "0.4.0",
                "name": "orig",
                "type": "bridge",
                "bridge": "ncbr9",
                "isGateway": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": f"{tmp_path}/ipam",
                    "subnet": "10.252.0.0/24",
                    "routes": [{"dst": "10.253.0.0/16", "gw": "10.252.0.1"}],
                },
            }
        )
    )
    with lab() as lb:
        conf = compile_one(
            tmp_path,
            "mgmt",
            "  type: static\n  networkID: br\n",
            static,
        )
        assert conf["name"] == "mgmt" and conf["cniVersion"] == "0.4.0"
        _, addrs = attach_check_detach(lb, conf, "mgmt0")
        assert addrs == ["10.252.0.2/24"]
        assert "ncbr9" in lb.links(lb.host)


def test_ipvlan_reaches_the_kernel(tmp_path: Path) -> None:
    """This kernel has no ipvlan: the compiled config must be accepted by the plugin, and the error the user
    gets must be the kernel's, naming ipvlan, with the network and plugin in front."""
    with lab() as lb:
        conf = compile_one(
            tmp_path,
            "signal",
            f"""\
  type: ipvlan
  hostDevice: {lb.master}
  mode: l3
  ipam: {{type: host-local, dataDir: {tmp_path}/ipam, subnet: 10.254.0.0/24}}
""",
        )
        ctr, runner, rt = lb.attachment("sig0", "ipv")
        with pytest.raises(DelegateError) as ei:
            runner.add(conf, rt)
        err = ei.value
        assert err.plugin == "ipvlan" and err.network == "signal"
        assert "ipvlan" in err.msg and "not supported" in err.msg
        assert str(err).startswith("network 'signal', plugin 'ipvlan': failed to create ipvlan")
        runner.delete(conf, rt, None)  # cleaning up what failed is safe
        assert "sig0" not in lb.links(ctr)


def test_version_probe_of_a_real_plugin() -> None:
    """VERSION probing (libcni's GetVersionInfo): what a delegate says it speaks."""
    from tests.lab.netlab import require_root_and_plugins

    require_root_and_plugins()
    info = Runner([PLUGIN_DIR]).version("bridge")
    assert "1.0.0" in info["supportedVersions"] and "0.4.0" in info["supportedVersions"]
    with pytest.raises(DelegateError) as ei:
        Runner([PLUGIN_DIR]).version("../bridge")
    assert ei.value.code == 7 and "not a plain plugin name" in ei.value.msg
