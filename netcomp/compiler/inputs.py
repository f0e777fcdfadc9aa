"""Which files a compile reads: the intent files of layered dirs, and the stat key that says a file is as it
was. Kept apart from compiler.py so that a start whose plan comes from the plan cache (pipeline.py) lists and
stats its inputs without importing the compiler (the intent models, jinja2)."""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from pathlib import Path

from netcomp.errors import Diagnostic, IntentError, SourceLocation

INTENT_SUFFIXES = (".yaml", ".yml")
STATIC_SUFFIXES = (".conflist", ".conf", ".json")
StatKey = bytes  # mtime and ctime (ns), size, inode packed: smaller than a tuple of four ints
NO_KEY: StatKey = b""  # a file that could not be read
_KEY = struct.Struct("=qqQQ")


def stat_key(st: os.stat_result) -> StatKey:
    return _KEY.pack(st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino)


def discover(layers: Sequence[Path]) -> list[Path]:
    """Intent files of layered dirs (or plain files): same file name in a later dir shadows an earlier one
    (netplan's rule); the result is sorted by file name, so load order never depends on the dir. Missing layers
    are empty."""
    chosen: dict[str, Path] = {}
    for layer in layers:
        if layer.is_dir():
            try:
                names = sorted(os.listdir(layer))
            except OSError as e:
                raise IntentError(
                    [Diagnostic(f"cannot list directory: {e.strerror}", SourceLocation(str(layer)))]
                ) from None
            for name in names:
                if name.startswith(".") or not name.endswith(INTENT_SUFFIXES):
                    continue
                chosen[name] = layer / name
        elif layer.exists():
            chosen[layer.name] = layer
        # A configured layer that does not exist is simply empty (most nodes have no /run/netcomp/networks.d).
    return [chosen[n] for n in sorted(chosen)]
