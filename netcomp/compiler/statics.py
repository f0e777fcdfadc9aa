"""Static networks' CNI files (`type: static`, `networkID`): found in the static dirs (first match wins, each dir
listed once per compile), parsed and verified once per version of the file (its stat)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from netcomp.cni import spec as cnispec
from netcomp.cni.spec import DEFAULT_VERSION
from netcomp.compiler.backends.backend import StaticConfig
from netcomp.compiler.inputs import STATIC_SUFFIXES, StatKey, stat_key
from netcomp.compiler.render import NODE_ONLY
from netcomp.errors import Diagnostic, SourceLocation
from netcomp.fsutil import read_bounded
from netcomp.intent.intent import Intent

MAX_STATIC_BYTES = 4 << 20  # a CNI file is a few KiB; the shim takes a config of up to 4 MiB too
Listing = dict[str, set[str]]  # a static dir's file names, listed once per compile


class StaticFiles:
    def __init__(self, dirs: Sequence[str]) -> None:
        self.dirs = list(dirs)
        self._parsed: dict[str, tuple[StatKey, StaticConfig | Diagnostic]] = {}
        self._version_at: dict[str, tuple[int, int]] = {}  # where each file says its cniVersion

    def version_warning(
        self, intent: Intent, network_id: str, static: StaticConfig, speaks: Callable[[str], Sequence[str] | None]
    ) -> Diagnostic | None:
        """A warning when the file's cniVersion is one that a plugin it names says it does not speak (its
        VERSION, `speaks`; None: not installed here, or it does not say): every ADD of the network is refused
        then (the daemon checks again before anything runs), and so a rollback's DEL would be."""
        version = str(static.conflist.get("cniVersion", DEFAULT_VERSION))
        for ptype in cnispec.plugin_types(static.conflist):
            supported = speaks(ptype)
            if supported is not None and version not in supported:
                line, col = self._version_at.get(static.path, (0, 0))
                where = f"{static.path}:{line}:{col}" if line else static.path
                return intent.diagnostic(
                    f"static networkID {network_id!r}: {where}: cniVersion {version} is not one plugin {ptype!r} "
                    f"speaks ({', '.join(supported)}): every ADD of this network will be refused",
                    ("spec", "networkID"),
                    severity="warning",
                )
        return None

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
        self, intent: Intent, network_id: str, listing: Listing, *, offline: bool = False
    ) -> tuple[object, StaticConfig | None, Diagnostic | None]:
        """The intent's static file: (its stat key, the config, None), or what is wrong with it (the key None
        when there is no readable file). `offline`: away from the node (CI), a file that is not there is a
        warning (the network is left out): the node's static dirs are not here."""
        at = ("spec", "networkID")
        path = self.find(network_id, listing)
        if path is None:
            why = f"static networkID {network_id!r}: no {network_id}.conflist, .conf or .json in {', '.join(self.dirs)}"
            why += f" (left out: {NODE_ONLY})" if offline else ""
            return None, None, intent.diagnostic(why, at, severity="warning" if offline else "error")
        name = str(path)
        try:
            key = stat_key(os.stat(path))
        except OSError as e:
            return None, None, intent.diagnostic(f"cannot read static file {name}: {e.strerror}", at)
        cached = self._parsed.get(name)
        if cached is None or cached[0] != key:
            cached = (key, self._parse(path))
            self._parsed[name] = cached
        value = cached[1]
        if isinstance(value, Diagnostic):
            why = f"static networkID {network_id!r}: {value.location}: {value.message}"
            return key, None, intent.diagnostic(why, at)
        return key, value, None

    def _parse(self, path: Path) -> StaticConfig | Diagnostic:
        name = str(path)
        try:
            raw = read_bounded(path, MAX_STATIC_BYTES)
            conf = cnispec.to_conflist(cnispec.parse_json(raw))
            self._version_at[name] = _key_position(raw, b'"cniVersion"')
        except OSError as e:
            return Diagnostic(f"cannot read: {e.strerror}", SourceLocation(name))
        except cnispec.ConfigProblem as p:
            return Diagnostic(p.message, SourceLocation(name, p.line, p.column))
        problems = cnispec.verify_conflist(conf, check_name=False)
        if problems:
            return Diagnostic("; ".join(problems), SourceLocation(name))
        return StaticConfig(name, conf)


def _key_position(raw: bytes, key: bytes) -> tuple[int, int]:
    """1-based line and column of the first `key` followed by a colon in a JSON text ((0, 0): none)."""
    at = raw.find(key)
    while at >= 0 and not raw[at + len(key) :].lstrip().startswith(b":"):
        at = raw.find(key, at + 1)
    if at < 0:
        return 0, 0
    line_start = raw.rfind(b"\n", 0, at) + 1
    return raw.count(b"\n", 0, at) + 1, len(raw[line_start:at].decode("utf-8", "replace")) + 1
