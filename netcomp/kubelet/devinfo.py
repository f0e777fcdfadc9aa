"""Reads and copies the device-info spec's files (k8snetworkplumbingwg/device-info-spec): a device plugin writes
one per device under dp/; netcomp copies it per attachment under cni/, and removes the copy with the attachment."""

from __future__ import annotations

import contextlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from netcomp import foreign
from netcomp.cni.spec import loads_foreign
from netcomp.errors import HostError
from netcomp.fsutil import atomic_write, read_bounded
from netcomp.names import PCI

log = logging.getLogger("netcomp.host")

VERSION = "1.1.0"
MAX_FILE = 64 * 1024  # a device's info is a few hundred bytes


def flat(name: str) -> str:
    """A name as a path component: '/' (of a resource, a device ID, a namespaced network) becomes '-', as the
    device-info helpers of network-attachment-definition-client write it."""
    return name.replace("/", "-")


def dp_path(root: str, resource: str, device_id: str) -> Path:
    """Where the device plugin writes a device's info."""
    return Path(root) / "dp" / f"{flat(resource)}-{flat(device_id)}-device.json"


def cni_path(root: str, network: str, container_id: str, ifname: str) -> Path:
    """Where an attachment's copy goes: Multus's name (`<network>-<container>_<ifname>`), so that tools written
    for Multus find it (the spec asks only for a name unique per attachment)."""
    return Path(root) / "cni" / f"{flat(network)}-{container_id}_{ifname}"


def read_dp(root: str, resource: str, device_id: str) -> dict[str, Any] | None:
    """The device plugin's info of a device; for a PCI address without a usable file, the spec's minimal pci
    record; else None. A file that is not the spec's JSON object is logged and treated as missing."""
    path = dp_path(root, resource, device_id)
    try:
        return parse(read_bounded(path, MAX_FILE, follow=False))
    except FileNotFoundError:
        pass
    except OSError as e:
        log.warning("device-info %s of device %s is unusable: %s", path, device_id, e.strerror)
    except ValueError as e:
        foreign.ignore("device-info", str(path), str(e))
    if PCI.fullmatch(device_id):
        return {"type": "pci", "version": VERSION, "pci": {"pci-address": device_id}}
    return None


def parse(data: bytes) -> dict[str, Any]:
    """A device-info file's bytes as its object. ValueError for anything else: not JSON, nested too deep, no
    `type` string, a `version` that is not a string, the type's own section (`pci`, `vdpa`, ...) not an object."""
    doc = loads_foreign(data)
    if not isinstance(doc, dict) or not isinstance(doc.get("type"), str):
        raise ValueError("not a device-info object (no type)")
    if not isinstance(doc.get("version", ""), str):
        raise ValueError("its version is not a string")
    if not isinstance(doc.get(doc["type"], {}), dict):
        raise ValueError(f"its {doc['type'][:32]!r} section is not an object")
    return doc


def write_copy(path: str, info: dict[str, Any]) -> None:
    """Write an attachment's copy (atomically; its dir made when missing). OSError as the disk gives it."""
    p = Path(path)
    p.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    # Read-only, as the device-info helpers of network-attachment-definition-client write it; not fsync'd:
    # it is on the ADD's path, in a runtime dir, and the write-ahead names it for a DEL to remove.
    atomic_write(p, (json.dumps(info, indent=2) + "\n").encode(), mode=0o444, durable=False)


def remove(path: str) -> None:
    """Remove an attachment's copy; gone already is fine. HostError when it cannot be removed."""
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    except OSError as e:
        raise HostError(f"cannot remove the device-info copy {path}: {e.strerror}") from None
