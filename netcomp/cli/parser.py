"""Declares the `netcomp` command line: every command, its options and its help."""

from __future__ import annotations

import argparse
import sys
from typing import Any, get_args

from netcomp import __version__
from netcomp.cli.exits import EX_USAGE
from netcomp.cli.schema import SCHEMAS
from netcomp.settings import CniVersion


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        print(f"netcomp: error: {message}", file=sys.stderr)
        raise SystemExit(EX_USAGE)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config", "-c", metavar="FILE", help="netcomp.yaml (default: /etc/netcomp/netcomp.yaml under --root)"
    )
    p.add_argument(
        "--root",
        metavar="DIR",
        default="/",
        help="resolve netcomp's own paths (config, intents, output, static files, socket, cache) under DIR; "
        "plugin dirs stay the host's",
    )
    p.add_argument("--output", "-o", choices=("text", "json"), default="text", help="how to report")
    p.add_argument("--debug", action="store_true", help="show tracebacks of internal errors")


def _state(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--state",
        metavar="FILE",
        help="the daemon's last good settings and networks (default: /var/lib/netcomp/state.json under --root)",
    )


def _compile_opts(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="intent files or dirs (dirs are layers: a later dir's file shadows the same name in an "
        "earlier one); default: the configured intentDirs",
    )
    p.add_argument(
        "--static-dir",
        action="append",
        metavar="DIR",
        help="look up static networkIDs here (repeatable; replaces staticDirs)",
    )
    p.add_argument(
        "--plugin-dir", action="append", metavar="DIR", help="CNI plugin dir (repeatable; replaces pluginDirs)"
    )
    p.add_argument("--cni-version", choices=get_args(CniVersion), help="cniVersion to emit")
    p.add_argument(
        "--strict",
        action="store_true",
        help="what only a node can show (a static networkID's file, a host device, a plugin) is an error, as on "
        "the node; without it, a warning (for CI, away from the node)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="netcomp",
        description="Compile network intents into CNI configurations and serve CNI delegation on a node.",
    )
    parser.add_argument("--version", action="version", version=f"netcomp {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for add in (_validate, _compile, _schema, _daemon, _status, _attachments, _ipam, _install_shim, _attach):
        add(sub)
    for add in (_doctor, _explain):
        add(sub)
    return parser


def _command(
    sub: Any, name: str, help: str, description: str | None = None, epilog: str | None = None, *, common: bool = True
) -> argparse.ArgumentParser:
    """A command's parser; every command answers --help and --version, and with `common` takes _common's options.
    `epilog`: the sections a man page has after its options (written as they are printed)."""
    fmt = argparse.RawDescriptionHelpFormatter if epilog else argparse.HelpFormatter
    p: argparse.ArgumentParser = sub.add_parser(
        name, help=help, description=description or help, epilog=epilog, formatter_class=fmt
    )
    p.add_argument("--version", action="version", version=f"netcomp {__version__}")
    if common:
        _common(p)
    return p


def _validate(sub: Any) -> None:
    v = _command(sub, "validate", "check intents; exit 65 on errors", "Load and check intents as compile would, "
                 "without writing anything.")  # fmt: skip
    _compile_opts(v)


def _compile(sub: Any) -> None:
    c = _command(
        sub,
        "compile",
        "compile intents into <network>.conflist files",
        "Compile intents into one CNI conflist per network. Writes only what changed (atomically), removes "
        "conflists of networks that are gone (only files netcomp wrote), and writes nothing at all when any intent "
        "has an error.",
    )
    _compile_opts(c)
    c.add_argument("--out", metavar="DIR", help="output dir (default: outputDir under --root)")
    mode = c.add_mutually_exclusive_group()
    mode.add_argument("--diff", action="store_true", help="print a unified diff of what would change; write nothing")
    mode.add_argument("--check", action="store_true", help="exit 1 if anything would change; write nothing")
    mode.add_argument("--dry-run", action="store_true", help="list what would change; write nothing")


def _schema(sub: Any) -> None:
    s = _command(sub, "schema", "print the JSON Schema of intents (or of netcomp.yaml)", common=False)
    s.add_argument("which", nargs="?", choices=SCHEMAS, default="network", help="which schema (default network)")


def _daemon(sub: Any) -> None:
    d = _command(
        sub,
        "daemon",
        "run the host daemon in the foreground",
        "Compile the intent dirs, write the compiled networks, and serve CNI delegation on the socket. SIGHUP "
        "re-reads netcomp.yaml and every intent (a broken edit keeps the last good output); SIGTERM drains requests "
        "in flight and stops.",
    )
    d.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    _state(d)


def _status(sub: Any) -> None:
    _state(_command(sub, "status", "ask the running daemon how it is"))


def _attachments(sub: Any) -> None:
    _command(
        sub,
        "attachments",
        "list the containers attached and their networks",
        "Every container the daemon has attached (from its cache): namespace, and per network the interface, "
        "addresses and MAC; and any cache entry that cannot be read.",
    )


def _ipam(sub: Any) -> None:
    i = _command(
        sub,
        "ipam",
        "who holds which address of the networks netcomp gives addresses to",
        "show: per network with `ipam: {type: cluster}` its pool, how many addresses are in use and free, its "
        "blocks (which node holds each, how many addresses it uses and lent), and every address in use (node, pod or "
        "container, interface). gc: free now the addresses of other nodes whose node or pod is gone, and the empty "
        "blocks of nodes that are gone (a pod that still exists on its node keeps its address), and remove the "
        "EndpointSlices of other nodes whose Node or pods are gone.",
    )
    _state(i)
    i.add_argument("action", choices=("show", "gc"))
    i.add_argument("network", nargs="?", help="only this network (show)")


def _install_shim(sub: Any) -> None:
    i = _command(
        sub,
        "install-shim",
        "install the CNI plugin runtimes exec (the .deb does this itself)",
        "Install the CNI plugin runtimes exec as <cni-bin-dir>/netcomp, for a node where netcomp is installed "
        "without the Debian package: the compiled shim, built with the node's `cc`, when there is one; else the "
        "Python shim (written into --shim-dir, byte-compiled for /usr/bin/python3, behind a launcher). Both do the "
        "same on the wire; the compiled one starts in well under a millisecond.",
        common=False,
    )
    i.add_argument(
        "--cni-bin-dir",
        default="/opt/cni/bin",
        metavar="DIR",
        help="the runtime's CNI plugin dir (default %(default)s)",
    )
    i.add_argument(
        "--shim-dir",
        default="/usr/local/lib/netcomp/shim",
        metavar="DIR",
        help="where the Python shim goes, when that is the one installed (default %(default)s)",
    )
    i.add_argument("--python", action="store_true", help="install the Python shim even where there is a C compiler")


def _attach(sub: Any) -> None:
    for verb, text in (
        ("attach", "join a running container to a network"),
        ("detach", "take a network out of a running container"),
    ):
        a = _command(sub, verb, text, text + " (through the daemon's /delegate endpoint)")
        a.add_argument("container", metavar="CONTAINER", help="the container ID")
        a.add_argument("netns", metavar="NETNS", help="path of the container's network namespace (ignored by detach)")
        a.add_argument("network", metavar="NETWORK", help="the network's name")
        a.add_argument("--ifname", metavar="NAME", help="interface name (default: the network's prefix and an index)")
        a.add_argument(
            "--runtime-ifname",
            default="eth0",
            metavar="NAME",
            help="CNI_IFNAME of the container's ADD, which keys its cache entry (default eth0)",
        )
        a.add_argument(
            "--pod",
            metavar="NAMESPACE/NAME",
            help="the container's pod: a network of a device plugin's resource takes one of the devices the kubelet "
            "gave it that no attachment uses",
        )


DOCTOR_EPILOG = """\
checks (one line each: ok, warn, FAIL or skip; what was found; for a failure,
the fix):
  config          netcomp.yaml loads
  daemon          the daemon answers on its socket: generation, networks,
                  degraded intents with their positions
  networks        the compiled networks the node serves (outputDir)
  kernel:KIND     the kernel makes a KIND link (macvlan, ipvlan, 8021q,
                  vxlan, bridge: those the networks need), tried in a
                  network namespace made for the test and gone with it
  device:NAME     a host device a network names exists
  hostlink:NAME   a VLAN/VXLAN master a network names: there with the right
                  kind, or its parent is (the first ADD makes it)
  plugin:TYPE     a CNI plugin a network runs: found in pluginDirs,
                  executable, and speaking (VERSION) the cniVersion of every
                  network that runs it
  sriov:RESOURCE  a network's SR-IOV resource: the VFs of its sriovPools
                  pool, or the kubelet's PodResources socket and the device
                  plugin registered with the kubelet (its checkpoint)
  runtime         netcomp's entry in the runtime's conf dir is the file the
                  runtime picks: the first by name, as containerd and CRI-O
                  choose
  apiserver       the API server answers, with the kubeconfig netcomp.yaml
                  names
  rbac            every verb of the packaged ClusterRole that netcomp needs
                  with these settings is granted (SelfSubjectAccessReview)
  node            the Node object named nodeName exists

exit status:
  0   every check passed (warnings allowed): usable as a readiness gate
  1   a check failed (a broken netcomp.yaml too: the config line says where,
      and the daemon's last good settings are checked)

examples:
  netcomp doctor
  netcomp doctor -o json | jq '.checks[] | select(.status == "fail")'
"""

EXPLAIN_EPILOG = """\
what it shows (the running daemon answers: it plans with the ADD's own code,
the networks it serves and the pods it follows; nothing is claimed, made or
run):
  - each network the pod or container joins, and why: the node's
    defaultNetwork, the pod's default-network annotation, an element of
    k8s.v1.cni.cncf.io/networks or of DANM's interfaces, or CNI_ARGS
  - each interface name, and why: the runtime's CNI_IFNAME, an element's own
    interface, Multus's net<position>, DANM's container_prefix (or eth) and
    position, a network's interfacePrefix and index
  - the addresses asked for, and where the others come from (netcomp's
    cluster pool, with how many are free, or the IPAM plugin); the device the
    kubelet gave the pod, for a device plugin's network
  - every refusal an ADD would meet, in the ADD's own words
  - for a container attached on this node: its record (interfaces, addresses,
    devices) beside what its pod's annotation asks now, and what a hot-plug
    would attach or detach

exit status:
  0   the ADD (and a running pod's annotation as it is now) would be taken
  1   it would be refused
  69  the daemon does not answer

examples:
  netcomp explain --pod team-a/cnf
  netcomp explain --container 5f0c2a...
  netcomp explain --cni-args 'NETCOMP_NETWORKS=storage,backup@bk0'
"""


def _doctor(sub: Any) -> None:
    d = _command(
        sub,
        "doctor",
        "check that this node can serve its networks; exit 1 on any failing check",
        "Check this node and the networks it serves, one line per check: the daemon,\n"
        "the kernel, the host devices, the CNI plugins, SR-IOV, the runtime's conf\n"
        "dir, and with a cluster the API server, RBAC and the Node object. The\n"
        "checks that need the daemon say so when it does not answer; the others run\n"
        "without it.",
        DOCTOR_EPILOG,
    )
    _state(d)
    d.add_argument(
        "--rbac",
        metavar="FILE",
        help="the ClusterRole manifest whose verbs netcomp needs (default: the packaged "
        "/usr/share/netcomp/kubernetes/rbac.yaml)",
    )


def _explain(sub: Any) -> None:
    e = _command(
        sub,
        "explain",
        "say which networks a pod or container joins and why (asks the daemon)",
        "Explain, before or after a pod starts, which networks it joins, its\n"
        "interface names, its addresses and devices, and every refusal its ADD\n"
        "would meet, in the ADD's words.",
        EXPLAIN_EPILOG,
    )
    _state(e)
    which = e.add_mutually_exclusive_group(required=True)
    which.add_argument("--pod", metavar="NAMESPACE/NAME", help="a pod (attached on this node or not yet)")
    which.add_argument("--container", metavar="ID", help="a container attached on this node (its sandbox ID)")
    which.add_argument(
        "--cni-args",
        metavar="ARGS",
        help="a runtime's CNI_ARGS (NETCOMP_NETWORKS=..., K8S_POD_NAMESPACE=...; a runtime without Kubernetes)",
    )
    e.add_argument(
        "--ifname", default="eth0", metavar="NAME", help="with --cni-args: the runtime's CNI_IFNAME (default eth0)"
    )
