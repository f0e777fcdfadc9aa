"""Checks the node's own parts: the daemon (asked on its socket), SR-IOV (netcomp's VF pools, or the kubelet's
device plugins), and the container runtime's conf dir."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

from netcomp.daemon.server import protocol
from netcomp.daemon.server.client import call, unreachable
from netcomp.daemon.wiring import RUNTIME_CONF, runtime_config
from netcomp.doctor.checks import Check, fail, ok, skip, warn
from netcomp.doctor.node import NodeNetwork, grouped
from netcomp.errors import HostError
from netcomp.fsutil import read_bounded
from netcomp.host import vfpools
from netcomp.kubelet.podresources import Kubelet, NoCheckpoint
from netcomp.settings import Settings

# What libcni loads from a conf dir (libcni's ConfFiles); containerd (go-cni's loadFromConfDir) and CRI-O
# (ocicni) sort the names and take the first one as the node's network.
CONF_SUFFIXES = (".conf", ".conflist", ".json")
MAX_SHOWN = 3  # degraded intents named on the daemon's line
ANSWER_SECONDS = 10.0
# The kubelet writes its checkpoint again whole when a device plugin registers and when it gives a pod devices;
# a file it cannot read at its start it does not use.
CHECKPOINT_FIX = (
    "restart the device plugins (each registration makes the kubelet write its checkpoint again), and find what "
    "else writes the kubelet's device-plugins dir"
)


def daemon(settings: Settings) -> Check:
    """The daemon's /status, in a line: generation, networks, degraded intents with their positions."""
    name = "daemon"
    try:
        status, doc = call(settings.socket, "GET", protocol.STATUS_PATH, timeout=ANSWER_SECONDS)
    except TimeoutError:
        found = f"no answer on {settings.socket} within {ANSWER_SECONDS:g} s (starting, or hung)"
        return fail(name, found, "`systemctl status netcomp`; `journalctl -u netcomp` says what it is doing")
    except OSError as e:
        return fail(name, *unreachable(settings.socket, e))
    if status != 200 or not isinstance(doc, dict):
        return fail(name, f"answered {status} on {protocol.STATUS_PATH}: {doc}", "`journalctl -u netcomp`")
    head = f"generation {doc.get('generation')}, {len(doc.get('networks') or [])} networks"
    if not doc.get("ready"):
        return warn(name, f"starting ({head})", "wait for it to be ready")
    errors = [d for d in doc.get("diagnostics") or [] if d.get("severity") == "error"]
    if not errors:
        return ok(name, f"ready on {settings.socket}, {head}")
    where = [
        (f"{d['file']}:{d['line']}:{d['column']}: " if d.get("file") else "") + str(d.get("message"))
        for d in errors[:MAX_SHOWN]
    ]
    more = f" (and {len(errors) - MAX_SHOWN} more)" if len(errors) > MAX_SHOWN else ""
    kept = [n["name"] for n in doc.get("networks") or [] if n.get("keptLastGood")]
    return fail(
        name,
        f"DEGRADED, {head}, {len(errors)} errors: {'; '.join(where)}{more}"
        + (f"; keeping the last good output of {', '.join(kept)}" if kept else ""),
        "fix the intents at those positions (`netcomp status` lists them all); the last good output is served "
        "meanwhile",
    )


def sriov_checks(nets: Sequence[NodeNetwork], settings: Settings) -> list[Check]:
    """Each SR-IOV resource a network names: a pool of netcomp.yaml's sriovPools (its VFs in sysfs), or a device
    plugin's resource (the kubelet's PodResources socket, and the resource registered with the kubelet)."""
    named = grouped(nets, lambda n: [r] if isinstance(r := n.meta.get("resourceName"), str) and r else [])
    if not named:
        return []
    k = settings.kubelet
    kubelet = Kubelet(k.podResourcesSocket, k.checkpoint, k.timeout)
    registered: set[str] = set()
    unreadable = ""  # why the checkpoint cannot be used: then who registered what is unknown
    try:
        registered = set(kubelet.read_checkpoint().registered)
    except NoCheckpoint:
        pass  # no device plugin ever registered with this kubelet: none is registered
    except HostError as e:
        unreadable = str(e)
    return [_resource(r, named[r], settings, kubelet, registered, unreadable) for r in sorted(named)]


