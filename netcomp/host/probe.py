"""This module asks the kernel which link kinds it can make by making them, in a network namespace of a process
started for the test (_main), which takes the namespace with it as it exits; it tries nothing unless unshare(2)
gave it a new one. It also lists this namespace's links with their kinds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any

from netcomp import libc
from netcomp.errors import HostError
from netcomp.host.nsenter import CLONE_NEWNET

PROBE_SECONDS = 30.0
# The link kinds the networks' plugins and host links need, by the name of the kernel feature (its module), and
# how each is made over a parent link (a veth end, which every kernel that runs containers has).
KINDS: dict[str, Callable[[int], dict[str, Any]]] = {
    "macvlan": lambda parent: {"kind": "macvlan", "link": parent, "macvlan_mode": "bridge"},
    "ipvlan": lambda parent: {"kind": "ipvlan", "link": parent, "ipvlan_mode": 0},
    "8021q": lambda parent: {"kind": "vlan", "link": parent, "vlan_id": 42},
    "vxlan": lambda parent: {"kind": "vxlan", "vxlan_id": 42, "vxlan_port": 4789, "vxlan_link": parent},
    "bridge": lambda parent: {"kind": "bridge"},
}


def kernel_kinds(kinds: Sequence[str]) -> dict[str, str | None]:
    """For each kind (a key of KINDS): None when the kernel made one, else what it answered. HostError when the
    test itself cannot run (no privilege to make a namespace, the helper died)."""
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise ValueError(f"unknown link kinds {unknown}")
    if not kinds:
        return {}
    try:
        p = subprocess.run(
            [sys.executable, "-I", "-c", _HELPER, _PACKAGE_PARENT, *kinds],
            capture_output=True,
            timeout=PROBE_SECONDS,
            check=False,
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise HostError(f"cannot run the kernel test: {e}") from None
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        tail = p.stderr.decode(errors="replace").strip()[-300:]
        raise HostError(f"the kernel test failed (exit status {p.returncode}): {tail}") from None
    if "error" in doc:
        raise HostError(str(doc["error"]))
    return {k: doc.get(k) for k in kinds}


# The helper: isolated (-I: no environment's paths, not the working directory), it imports the netcomp this is.
_HELPER = (
    "import sys; sys.path.insert(0, sys.argv[1]); from netcomp.host.probe import _main; sys.exit(_main(sys.argv[2:]))"
)
# The folder this netcomp is imported from (the parent of netcomp/), for the helper to import the same one.
_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def link_kinds() -> dict[str, str | None]:
    """Every link of this network namespace by name, with its kind (None for a NIC); HostError if netlink fails."""
    try:
        from pyroute2 import IPRoute

        with IPRoute() as ipr:
            out: dict[str, str | None] = {}
            for msg in ipr.get_links():
                info = msg.get_attr("IFLA_LINKINFO")
                out[str(msg.get_attr("IFLA_IFNAME"))] = info.get_attr("IFLA_INFO_KIND") if info is not None else None
            return out
    except OSError as e:
        raise HostError(f"cannot list the links: {e}") from None


def _try(kinds: Sequence[str]) -> dict[str, str | None]:
    """In the new namespace: a veth pair as the parent, then one link of each kind."""
    from pyroute2 import IPRoute
    from pyroute2.netlink.exceptions import NetlinkError

    out: dict[str, str | None] = {}
    with IPRoute() as ipr:
        try:
            ipr.link("add", ifname="probe0", kind="veth", peer="probe1")
            parent = ipr.link_lookup(ifname="probe0")[0]
        except NetlinkError as e:
            return {k: f"no veth link to make it over: {os.strerror(e.code)}" for k in kinds}
        for i, kind in enumerate(kinds):
            try:
                ipr.link("add", ifname=f"probe-{i}", **KINDS[kind](parent))
                out[kind] = None
            except NetlinkError as e:
                out[kind] = os.strerror(e.code)
    return out


def _main(kinds: Sequence[str]) -> int:
    try:
        libc.unshare(CLONE_NEWNET)
    except OSError as e:
        why = os.strerror(e.errno or 0)
        print(json.dumps({"error": f"cannot make a network namespace to try in: {why} (run as root)"}))
        return 0
    print(json.dumps(_try(kinds)))
    return 0
