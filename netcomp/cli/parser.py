"""The `netcomp` command line: every command, its options and its help."""

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
        "--config",
        "-c",
        metavar="FILE",
        help="netcomp.yaml (default: /etc/netcomp/netcomp.yaml under --root)",
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
        "--plugin-dir",
        action="append",
        metavar="DIR",
        help="CNI plugin dir (repeatable; replaces pluginDirs)",
    )
    p.add_argument("--cni-version", choices=get_args(CniVersion), help="cniVersion to emit")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="netcomp",
        description="Compile network intents into CNI configurations and serve CNI delegation on a node.",
    )
    parser.add_argument("--version", action="version", version=f"netcomp {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for add in (_validate, _compile, _schema, _daemon, _status, _attachments, _ipam, _install_shim, _attach):
        add(sub)
    return parser


def _command(sub: Any, name: str, help: str, description: str | None = None) -> argparse.ArgumentParser:
    """A command's parser; every command answers --help and --version."""
    p: argparse.ArgumentParser = sub.add_parser(name, help=help, description=description or help)
    p.add_argument("--version", action="version", version=f"netcomp {__version__}")
    return p


def _validate(sub: Any) -> None:
    v = _command(sub, "validate", "check intents; exit 65 on errors", "Load and check intents as compile would, "
                 "without writing anything.")  # fmt: skip
    _common(v)
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
    _common(c)
    _compile_opts(c)
    c.add_argument("--out", metavar="DIR", help="output dir (default: outputDir under --root)")
    mode = c.add_mutually_exclusive_group()
    mode.add_argument("--diff", action="store_true", help="print a unified diff of what would change; write nothing")
    mode.add_argument("--check", action="store_true", help="exit 1 if anything would change; write nothing")
    mode.add_argument("--dry-run", action="store_true", help="list what would change; write nothing")


def _schema(sub: Any) -> None:
    s = _command(sub, "schema", "print the JSON Schema of intents (or of netcomp.yaml)")
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
    _common(d)
    d.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    _state(d)


def _status(sub: Any) -> None:
    st = _command(sub, "status", "ask the running daemon how it is")
    _common(st)
    _state(st)


def _attachments(sub: Any) -> None:
    at = _command(
        sub,
        "attachments",
        "list the containers attached and their networks",
        "Every container the daemon has attached (from its cache): namespace, and per network the interface, "
        "addresses and MAC; and any cache entry that cannot be read.",
    )
    _common(at)


def _ipam(sub: Any) -> None:
    i = _command(
        sub,
        "ipam",
        "who holds which address of the networks netcomp gives addresses to",
        "show: per network with `ipam: {type: cluster}` its pool, how many addresses are in use and free, its "
        "blocks (which node holds each, how many addresses it uses and lent), and every address in use (node, pod or "
        "container, interface). gc: free now the addresses of other nodes whose node or pod is gone, and the empty "
        "blocks of nodes that are gone (a pod that still exists on its node keeps its address).",
    )
    _common(i)
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
        _common(a)
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
