"""This module keeps the records in cacheDir (0700), one file per container named by a hash of the container ID
and the runtime's ifname, so that no ID can name a path. A whole write is atomic and an outcome one appended
write; neither is fsync'd, since they must outlive the daemon, not the machine (docs/reliability.md)."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
from collections.abc import Callable
from pathlib import Path

from netcomp import faults
from netcomp.errors import HostError
from netcomp.fsutil import WRITE_FLAGS, atomic_write, discard, read_bounded, remove_stale_tmp
from netcomp.records.record import READ_ERRORS, Attachment, NotJSON, Record, UnknownKind

log = logging.getLogger("netcomp.cache")
# An entry is a few KiB (a plugin result may be up to 16 MiB: cni.invoke.MAX_STDOUT); more is not netcomp's.
MAX_ENTRY_BYTES = 64 << 20


def _is_torn(data: bytes) -> bool:
    return not data.strip(b"\0")


def _torn(path: str, data: bytes) -> bool:
    """An entry with nothing in it (empty, or only NUL bytes), which only a machine going down soon after a write
    leaves: it records nothing that can be undone, so it is removed, logged and read as no entry, and the DEL
    after the reboot succeeds. Only load() removes it, under the container's lock."""
    if not _is_torn(data):
        return False
    log.warning(
        "attachment cache entry %s is empty (%d bytes): the machine went down while it was being written; what "
        "it recorded cannot be known and nothing is undone for it (host-local leases it held stay until freed by "
        "hand); removed",
        path,
        len(data),
    )
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    return True


@functools.lru_cache(maxsize=64)  # a request asks for its entry 2-3 times; nothing longer-lived
def _entry_name(container_id: str, ifname: str) -> str:
    return hashlib.sha256(f"{container_id}\0{ifname}".encode()).hexdigest()[:32] + ".json"


class Records:
    """The cache dir, an entry per CNI_CONTAINERID and CNI_IFNAME (CNI's identity of a container)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory  # set again when netcomp.yaml's cacheDir changes (SIGHUP)
        # Told (container ID, ifname) after an entry is written or removed, by the writer's thread: what follows
        # the records (cluster/services.py) reads the entry again later, so a listener must only take note.
        self.listeners: list[Callable[[str, str], None]] = []

    def _changed(self, container_id: str, ifname: str) -> None:
        for fn in self.listeners:
            fn(container_id, ifname)

    def path(self, container_id: str, ifname: str) -> Path:
        return Path(self._file(container_id, ifname))

    def _file(self, container_id: str, ifname: str) -> str:
        """The entry's path as a str: pathlib's arithmetic costs more than the syscalls on every request."""
        return os.path.join(self.directory, _entry_name(container_id, ifname))

    def load(self, container_id: str, ifname: str) -> Record | None:
        """The container's entry; None when it has none. An entry that cannot be read is the node's problem
        (HostError naming the file), never a reason to forget it: it stays for the operator to look at."""
        path = self._file(container_id, ifname)
        try:
            data = read_bounded(path, MAX_ENTRY_BYTES, follow=False)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise HostError(f"cannot read the attachment cache entry {path}: {e.strerror}") from None
        if _torn(path, data):
            return None
        try:
            return Record.from_json(data)
        except READ_ERRORS as e:
            why = str(e) if isinstance(e, (UnknownKind, NotJSON)) else f"{type(e).__name__}: {e}"
            raise HostError(
                f"the attachment cache entry {path} of container {container_id} on {ifname} cannot be read "
                f"({why}); it is left as it is: restore it, or undo what it records by hand and remove it"
            ) from None

    def save(self, entry: Record) -> None:
        """Atomic, not fsync'd. OSError (ENOSPC...) or ValueError (not JSON) leaves the previous entry."""
        path, data = self._file(entry.container_id, entry.ifname), entry.to_json()
        entry.file = path
        try:
            atomic_write(path, data, mode=0o600, durable=False)
        except FileNotFoundError:  # the dir is made when first needed (or again, if removed): not on every save
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            atomic_write(path, data, mode=0o600, durable=False)
        self._changed(entry.container_id, entry.ifname)

    def append_outcome(self, entry: Record, atts: list[Attachment]) -> None:
        """Record that `atts` are attached, with their results, in one write appended to the file save() wrote.
        OSError (ENOSPC, the file gone) when it cannot be: a part written has no newline, readers ignore it, and the
        caller's rollback writes the entry whole again; ValueError, written nothing, for a result JSON cannot hold."""
        path = self._file(entry.container_id, entry.ifname)
        if entry.file and entry.file != path:  # cacheDir changed (SIGHUP) while the delegates ran: the entry
            moved = entry.file  # goes there whole, as every record does from then on
            self.save(entry)
            discard(moved)
            return
        data = entry.outcome(atts)
        fd = os.open(path, WRITE_FLAGS | os.O_APPEND)
        try:
            view = memoryview(data)
            if faults.armed("mid-outcome"):  # the chaos run's point: half of the record written
                view = view[os.write(fd, view[: len(view) // 2]) :]
                faults.point("mid-outcome")
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        self._changed(entry.container_id, entry.ifname)

    def remove_temp_files(self) -> None:
        """At start-up, remove the temp files and removed entries a killed daemon left (never read as entries). A
        dir that cannot be listed is logged and left: the clutter is harmless, a start that fails is not."""
        try:
            remove_stale_tmp(self.directory)
        except OSError as e:
            log.warning("cannot look for temp files left in the attachment cache %s: %s", self.directory, e)

    def remove(self, container_id: str, ifname: str) -> None:
        """The entry is gone for every reader when this returns; its file is unlinked after (fsutil.discard)."""
        discard(self._file(container_id, ifname))
        self._changed(container_id, ifname)

    def _names(self) -> list[str]:
        """The entries' file names, sorted: never a temp file or a removed entry (hidden names)."""
        try:
            return sorted(n for n in os.listdir(self.directory) if n.endswith(".json") and not n.startswith("."))
        except FileNotFoundError:
            return []

    def count(self) -> int:
        """How many containers have an entry: the files, not read (status asks this every few seconds)."""
        return len(self._names())

    def entries(self) -> list[Record]:
        """Every readable entry; an unreadable one is logged and skipped (scan() reports them)."""
        entries, broken = self.scan()
        for path, why in broken:
            log.warning("attachment cache entry %s cannot be read, skipped: %s", path, why)
        return entries

    def scan(self) -> tuple[list[Record], list[tuple[Path, str]]]:
        """The readable entries, and the files that cannot be read with why."""
        out: list[Record] = []
        broken: list[tuple[Path, str]] = []
        for name in self._names():
            path = self.directory / name
            try:
                data = read_bounded(path, MAX_ENTRY_BYTES, follow=False)
                if _is_torn(data):  # left here: only a load under the container's lock removes it
                    broken.append((path, f"empty ({len(data)} bytes): the machine went down while it was written"))
                    continue
                out.append(Record.from_json(data))
            except FileNotFoundError:  # removed by a DEL meanwhile
                continue
            except (UnknownKind, NotJSON) as e:
                broken.append((path, str(e)))
            except (OSError, *READ_ERRORS) as e:
                broken.append((path, f"{type(e).__name__}: {e}"))
        return out, broken
