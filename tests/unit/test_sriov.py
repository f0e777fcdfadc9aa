"""SR-IOV: VF discovery in a sysfs-shaped tree, and VFs given to ADDs as deviceID and taken back by DEL.

No SR-IOV hardware here, and Debian has no sriov-cni: discovery reads a tree the test builds, and the sriov
plugin is a stand-in that records the config it is given (the real delegates are exercised in tests/integration).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from netcomp.cni.invoke import ExecResult, Runner
from netcomp.delegate.delegator import Delegator
from netcomp.delegate.request import parse_request
from netcomp.errors import DelegateError
from netcomp.host import vfpools
from netcomp.records.files import Records
from netcomp.settings import Settings
from tests.lab.deviceplugin import make_sysfs
from tests.lab.standins import OWN_NETNS


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    root = tmp_path / "sys"
    vfs = {0: ("0000:3b:02.0", "iavf"), 1: ("0000:3b:02.1", "vfio-pci"), 10: ("0000:3b:03.2", "iavf")}
    make_sysfs(root, "ens1f0", "0000:3b:00.0", vfs, {})
    make_sysfs(root, "ens1f1", "0000:3b:00.1", {0: ("0000:3b:0a.0", "iavf")}, {})
    return root


def test_discovery_orders_by_pf_then_vf_index_and_filters_drivers(sysfs: Path) -> None:
    assert vfpools.vfs(sysfs, "ens1f0") == [
        (0, "0000:3b:02.0", "iavf"),
        (1, "0000:3b:02.1", "vfio-pci"),
        (10, "0000:3b:03.2", "iavf"),
    ]
    assert vfpools.pool(sysfs, ["ens1f0", "ens1f1"]) == ["0000:3b:02.0", "0000:3b:02.1", "0000:3b:03.2", "0000:3b:0a.0"]
    assert vfpools.pool(sysfs, ["ens1f0"], ["vfio-pci"]) == ["0000:3b:02.1"]
    assert vfpools.vfs(sysfs, "nosuchpf") == []


VF_NET = {
    "cniVersion": "1.0.0",
    "name": "dataplane",
    "plugins": [{"type": "sriov", "vlan": 300}],
    "netcomp": {"generated": True, "type": "sriov", "resourceName": "intel.com/dp"},
}


@pytest.fixture
def delegator(tmp_path: Path, sysfs: Path) -> tuple[Delegator, list[dict[str, Any]]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sriov").write_text("#!/bin/sh\n")
    (bin_dir / "sriov").chmod(0o755)
    seen: list[dict[str, Any]] = []

    def plugin(argv, env, stdin, timeout):  # type: ignore[no-untyped-def]
        if env["CNI_COMMAND"] == "VERSION":  # asked once, before the first ADD: says nothing
            return ExecResult(0, b"", b"")
        conf = json.loads(stdin)
        seen.append({"command": env["CNI_COMMAND"], "deviceID": conf.get("deviceID")})
        out = (
            {"cniVersion": "1.0.0", "interfaces": [{"name": env["CNI_IFNAME"]}]} if env["CNI_COMMAND"] == "ADD" else {}
        )
        return ExecResult(0, json.dumps(out).encode() if out else b"", b"")

    settings = Settings(sriovPools={"intel.com/dp": {"pfNames": ["ens1f0"], "drivers": ["iavf"]}})
    d = Delegator(
        Runner([bin_dir], exec_=plugin),
        Records(tmp_path / "cache"),
        lambda: {"dataplane": VF_NET},
        lambda: None,
        lambda netns: set(),
        vf_pool=lambda rn: vfpools.pool(sysfs, settings.sriovPools[rn].pfNames, settings.sriovPools[rn].drivers),
    )
    return d, seen


def req(cmd: str, cid: str, network: str = "dataplane") -> Any:
    env = {
        "CNI_COMMAND": cmd,
        "CNI_CONTAINERID": cid,
        "CNI_NETNS": OWN_NETNS,
        "CNI_IFNAME": "eth0",
        "CNI_ARGS": f"NETCOMP_NETWORKS={network}",
    }
    return parse_request(env, {"cniVersion": "1.0.0"})


def test_vfs_are_given_out_in_order_and_taken_back_by_del(delegator: tuple[Delegator, list[dict[str, Any]]]) -> None:
    d, seen = delegator
    d.handle(req("ADD", "a"))
    d.handle(req("ADD", "b"))
    assert [s["deviceID"] for s in seen] == ["0000:3b:02.0", "0000:3b:03.2"]  # 02.1 is bound to vfio-pci: not ours
    with pytest.raises(DelegateError) as ei:
        d.handle(req("ADD", "c"))
    assert ei.value.code == 11 and "no free VF in pool 'intel.com/dp' (2 VFs, all in use)" in ei.value.msg
    d.handle(req("DEL", "a"))
    assert seen[-1] == {"command": "DEL", "deviceID": "0000:3b:02.0"}  # DEL gets the VF ADD used, from the cache
    d.handle(req("ADD", "c"))
    assert seen[-1] == {"command": "ADD", "deviceID": "0000:3b:02.0"}  # and it is free again
    assert d.host.vfs_reserved == set()


def test_a_resource_without_a_pool_is_a_clear_error(
    delegator: tuple[Delegator, list[dict[str, Any]]], tmp_path: Path
) -> None:
    d, _ = delegator
    d.host.vf_pool = lambda rn: (_ for _ in ()).throw(KeyError(rn))  # no pool configured
    with pytest.raises(DelegateError) as ei:
        d.handle(req("ADD", "a"))
    assert ei.value.code == 7 and "resourceName 'intel.com/dp' has no pool in netcomp.yaml" in ei.value.msg


def test_hotplug_takes_a_vf_from_the_pool_and_detach_gives_it_back(
    delegator: tuple[Delegator, list[dict[str, Any]]],
) -> None:
    """Hot-plug goes through the runtime's ADD path: a sriov network with a pool gets a free VF as deviceID (the
    plugin sees it), recorded; detach DELs with the same VF and frees it for the next."""

    d, seen = delegator
    d.hotplug("ADD", "hp1", OWN_NETNS, "dataplane", None, "eth0")
    assert seen[-1] == {"command": "ADD", "deviceID": "0000:3b:02.0"}
    entry = d.records.load("hp1", "eth0")
    assert entry is not None and entry.attachments[0].conflist["plugins"][0]["deviceID"] == "0000:3b:02.0"
    d.handle(req("ADD", "other"))  # the runtime's ADD of another container takes the next VF
    assert seen[-1] == {"command": "ADD", "deviceID": "0000:3b:03.2"}
    d.hotplug("DEL", "hp1", "", "dataplane", None, "eth0")
    assert seen[-1] == {"command": "DEL", "deviceID": "0000:3b:02.0"}
    assert d.records.load("hp1", "eth0") is None
    d.hotplug("ADD", "hp2", OWN_NETNS, "dataplane", None, "eth0")
    assert seen[-1] == {"command": "ADD", "deviceID": "0000:3b:02.0"}  # free again
    assert d.host.vfs_reserved == set()
