"""A device plugin for the tests, behaving on the node as the SR-IOV Network Device Plugin does: it serves the
kubelet's device plugin API v1beta1 (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1/api.proto: the DevicePlugin
service on a socket in the kubelet's device-plugins dir, registered through Registration.Register on the
kubelet's own socket there), offers the PCI addresses of a sysfs-shaped VF tree as the devices of one resource,
and on Allocate writes a device-info file per device (device-info spec v1.1.0, type pci) where the spec says a
device plugin writes it, `<devinfo>/dp/<resource, / as ->-<device ID>-device.json`, and the
PCIDEVICE_<RESOURCE> variable the SR-IOV plugin sets. Messages from netcomp.kubelet.protomsg, served with grpcio's
generic handlers: nothing generated, no .proto read.

The VF tree has the shape netcomp's sriov discovery reads (class/net/<pf>/device/virtfn<N> -> the VF's PCI dir,
bus/pci/devices/<VF>/driver) and, for the host-device plugin standing in for sriov-cni,
bus/pci/devices/<VF>/net/<ifname>: the node lab binds that dir over /sys/bus/pci/devices in its mount namespace
and makes each <ifname> a real link (a veth end) in its network namespace, so `host-device` given the VF's PCI
address as `deviceID` moves that link into the pod."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from netcomp.kubelet import protomsg

RESOURCE = "netcomp.io/testvf"
API_VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"
DEVINFO_VERSION = "1.1.0"

_TABLE = {
    "Empty": [],
    "DevicePluginOptions": [("pre_start_required", 1, "bool"), ("get_preferred_allocation_available", 2, "bool")],
    "RegisterRequest": [
        ("version", 1, "string"),
        ("endpoint", 2, "string"),
        ("resource_name", 3, "string"),
        ("options", 4, "DevicePluginOptions"),
    ],
    "Device": [("ID", 1, "string"), ("health", 2, "string")],
    "ListAndWatchResponse": [("devices", 1, "repeated Device")],
    "ContainerAllocateRequest": [("devices_ids", 1, "repeated string")],
    "AllocateRequest": [("container_requests", 1, "repeated ContainerAllocateRequest")],
    "ContainerAllocateResponse": [("envs", 1, "map<string, string>"), ("annotations", 4, "map<string, string>")],
    "AllocateResponse": [("container_responses", 1, "repeated ContainerAllocateResponse")],
    "PreStartContainerRequest": [("devices_ids", 1, "repeated string")],
    "PreStartContainerResponse": [],
    "ContainerPreferredAllocationRequest": [
        ("available_deviceIDs", 1, "repeated string"),
        ("must_include_deviceIDs", 2, "repeated string"),
        ("allocation_size", 3, "int32"),
    ],
    "PreferredAllocationRequest": [("container_requests", 1, "repeated ContainerPreferredAllocationRequest")],
    "ContainerPreferredAllocationResponse": [("deviceIDs", 1, "repeated string")],
    "PreferredAllocationResponse": [("container_responses", 1, "repeated ContainerPreferredAllocationResponse")],
}


@dataclass(frozen=True)
class VfTree:
    """A sysfs-shaped tree: `root` stands for /sys; the PF `pf` (at `pf_address`) has the VFs `vfs`, each (PCI
    address, the name of the link that plays it)."""

    root: Path
    pf: str
    pf_address: str
    vfs: tuple[tuple[str, str], ...]

    @property
    def addresses(self) -> list[str]:
        return [a for a, _ in self.vfs]

    @property
    def pci_devices(self) -> Path:
        """What stands for /sys/bus/pci/devices."""
        return self.root / "bus" / "pci" / "devices"


def make_sysfs(root: Path, pf: str, pf_address: str, vfs: dict[int, tuple[str, str]], links: dict[str, str]) -> None:
    """`root` shaped as /sys for a PF with VFs: class/net/<pf>/device -> the PF's PCI dir, which has virtfn<N> ->
    ../<VF address> for each VF (index N: (address, driver)); each VF's bus/pci/devices dir has its driver link
    and, where `links` names one for its address, net/<link>."""
    pf_dir = root / "devices" / "pci0000:00" / pf_address
    pf_dir.mkdir(parents=True)
    (root / "class" / "net" / pf).mkdir(parents=True)
    os.symlink(pf_dir, root / "class" / "net" / pf / "device")
    for index, (addr, driver) in vfs.items():
        (pf_dir.parent / addr).mkdir()
        os.symlink(f"../{addr}", pf_dir / f"virtfn{index}")
        dev = root / "bus" / "pci" / "devices" / addr
        dev.mkdir(parents=True)
        if addr in links:
            (dev / "net" / links[addr]).mkdir(parents=True)
        # Absolute, so that the link resolves where the tree is bound too (host-device resolves it and takes the
        # driver's name from what it finds: hasDpdkDriver in plugins/main/host-device/host-device.go).
        drivers = root / "bus" / "pci" / "drivers" / driver
        drivers.mkdir(parents=True, exist_ok=True)
        os.symlink(drivers, dev / "driver")


def make_vf_tree(root: Path, pf: str, pf_address: str, vfs: list[tuple[str, str]], driver: str = "iavf") -> VfTree:
    make_sysfs(root, pf, pf_address, {i: (addr, driver) for i, (addr, _) in enumerate(vfs)}, dict(vfs))
    return VfTree(root, pf, pf_address, tuple(vfs))


def devinfo_name(resource: str, device_id: str) -> str:
    """The device plugin's device-info file name (the device-info spec; network-attachment-definition-client's
    getDPDeviceInfoPath)."""
    return f"{resource.replace('/', '-')}-{device_id.replace('/', '-')}-device.json"


def _env_name(resource: str) -> str:
    """PCIDEVICE_<resource>, as the SR-IOV device plugin names its variable."""
    return "PCIDEVICE_" + "".join(c if c.isalnum() else "_" for c in resource).upper()


@dataclass
class DevicePlugin:
    """The plugin serving one resource from `plugin_dir` (the kubelet's device-plugins dir, as this process sees
    it); device-info files under `devinfo`/dp."""

    plugin_dir: Path
    devinfo: Path
    tree: VfTree
    resource: str = RESOURCE
    ids: list[str] | None = None  # the tree's VFs it serves (None: all)
    allocations: list[list[str]] = field(default_factory=list)  # the device IDs of each Allocate, in order
    _server: Any = None
    _stop: threading.Event = field(default_factory=threading.Event)

    @property
    def endpoint(self) -> str:
        return self.resource.replace("/", "_") + ".sock"

    @property
    def device_ids(self) -> list[str]:
        return [a for a in self.tree.addresses if self.ids is None or a in self.ids]

    def devinfo_file(self, device_id: str) -> Path:
        return self.devinfo / "dp" / devinfo_name(self.resource, device_id)

    def start(self) -> None:
        """Serve, then register with the kubelet (whose socket must be there: it removes every other file of
        the dir when it starts)."""
        import grpc

        m = protomsg.messages(API_VERSION, _TABLE)
        handlers = {
            "GetDevicePluginOptions": grpc.unary_unary_rpc_method_handler(
                lambda req, ctx: m["DevicePluginOptions"](),
                request_deserializer=m["Empty"].FromString,
                response_serializer=m["DevicePluginOptions"].SerializeToString,
            ),
            "ListAndWatch": grpc.unary_stream_rpc_method_handler(
                lambda req, ctx: self._list_and_watch(m, ctx),
                request_deserializer=m["Empty"].FromString,
                response_serializer=m["ListAndWatchResponse"].SerializeToString,
            ),
            "Allocate": grpc.unary_unary_rpc_method_handler(
                lambda req, ctx: self._allocate(m, req),
                request_deserializer=m["AllocateRequest"].FromString,
                response_serializer=m["AllocateResponse"].SerializeToString,
            ),
            "PreStartContainer": grpc.unary_unary_rpc_method_handler(
                lambda req, ctx: m["PreStartContainerResponse"](),
                request_deserializer=m["PreStartContainerRequest"].FromString,
                response_serializer=m["PreStartContainerResponse"].SerializeToString,
            ),
            "GetPreferredAllocation": grpc.unary_unary_rpc_method_handler(
                lambda req, ctx: m["PreferredAllocationResponse"](),
                request_deserializer=m["PreferredAllocationRequest"].FromString,
                response_serializer=m["PreferredAllocationResponse"].SerializeToString,
            ),
        }
        sock = self.plugin_dir / self.endpoint
        with contextlib.suppress(FileNotFoundError):
            sock.unlink()
        server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=4))
        service = grpc.method_handlers_generic_handler(f"{API_VERSION}.DevicePlugin", handlers)
        server.add_generic_rpc_handlers((service,))
        server.add_insecure_port(f"unix:{sock}")
        server.start()
        self._server = server
        req = m["RegisterRequest"](
            version=API_VERSION, endpoint=self.endpoint, resource_name=self.resource, options=m["DevicePluginOptions"]()
        )
        with grpc.insecure_channel(f"unix:{self.plugin_dir / KUBELET_SOCKET}") as ch:
            register = ch.unary_unary(
                f"/{API_VERSION}.Registration/Register",
                request_serializer=m["RegisterRequest"].SerializeToString,
                response_deserializer=m["Empty"].FromString,
            )
            register(req, timeout=30)

    def _list_and_watch(self, m: dict[str, Any], ctx: Any) -> Iterator[Any]:
        yield m["ListAndWatchResponse"](devices=[m["Device"](ID=d, health="Healthy") for d in self.device_ids])
        # The stream stays open while the plugin serves: its end tells the kubelet the devices are gone.
        while not self._stop.wait(1.0) and ctx.is_active():
            pass

    def _allocate(self, m: dict[str, Any], req: Any) -> Any:
        out = []
        for creq in req.container_requests:
            ids = list(creq.devices_ids)
            self.allocations.append(ids)
            for d in ids:
                self._write_devinfo(d)
            out.append(m["ContainerAllocateResponse"](envs={_env_name(self.resource): ",".join(ids)}))
        return m["AllocateResponse"](container_responses=out)

    def _write_devinfo(self, device_id: str) -> None:
        info = {"type": "pci", "version": DEVINFO_VERSION, "pci": {"pci-address": device_id}}
        info["pci"]["pf-pci-address"] = self.tree.pf_address
        path = self.devinfo_file(device_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(info))
        tmp.chmod(0o444)
        os.replace(tmp, path)

    def stop(self) -> None:
        """Stop serving; the device-info files and the socket go too (as the SR-IOV plugin cleans them)."""
        self._stop.set()
        if self._server is not None:
            self._server.stop(grace=2).wait()
            self._server = None
        for d in self.device_ids:
            with contextlib.suppress(FileNotFoundError):
                self.devinfo_file(d).unlink()
        with contextlib.suppress(FileNotFoundError):
            (self.plugin_dir / self.endpoint).unlink()
