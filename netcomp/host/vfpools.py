"""This module finds the SR-IOV VFs of a pool (netcomp.yaml `sriovPools`) in sysfs, under a root tests can
replace: the `virtfn<N>` links under /sys/class/net/<pf>/device, in PF order then VF index, optionally only those
bound to one of the listed drivers."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from netcomp.names import PCI


def vfs(sysfs: Path, pf: str) -> list[tuple[int, str, str | None]]:
    """(index, PCI address, driver) of each VF of a PF, by index; [] when the PF has none or does not exist."""
    dev = sysfs / "class" / "net" / pf / "device"
    out = []
    try:
        names = os.listdir(dev)
    except OSError:
        return []
    for name in names:
        if not name.startswith("virtfn") or not name[6:].isdigit():
            continue
        try:
            addr = os.path.basename(os.readlink(dev / name))
        except OSError:
            continue
        if not PCI.fullmatch(addr):
            continue
        try:
            driver: str | None = os.path.basename(os.readlink(sysfs / "bus" / "pci" / "devices" / addr / "driver"))
        except OSError:
            driver = None
        out.append((int(name[6:]), addr, driver))
    return sorted(out)


def pool(sysfs: Path, pf_names: Sequence[str], drivers: Sequence[str] = ()) -> list[str]:
    """The PCI addresses of a pool's VFs, in allocation order."""
    return [addr for pf in pf_names for _, addr, driver in vfs(sysfs, pf) if not drivers or driver in drivers]
