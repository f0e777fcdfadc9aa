"""What ADD used and got, per container: one JSON file per container, written atomically before ADD answers.
DEL and CHECK use it, never today's intents (an intent edited or removed since must not change what DEL does)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from netcomp.errors import HostError
from netcomp.fsutil import atomic_write

log = logging.getLogger("netcomp.cache")


@dataclass
class Attachment:
    """One network of a container: the exact conflist used, the interface name, and the result."""

    network: str
    ifname: str
    conflist: dict[str, Any]
    result: dict[str, Any] | None = None
    args: str = ""  # CNI_ARGS given to the delegates
    capability_args: dict[str, Any] = field(default_factory=dict)


@dataclass
class Entry:
    container_id: str
    netns: str
    ifname: str  # the runtime's CNI_IFNAME
    cni_version: str
    attachments: list[Attachment] = field(default_factory=list)

    def to_json(self) -> bytes:
        # orjson: the stdlib's indenting encoder is pure Python, and this is on the path of every ADD.
        try:
            return orjson.dumps(self, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)
        except orjson.JSONEncodeError:  # what orjson refuses (an integer over 64 bits in a plugin's result)
            return (json.dumps(asdict(self), indent=2) + "\n").encode()

    @staticmethod
    def from_json(data: bytes) -> Entry:
        d = json.loads(data)
        atts = [Attachment(**a) for a in d.pop("attachments")]
        return Entry(**d, attachments=atts)


class Cache:
    """The cache dir (0700). File names are a hash of the container ID and the runtime's ifname, so no ID can
    name a path (CNI: a container is identified by CNI_CONTAINERID plus CNI_IFNAME)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path(self, container_id: str, ifname: str) -> Path:
        h = hashlib.sha256(f"{container_id}\0{ifname}".encode()).hexdigest()[:32]
        return self.directory / f"{h}.json"

    def load(self, container_id: str, ifname: str) -> Entry | None:
        """The container's entry; None when it has none. An entry that cannot be read is the node's problem
        (HostError naming the file), never a reason to forget it: it stays for the operator to look at."""
        path = self.path(container_id, ifname)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise HostError(f"cannot read the attachment cache entry {path}: {e.strerror}") from None
        try:
            return Entry.from_json(data)
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise HostError(
                f"the attachment cache entry {path} of container {container_id} on {ifname} cannot be read "
                f"({type(e).__name__}: {e}); it is left as it is: restore it, or undo what it records by hand "
                "and remove it"
            ) from None

    def save(self, entry: Entry) -> None:
        # Atomic (a daemon killed mid-write leaves the old entry or the new one) but not fsync'd: it is on the
        # path of every ADD (1.5 ms here), and what it protects against a power loss is gone anyway after one
        # (every container with it); host-local's own lease files are not fsync'd either.
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        atomic_write(self.path(entry.container_id, entry.ifname), entry.to_json(), mode=0o600, durable=False)

    def remove(self, container_id: str, ifname: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path(container_id, ifname).unlink()

    def count(self) -> int:
        """How many containers have an entry: the files, not read (status asks this every few seconds)."""
        try:
            return sum(1 for n in os.listdir(self.directory) if n.endswith(".json") and not n.startswith("."))
        except FileNotFoundError:
            return 0

    def entries(self) -> list[Entry]:
        """Every readable entry; an unreadable one is logged and skipped (scan() reports them)."""
        entries, broken = self.scan()
        for path, why in broken:
            log.warning("attachment cache entry %s cannot be read, skipped: %s", path, why)
        return entries

    def scan(self) -> tuple[list[Entry], list[tuple[Path, str]]]:
        """The readable entries, and the files that cannot be read with why."""
        out: list[Entry] = []
        broken: list[tuple[Path, str]] = []
        try:
            names = sorted(os.listdir(self.directory))
        except FileNotFoundError:
            return out, broken
        for name in names:
            if name.endswith(".json") and not name.startswith("."):
                path = self.directory / name
                try:
                    out.append(Entry.from_json(path.read_bytes()))
                except FileNotFoundError:  # removed by a DEL meanwhile
                    continue
                except (OSError, ValueError, TypeError, KeyError, AttributeError) as e:
                    broken.append((path, f"{type(e).__name__}: {e}"))
        return out, broken
