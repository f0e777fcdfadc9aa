"""Checks the node's side of its networks: the compiled networks it serves, the kernel features, host devices and
VLAN/VXLAN masters they need, and the CNI plugins they run (found, executable, speaking their cniVersion)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from netcomp.cni import spec as cnispec
from netcomp.cni.invoke import Runner, find_plugin
from netcomp.compiler.marker import is_owned
from netcomp.compiler.output import MAX_BYTES
from netcomp.compiler.render import host_devices
from netcomp.doctor.checks import Check, fail, ok, skip, warn
from netcomp.errors import DelegateError, HostError
from netcomp.fsutil import read_bounded
from netcomp.host import probe
from netcomp.policy import nft
from netcomp.settings import Settings

# The kernel feature each plugin type needs to make its link (the others make a veth, or move a device).
PLUGIN_KERNEL = {"macvlan": "macvlan", "ipvlan": "ipvlan", "vlan": "8021q", "bridge": "bridge"}
# ... and each kind of host link (netcomp.hostLink) the daemon makes.
LINK_KERNEL = {"vlan": "8021q", "vxlan": "vxlan"}
KERNEL_CONFIG = {
    "macvlan": "CONFIG_MACVLAN",
    "ipvlan": "CONFIG_IPVLAN",
    "8021q": "CONFIG_VLAN_8021Q",
    "vxlan": "CONFIG_VXLAN",
    "bridge": "CONFIG_BRIDGE",
}


@dataclass(frozen=True)
class NodeNetwork:
    """A compiled network as the daemon serves it (its conflist, with netcomp's own block)."""

    name: str
    conflist: Mapping[str, Any]

    @property
    def meta(self) -> Mapping[str, Any]:
        m = self.conflist.get("netcomp")
        return m if isinstance(m, dict) else {}

    @property
    def cni_version(self) -> str:
        return str(self.conflist.get("cniVersion") or cnispec.DEFAULT_VERSION)

    @property
    def plugins(self) -> list[str]:
        return cnispec.plugin_types(dict(self.conflist))

    @property
    def host_link(self) -> Mapping[str, Any] | None:
        link = self.meta.get("hostLink")
        return link if isinstance(link, dict) and link.get("name") else None

    def kernel(self) -> set[str]:
        need = {PLUGIN_KERNEL[p] for p in self.plugins if p in PLUGIN_KERNEL}
        link = self.host_link
        if link is not None and link.get("kind") in LINK_KERNEL:
            need.add(LINK_KERNEL[str(link["kind"])])
        return need

    def devices(self) -> set[str]:
        """The host devices it names (render.host_devices); the host link itself is hostlink's check."""
        return host_devices(self.conflist)


def served(settings: Settings) -> tuple[list[NodeNetwork], Check]:
    """The networks in outputDir (the files netcomp wrote: the daemon's last good output of each)."""
    out_dir = Path(settings.outputDir)
    try:
        names = sorted(n for n in os.listdir(out_dir) if n.endswith(".conflist") and not n.startswith("."))
    except FileNotFoundError:
        names = []
    except OSError as e:
        return [], fail("networks", f"cannot read {out_dir}: {e.strerror}", "check the directory's permissions")
    nets = []
    for name in names:
        try:
            data = read_bounded(out_dir / name, MAX_BYTES)
            if is_owned(data):
                nets.append(NodeNetwork(name[: -len(".conflist")], cnispec.loads(data)))
        except (OSError, ValueError):
            continue
    if not nets:
        return [], fail(
            "networks",
            f"no compiled networks in {out_dir}",
            "the daemon compiles them when it starts (`systemctl start netcomp`); `netcomp validate` shows what "
            "is wrong with the intents",
        )
    shown = ", ".join(n.name for n in nets[:8]) + (f" and {len(nets) - 8} more" if len(nets) > 8 else "")
    return nets, ok("networks", f"{len(nets)} compiled in {out_dir}: {shown}")


def grouped(nets: Sequence[NodeNetwork], keys: Callable[[NodeNetwork], Iterable[str]]) -> dict[str, list[NodeNetwork]]:
    """The networks under each key they have (a kernel feature, a device, a plugin), in their order."""
    out: dict[str, list[NodeNetwork]] = {}
    for n in nets:
        for key in keys(n):
            out.setdefault(key, []).append(n)
    return out


def _users(nets: Iterable[NodeNetwork]) -> str:
    listed = sorted({n.name for n in nets})
    return "networks " + ", ".join(listed[:5]) + (f" and {len(listed) - 5} more" if len(listed) > 5 else "")


def kernel(nets: Sequence[NodeNetwork]) -> list[Check]:
    """Each kernel feature the networks need, tried (host/probe.py): a line per feature."""
    need = grouped(nets, NodeNetwork.kernel)
    if not need:
        return []
    kinds = sorted(need)
    try:
        got = probe.kernel_kinds(kinds)
    except HostError as e:
        return [warn(f"kernel:{k}", f"not tried: {e}", "run netcomp doctor as root") for k in kinds]
    out = []
    for k in kinds:
        users = _users(need[k])
        if got[k] is None:
            out.append(ok(f"kernel:{k}", f"the kernel makes {k} links ({users})"))
            continue
        fix = f"load the module (`modprobe {k}`) or run a kernel built with {KERNEL_CONFIG[k]}"
        out.append(fail(f"kernel:{k}", f"the kernel cannot make {k} links: {got[k]} ({users} need them)", fix))
    return out


def devices(nets: Sequence[NodeNetwork], links: Mapping[str, str | None]) -> list[Check]:
    """Each host device the networks name exists in this network namespace."""
    out = []
    for dev, users in sorted(grouped(nets, NodeNetwork.devices).items()):
        if dev in links:
            out.append(ok(f"device:{dev}", f"present ({links[dev] or 'a device'}; {_users(users)})"))
            continue
        fix = "fix hostDevice in the networks' intents, or bring the device up (`ip link`)"
        out.append(fail(f"device:{dev}", f"no such device on this node ({_users(users)} name it)", fix))
    return out


def host_links(nets: Sequence[NodeNetwork], links: Mapping[str, str | None]) -> list[Check]:
    """Each VLAN/VXLAN master the networks name: there with the right kind, or made by the first ADD."""
    out = []
    for name, users in sorted(grouped(nets, lambda n: [str(n.host_link["name"])] if n.host_link else []).items()):
        link = users[0].host_link or {}  # the first network's, as it names the link
        kind, parent = str(link.get("kind")), str(link.get("link"))
        what = f"{kind} over {parent}, {_users(users)}"
        if name not in links:
            out.append(ok(f"hostlink:{name}", f"not there yet: the first ADD makes it ({what})"))
        elif links[name] != kind:
            found = f"a link of that name is {links[name] or 'a device'}, not {kind} ({what})"
            fix = f"remove or rename the link {name}, or change the networks' vlan/vxlan"
            out.append(fail(f"hostlink:{name}", f"{found}: netcomp never touches it, and the networks' ADDs fail", fix))
        else:
            out.append(ok(f"hostlink:{name}", f"present ({what})"))
    return out


def plugins(nets: Sequence[NodeNetwork], settings: Settings) -> list[Check]:
    """Each plugin the networks run: found in pluginDirs, executable, speaking (VERSION) their cniVersions."""
    users = grouped(nets, lambda n: n.plugins)
    runner = Runner(settings.pluginDirs, timeout=min(settings.pluginTimeout, 10.0))
    return [_plugin(p, users[p], runner, settings.pluginDirs) for p in sorted(users)]


def nftables(settings: Settings, path: str = nft.NFT) -> list[Check]:
    """nft, which writes MultiNetworkPolicy's rules in pods' namespaces: there and running. Only on a node that
    follows a cluster and enforces them (kubernetes.policies)."""
    if settings.kubernetes is None or not settings.kubernetes.policies:
        return []
    try:
        return [ok("nftables", f"{nft.version(nft=path)} at {path}")]
    except HostError as e:
        found = f"{e}: the ADD of a pod a MultiNetworkPolicy selects fails"
        return [fail("nftables", found, "apt-get install nftables (the netcomp package depends on it)")]


def _plugin(ptype: str, nets: Sequence[NodeNetwork], runner: Runner, dirs: Sequence[str]) -> Check:
    name = f"plugin:{ptype}"
    who = _users(nets)
    try:
        path = find_plugin(ptype, dirs)
    except DelegateError:
        return fail(
            name,
            f"not found (or not executable) in {', '.join(dirs)} ({who} run it)",
            "install it (Debian: containernetworking-plugins) or add its dir to pluginDirs",
        )
    try:
        answer = runner.version(ptype)
    except DelegateError as e:
        return fail(name, f"{path} does not answer VERSION: {e.full_msg}", "reinstall the plugin")
    spoken = answer.get("supportedVersions")
    if not isinstance(spoken, list) or not spoken:
        return warn(name, f"{path} names no supportedVersions in its VERSION answer ({who})")
    wrong = sorted({n.cni_version for n in nets if n.cni_version not in spoken})
    if wrong:
        bad = sorted(n.name for n in nets if n.cni_version in wrong)
        return fail(
            name,
            f"{path} speaks CNI {', '.join(spoken)}, not {', '.join(wrong)} (the cniVersion of {', '.join(bad)})",
            "give those networks a cniVersion the plugin speaks (netcomp.yaml cniVersion, or the static file's), "
            "or install a plugin that speaks it",
        )
    return ok(name, f"{path}, speaks CNI {spoken[0]} to {spoken[-1]} ({who})")


def no_links(nets: Sequence[NodeNetwork]) -> list[Check]:
    """The device and host link checks, when the links of the node cannot be listed."""
    return [skip("device:*", "the node's links cannot be listed")] if nets else []
