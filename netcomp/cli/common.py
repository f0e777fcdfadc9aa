"""What the daemon's commands share: the settings (resolved under --root) and where the last good state is."""

from __future__ import annotations

import argparse
from pathlib import Path

from netcomp import paths
from netcomp.paths import Root
from netcomp.settings import Settings, load_settings


def settings(args: argparse.Namespace) -> Settings:
    return load_settings(args.config, Root(Path(args.root))).rooted(Root(Path(args.root)))


def state_path(args: argparse.Namespace) -> Path:
    return Path(args.state) if getattr(args, "state", None) else Root(Path(args.root))(paths.STATE_FILE)
