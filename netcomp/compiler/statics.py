"""Static networks' CNI files (`type: static`, `networkID`): found in the static dirs (first match wins, each dir
listed once per compile), parsed and verified once per version of the file (its stat)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from netcomp.cni import spec as cnispec
from netcomp.compiler.backends.backend import StaticConfig
from netcomp.compiler.inputs import STATIC_SUFFIXES, StatKey, stat_key
from netcomp.errors import Diagnostic, SourceLocation
from netcomp.fsutil import read_bounded
from netcomp.intent.intent import Intent

MAX_STATIC_BYTES = 4 << 20  # a CNI file is a few KiB; the shim takes a config of up to 4 MiB too
Listing = dict[str, set[str]]  # a static dir's file names, listed once per compile


class StaticFiles:
    def __init__(self, dirs: Sequence[str]) -> None:
        self.dirs = list(dirs)
        self._parsed: dict[str, tuple[StatKey, StaticConfig | Diagnostic]] = {}

    def find(self, network_id: str, listing: Listing) -> Path | None:
        for d in self.dirs:
            present = listing.get(d)
            if present is None:
                try:
                    present = listing[d] = set(os.listdir(d))
                except OSError:
                    present = listing[d] = set()
            for suffix in STATIC_SUFFIXES:
                if network_id + suffix in present:
                    return Path(d) / (network_id + suffix)
        return None

    def load(
        self, intent: Intent, network_id: str, listing: Listing
    ) -> tuple[object, StaticConfig | None, Diagnostic | None]:
        """The intent's static file: (its stat key, the config, None), or what is wrong with it (the key None
        when there is no readable file)."""
        path = self.find(network_id, listing)
        if path is None:
            dirs = ", ".join(self.dirs)
            return (
                None,
                None,
                intent.diagnostic(
                    f"static networkID {network_id!r}: no {network_id}.conflist, .conf or .json in {dirs}",
                    ("spec", "networkID"),
                ),
            )
        name = str(path)
        try:
            key = stat_key(os.stat(path))
        except OSError as e:
            return (
                None,
                None,
                intent.diagnostic(f"cannot read static file {name}: {e.strerror}", ("spec", "networkID")),
            )
        cached = self._parsed.get(name)
        if cached is None or cached[0] != key:
            cached = (key, self._parse(path))
            self._parsed[name] = cached
        value = cached[1]
        if isinstance(value, Diagnostic):
            return (
                key,
                None,
                intent.diagnostic(
                    f"static networkID {network_id!r}: {value.location}: {value.message}", ("spec", "networkID")
                ),
            )
        return key, value, None

    @staticmethod
    def _parse(path: Path) -> StaticConfig | Diagnostic:
        name = str(path)
        try:
            conf = cnispec.to_conflist(cnispec.parse_json(read_bounded(path, MAX_STATIC_BYTES)))
        except OSError as e:
            return Diagnostic(f"cannot read: {e.strerror}", SourceLocation(name))
        except cnispec.ConfigProblem as p:
            return Diagnostic(p.message, SourceLocation(name, p.line, p.column))
        problems = cnispec.verify_conflist(conf, check_name=False)
        if problems:
            return Diagnostic("; ".join(problems), SourceLocation(name))
        return StaticConfig(name, conf)