def _resource(
    r: str, users: list[NodeNetwork], settings: Settings, kubelet: Kubelet, registered: set[str], unreadable: str
) -> Check:
    name = f"sriov:{r}"
    who = f"networks {', '.join(n.name for n in users)}"
    pool = settings.sriovPools.get(r)
    if pool is not None:
        if unreadable:
            return warn(
                name,
                f"a VF pool of netcomp.yaml (sriovPools); whether a device plugin also serves it is unknown: "
                f"{unreadable} ({who})",
                CHECKPOINT_FIX,
            )
        if r in registered:
            return fail(
                name,
                f"both a VF pool of netcomp.yaml (sriovPools) and a device plugin's resource the kubelet allocates "
                f"({kubelet.checkpoint}): the ADDs of {who} are refused",
                f"remove {r} from sriovPools (the device plugin's allocation is the one pods are counted by)",
            )
        vfs = vfpools.pool(Path(settings.sysfsRoot), pool.pfNames, pool.drivers)
        if not vfs:
            drivers = f" bound to {', '.join(pool.drivers)}" if pool.drivers else ""
            return fail(
                name,
                f"sriovPools: no VFs{drivers} on {', '.join(pool.pfNames)} ({who})",
                "make the VFs (echo N > /sys/class/net/<pf>/device/sriov_numvfs) and check pfNames and drivers",
            )
        return ok(name, f"sriovPools: {len(vfs)} VFs on {', '.join(pool.pfNames)} ({who})")
    sock = kubelet.socket
    try:
        is_socket = stat.S_ISSOCK(os.stat(sock).st_mode)
    except OSError:
        is_socket = False
    if not is_socket:
        return fail(
            name,
            f"a device plugin's resource, and the kubelet's PodResources socket {sock} is not there"
            + (f"; {unreadable}" if unreadable else "")
            + f" ({who})",
            "start the kubelet, or point kubelet.podResourcesSocket in netcomp.yaml at its socket",
        )
    if unreadable:
        return fail(
            name,
            f"a device plugin's resource, and {unreadable}: a pod's devices cannot be learnt from it while "
            f"PodResources cannot answer ({who})",
            CHECKPOINT_FIX,
        )
    if r not in registered:
        known = ", ".join(sorted(registered)) or "none"
        return fail(
            name,
            f"no device plugin registered {r} with the kubelet (its checkpoint {kubelet.checkpoint} lists: "
            f"{known}; {who})",
            "start the device plugin that serves it (for VFs: the SR-IOV NodeNetwork Device Plugin), or fix the "
            "networks' resourceName",
        )
    return ok(name, f"registered with the kubelet by a device plugin; PodResources at {sock} ({who})")


def runtime(settings: Settings) -> Check:
    """Whether the runtime's network is netcomp's: the first config file by name in its conf dir."""
    name = "runtime"
    conf_dir = Path(settings.runtimeConfDir)
    try:
        files = sorted(n for n in os.listdir(conf_dir) if n.endswith(CONF_SUFFIXES) and not (conf_dir / n).is_dir())
    except FileNotFoundError:
        files = []
    except OSError as e:
        return fail(name, f"cannot read {conf_dir}: {e.strerror}", "check the directory's permissions")
    first = files[0] if files else None
    if not settings.writeRuntimeConfig:
        picks = f"the runtime picks {conf_dir / first}" if first else f"{conf_dir} has no network config"
        return skip(name, f"netcomp writes no entry (writeRuntimeConfig: false); {picks}")
    ours = conf_dir / RUNTIME_CONF
    if RUNTIME_CONF not in files:
        return fail(
            name,
            f"no {ours}" + (f"; the runtime picks {conf_dir / first}" if first else ""),
            "the daemon writes it when it starts (`systemctl start netcomp`)",
        )
    if first != RUNTIME_CONF:
        assert first is not None  # ours is one of the files
        before = [f for f in files if f < RUNTIME_CONF]
        return fail(
            name,
            f"the runtime picks {conf_dir / first}, not {ours}: {', '.join(before)} "
            f"sort{'s' if len(before) == 1 else ''} first (containerd and CRI-O take the first file by name)",
            f"remove {', '.join(before)} from {conf_dir} (or give it a name that sorts after {RUNTIME_CONF})",
        )
    try:
        same = read_bounded(ours, 1 << 20) == runtime_config(settings)  # as the daemon compares it
    except OSError as e:
        return fail(name, f"cannot read {ours}: {e.strerror}", "check the file's permissions")
    if not same:
        return warn(name, f"{ours} is first, and not what this netcomp.yaml gives (another socket?)",
                    "restart netcomp: the daemon writes it again")  # fmt: skip
    return ok(name, f"{ours} is the runtime's network (first of {len(files)} in {conf_dir})")
