"""Runs `netcomp install-shim`: installs the CNI plugin runtimes exec on a node without the Debian package."""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path
from typing import TextIO

from netcomp.cli.exits import EX_CANTCREAT, EX_OK
from netcomp.shim import install as shimlaunch


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """The compiled shim where the node has a C compiler that builds it, else the Python shim; says which."""
    plugin = Path(args.cni_bin_dir) / "netcomp"
    cc = None if args.python else shimlaunch.find_cc()
    why = "asked for" if args.python else "no C compiler (cc) on PATH"
    try:
        if cc is not None:
            try:
                shimlaunch.install_compiled(plugin, cc)
            except subprocess.CalledProcessError as e:
                lines = (e.stderr or "").strip().splitlines()
                why = f"{cc} could not build the compiled one: {lines[0] if lines else f'exit status {e.returncode}'}"
            else:
                out.write(f"installed {plugin}: the compiled shim, built with {cc}\n")
                return EX_OK
        shimlaunch.install(plugin, Path(args.shim_dir))
    except (OSError, ValueError, subprocess.SubprocessError) as e:
        print(f"netcomp: cannot install the shim: {e}", file=err)
        return EX_CANTCREAT
    out.write(f"installed {plugin}: the Python shim ({Path(args.shim_dir) / shimlaunch.MODULE}); {why}\n")
    return EX_OK
