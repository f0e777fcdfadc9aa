"""A node's Delegator in process for the tests of devices a device plugin manages: stand-in plugins that record
the config they are given, the pod's annotations as the cluster would give them (FakePods), the kubelet's
PodResources socket and checkpoint paths in the test's directory (the stand-in server is tests/lab/podresources.py),
and the compiled networks whose plugins take a device (an SR-IOV resource, a definition naming one)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from netcomp.cni.invoke import ExecResult, Runner
from netcomp.delegate.delegator import Delegator
from netcomp.delegate.request import parse_request
from netcomp.kubelet.podresources import Kubelet
from netcomp.pods.devices import Devices
from netcomp.pods.multus import AskRules
from netcomp.pods.naming import PodRef
from netcomp.records.files import Records
from tests.lab.standins import OWN_NETNS

RES = "netcomp.io/vf"
POD = ("default", "p1")


def sriov_net(name: str, resource: str = RES) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": name,
        "plugins": [{"type": "sriov", "vlan": 300}],
        "netcomp": {"generated": True, "type": "sriov", "resourceName": resource},
    }


NAD = {
    "cniVersion": "1.0.0",
    "name": "default.hd",
    "plugins": [
        {"type": "host-device", "capabilities": {"deviceID": True, "CNIDeviceInfoFile": True}},
        {"type": "tuning", "mtu": 1400},
    ],
    "netcomp": {"generated": True, "type": "static", "namespace": "default", "resourceName": RES},
}
NETS = {"vf-a": sriov_net("vf-a"), "vf-b": sriov_net("vf-b"), "default.hd": NAD, "pool": sriov_net("pool", "x.io/p")}


class FakePods:
    """The pod's annotations, as the cluster would give them (the API server is not what these tests are about)."""

    def __init__(self) -> None:
        self.ask_rules = AskRules()
        self.notes: dict[tuple[str, str], dict[str, str]] = {}
        self.status: dict[str, Any] = {}

    def annotations(self, pod: PodRef) -> Mapping[str, str]:
        return self.notes.get((pod.namespace, pod.name), {})

    def report(self, pod: PodRef, status: list[dict[str, Any]]) -> None:
        self.status[str(pod)] = status

    def event(self, pod: PodRef, kind: str, reason: str, message: str) -> None:
        pass


class DeviceNode:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.sock = str(tmp / "pod-resources.sock")
        self.checkpoint = tmp / "kubelet_internal_checkpoint"
        self.info = tmp / "devinfo"
        self.seen: list[dict[str, Any]] = []
        self.pods = FakePods()
        self.pools: set[str] = {"x.io/p"}
        self.d = self.delegator()

    def plugin(self, argv: Any, env: Any, stdin: bytes, timeout: float) -> ExecResult:
        if env["CNI_COMMAND"] == "VERSION":  # asked once per plugin, before its first ADD
            return ExecResult(0, json.dumps({"cniVersion": "1.0.0", "supportedVersions": ["1.0.0"]}).encode(), b"")
        conf = json.loads(stdin)
        self.seen.append({"command": env["CNI_COMMAND"], "ifname": env["CNI_IFNAME"], "conf": conf})
        if env["CNI_COMMAND"] != "ADD":
            return ExecResult(0, b"", b"")
        out = {"cniVersion": "1.0.0", "interfaces": [{"name": env["CNI_IFNAME"], "sandbox": env["CNI_NETNS"]}]}
        return ExecResult(0, json.dumps(out).encode(), b"")

    def delegator(self, timeout: float = 2.0) -> Delegator:
        bin_dir = self.tmp / "bin"
        bin_dir.mkdir(exist_ok=True)
        for name in ("sriov", "host-device", "tuning"):
            (bin_dir / name).write_text("#!/bin/sh\n")
            (bin_dir / name).chmod(0o755)
        return Delegator(
            Runner([bin_dir], exec_=self.plugin),
            Records(self.tmp / "cache"),
            lambda: NETS,
            lambda: None,
            lambda netns: set(),
            vf_pool=lambda rn: ["0000:99:00.0"],
            pods=self.pods,  # type: ignore[arg-type]
            devices=Devices(Kubelet(self.sock, str(self.checkpoint), timeout), lambda: self.pools, str(self.info)),
        )

    def adds(self) -> list[tuple[str, Any]]:
        """(ifname, what the plugins were given as deviceID) of every ADD so far, by interface (a container's
        networks are attached side by side)."""
        return sorted((s["ifname"], s["conf"].get("deviceID")) for s in self.seen if s["command"] == "ADD")


def req(cmd: str, cid: str, networks: str = "", pod: tuple[str, str] | None = POD, uid: str = "") -> Any:
    args = [f"NETCOMP_NETWORKS={networks}"] if networks else []
    if pod:
        args += [f"K8S_POD_NAMESPACE={pod[0]}", f"K8S_POD_NAME={pod[1]}"] + ([f"K8S_POD_UID={uid}"] if uid else [])
    env = {
        "CNI_COMMAND": cmd,
        "CNI_CONTAINERID": cid,
        "CNI_NETNS": OWN_NETNS,
        "CNI_IFNAME": "eth0",
        "CNI_ARGS": ";".join(args),
    }
    return parse_request(env, {"cniVersion": "1.0.0"})
