"""Finds what the daemon's commands share: the settings (resolved under --root) and the last good state."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Running:
    """The settings the daemon runs with, as a command that asks it finds them: netcomp.yaml's, or, with it broken
    (`broken`, its errors), the daemon's last good ones (`last_good`), else the defaults."""

    settings: Settings
    broken: IntentError | None = None
    last_good: bool = False


def running(args: argparse.Namespace) -> Running:
    try:
        return Running(settings(args))
    except IntentError as e:
        from netcomp.daemon.state import StateFile

        saved = StateFile(state_path(args)).load()
        if saved is not None:
            return Running(saved.settings, e, last_good=True)
        return Running(Settings().rooted(Root(Path(args.root))), e)


def running_settings(args: argparse.Namespace, err: TextIO) -> Settings:
    """The settings of the commands that ask the daemon (`running`); a broken netcomp.yaml is said on `err`, with
    the socket asked (the one the daemon serves)."""
    r = running(args)
    if r.broken is not None:
        print(report.format_all(r.broken.diagnostics), file=err)
        print(
            f"netcomp: netcomp.yaml is broken; asking the daemon on {r.settings.socket} "
            f"({'its last good settings' if r.last_good else 'the default'})",
            file=err,
        )
    return r.settings
