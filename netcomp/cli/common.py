"""What the daemon's commands share: the settings (resolved under --root) and where the last good state is."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TextIO

from netcomp import paths, report
from netcomp.errors import IntentError
from netcomp.paths import Root
from netcomp.settings import Settings, load_settings


def settings(args: argparse.Namespace) -> Settings:
    return load_settings(args.config, Root(Path(args.root))).rooted(Root(Path(args.root)))


def state_path(args: argparse.Namespace) -> Path:
    return Path(args.state) if getattr(args, "state", None) else Root(Path(args.root))(paths.STATE_FILE)


def running_settings(args: argparse.Namespace, err: TextIO) -> Settings:
    """The settings of the commands that ask the daemon: netcomp.yaml's, or, when it is broken (said on `err`),
    the daemon's last good ones, which it runs with meanwhile (their socket is the one it serves)."""
    try:
        return settings(args)
    except IntentError as e:
        from netcomp.daemon.state import StateFile

        saved = StateFile(state_path(args)).load()
        found = saved.settings if saved is not None else Settings().rooted(Root(Path(args.root)))
        print(report.format_all(e.diagnostics), file=err)
        print(
            f"netcomp: netcomp.yaml is broken; asking the daemon on {found.socket} "
            f"({'its last good settings' if saved is not None else 'the default'})",
            file=err,
        )
        return found
