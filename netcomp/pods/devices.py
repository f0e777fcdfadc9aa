"""This module gives an attachment of a network of a device plugin's resource (not one of sriovPools) the device
the kubelet gave the pod (kubelet/podresources.py), puts it where the plugins read it as Multus does
(pkg/types/conf.go), and keeps the CNI copy of its device-info file, named in the write-ahead before it is
written. docs/kubernetes.md, "SR-IOV with the device plugin"."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from netcomp.cni.codes import E_INVALID_CONFIG, E_TRY_LATER
from netcomp.errors import DelegateError, HostError
from netcomp.fsutil import remove_stale_tmp
from netcomp.kubelet import devinfo
from netcomp.kubelet.podresources import Kubelet
from netcomp.pods.asks import declared
from netcomp.pods.multus import Ask
from netcomp.pods.naming import PodRef, display_name
from netcomp.records.record import Attachment, Record

log = logging.getLogger("netcomp.delegate")


def resource_of(conflist: Mapping[str, Any]) -> str | None:
    """The device resource a compiled network names (its netcomp block's resourceName), if any."""
    name = (conflist.get("netcomp") or {}).get("resourceName")
    return name if isinstance(name, str) and name else None


@dataclass
class Devices:
    """`kubelet`: where the pod's devices are learnt; `pools`: the resources netcomp.yaml's sriovPools serve;
    `info_dir`: the device-info spec's directory."""

    kubelet: Kubelet
    pools: Callable[[], set[str]]
    info_dir: str

    def assign(
        self,
        pod: PodRef | None,
        container_id: str,
        new: list[Attachment],
        others: list[Attachment],
        asks: Mapping[str, Ask] | None = None,
    ) -> None:
        """Give each new attachment of a device-plugin network its device, or raise the CNI error that says why
        it cannot have one, before anything is recorded or run. `others`: the container's attachments already
        there (their devices are taken)."""
        wanted = [(a, r) for a in new if (r := resource_of(a.conflist))]
        if not wanted:
            return
        pools = self.pools()
        mine = [(a, r) for a, r in wanted if r not in pools]
        also_pools = {r for a, r in wanted if r in pools}
        # The kubelet's checkpoint is read only for a resource that is also a pool: a device plugin's ADD never
        # reads it here.
        shared = also_pools & self.kubelet.registered() if also_pools else set()
        if shared:
            r = sorted(shared)[0]
            raise DelegateError(
                E_INVALID_CONFIG,
                f"resource {r} is both a VF pool of netcomp.yaml (sriovPools) and a device plugin's resource the "
                f"kubelet allocates (its checkpoint {self.kubelet.checkpoint} lists it): two allocators would hand "
                "out the same device",
                "remove the pool from sriovPools (the device plugin's allocation is the one pods are counted by)",
                network=next(a.network for a, res in wanted if res == r),
            )
        if not mine:
            return
        if pod is None:
            a, r = mine[0]
            raise DelegateError(
                E_INVALID_CONFIG,
                f"network {display_name(a.network, a.conflist)} takes a device of resource {r} from the kubelet's "
                "device plugin, and the request names no pod (K8S_POD_NAMESPACE and K8S_POD_NAME in CNI_ARGS)",
                "no plugin was run",
            )
        try:
            got = self.kubelet.pod_devices(pod.namespace, pod.name, pod.uid)
        except HostError as e:
            wants = "; ".join(
                f"network {display_name(a.network, a.conflist)} takes a device of resource {r}" for a, r in mine
            )
            raise DelegateError(
                E_TRY_LATER,
                f"pod {pod}: cannot learn the devices the kubelet gave it: {e} ({wants})",
                "no plugin was run",
            ) from None
        used = {dev for a in others if (dev := device_of(a))}
        by_resource: dict[str, list[Attachment]] = {}
        for a, r in mine:
            by_resource.setdefault(r, []).append(a)
        for r, atts in by_resource.items():
            held, bad = got.devices.get(r, ()), got.bad.get(r, "")
            self._hand_out(pod, container_id, r, atts, held, bad, used, asks or {})
        log.debug("pod %s: devices from the kubelet's %s: %s", pod, got.source, dict(got.devices))

    def _hand_out(
        self,
        pod: PodRef,
        container_id: str,
        resource: str,
        atts: list[Attachment],
        held: tuple[str, ...],
        bad: str,
        used: set[str],
        asks: Mapping[str, Ask],
    ) -> None:
        names = ", ".join(display_name(a.network, a.conflist) for a in atts)
        if bad:
            raise DelegateError(
                E_INVALID_CONFIG,
                f"pod {pod}: network {names} takes a device of resource {resource}, and the kubelet gave the pod "
                f"a device ID of it that is not one: {bad}",
                f"the device plugin that serves {resource} named that device; no plugin was run",
            )
        if not held:
            raise DelegateError(
                E_INVALID_CONFIG,
                f"pod {pod}: network {names} takes a device of resource {resource}, and the kubelet gave the pod none",
                f"add `resources: {{limits: {{{resource}: 1}}}}` to a container of the pod (one per network of "
                "that resource); no plugin was run",
            )
        free = [d for d in held if d not in used]
        for a in atts:
            ask = asks.get(a.ifname)
            if ask is None or ask.device_id is None:
                continue
            if ask.device_id not in held:
                raise ask.error(
                    f"deviceID {ask.device_id} is not a device of resource {resource} the kubelet gave the pod",
                    f"it holds: {', '.join(held)}",
                )
            if ask.device_id not in free:
                raise ask.error(f"deviceID {ask.device_id} is used by another network of the pod")
            free.remove(ask.device_id)
            self._give(a, resource, ask.device_id, container_id)
            used.add(ask.device_id)
        rest = [a for a in atts if device_of(a) is None]
        if len(rest) > len(free):
            taken = len(held) - len([d for d in held if d not in used])
            raise DelegateError(
                E_INVALID_CONFIG,
                f"pod {pod}: {len(atts)} network{'s' if len(atts) > 1 else ''} ({names}) take a device of resource "
                f"{resource}, and the kubelet gave the pod {len(held)}"
                + (f", {taken} of them used by its other networks" if taken else ""),
                f"ask for one device of {resource} per network in the pod's resources; no plugin was run",
            )
        for a, dev in zip(rest, free, strict=False):
            self._give(a, resource, dev, container_id)
            used.add(dev)

    def _give(self, a: Attachment, resource: str, dev: str, container_id: str) -> None:
        conf = dict(a.conflist)
        plugins = [dict(p) for p in conf.get("plugins") or []]
        if (conf.get("netcomp") or {}).get("type") == "sriov":
            plugins = [{**p, "deviceID": dev} if p.get("type") == "sriov" else p for p in plugins]
        else:
            plugins = [{**p, "deviceID": dev, "pciBusID": dev} for p in plugins]
        conf["plugins"] = plugins
        a.conflist = conf
        info = devinfo.read_dp(self.info_dir, resource, dev)
        path = str(devinfo.cni_path(self.info_dir, display_name(a.network, conf), container_id, a.ifname))
        caps = declared(conf)
        given = {k: v for k, v in (("deviceID", dev), ("CNIDeviceInfoFile", path)) if k in caps}
        if given:
            a.capability_args = {**a.capability_args, **given}
        # The copy's path is recorded whenever netcomp writes it or hands it to a plugin: a plugin that declares
        # CNIDeviceInfoFile writes the file itself when there is no device-info to copy (sriov-cni does), and
        # the attachment's DEL removes whatever is there.
        file = path if info is not None or "CNIDeviceInfoFile" in given else ""
        a.device = {"resource": resource, "id": dev, "info": info, "file": file}

    def write_info(self, atts: list[Attachment]) -> None:
        """The CNI copy of each attachment's device-info, once the write-ahead names it. A file that cannot be
        written is logged: the device is attached all the same (device-info is for the pod's applications)."""
        for a in atts:
            dev = a.device
            if not dev or not dev.get("file") or not isinstance(dev.get("info"), dict):
                continue
            try:
                devinfo.write_copy(str(dev["file"]), dev["info"])
            except OSError as e:
                log.error("cannot write the device-info %s of network %s: %s", dev["file"], a.network, e.strerror)

    def sweep(self, entries: list[Record], networks: Mapping[str, Mapping[str, Any]]) -> list[str]:
        """At start-up, remove the CNI copies of device-info no record names, of networks of a resource (compiled
        now, or in a record) and containers with no record: a copy another CNI wrote is left alone."""
        cni_dir = Path(self.info_dir) / "cni"
        remove_stale_tmp(cni_dir)  # a copy's temp file a killed write left
        try:
            names = os.listdir(cni_dir)
        except FileNotFoundError:
            return []
        except OSError as e:
            log.error("cannot look for device-info copies in %s: %s", cni_dir, e.strerror)
            return []
        recorded = [a for e in entries for a in e.attachments]
        named = {str(a.device["file"]) for a in recorded if a.device and a.device.get("file")}
        nets = [display_name(n, c) for n, c in networks.items() if resource_of(c)]
        nets += [display_name(a.network, a.conflist) for a in recorded if a.device]
        heads = {devinfo.flat(n) + "-" for n in nets}
        known = {e.container_id for e in entries}
        gone = []
        for name in names:
            path = str(cni_dir / name)
            if path in named:
                continue
            tails = [name[len(h) :] for h in heads if name.startswith(h)]
            if not tails or any(t.startswith(cid + "_") for t in tails for cid in known):
                continue
            try:
                devinfo.remove(path)
            except HostError as e:
                log.error("%s", e)
                continue
            gone.append(path)
        if gone:
            log.warning("removed %d device-info copies no attachment names: %s", len(gone), ", ".join(gone))
        return gone

    @staticmethod
    def remove_info(a: Attachment) -> None:
        """Remove an attachment's CNI copy of its device-info (its DEL); HostError when it cannot be."""
        dev = a.device
        if dev and dev.get("file"):
            devinfo.remove(str(dev["file"]))


def device_of(a: Attachment) -> str | None:
    """The device ID an attachment took from the kubelet, if any."""
    dev = a.device
    return str(dev["id"]) if dev and dev.get("id") else None
