"""What an ADD is about to do, did, and got, per container: one JSON file per container, the daemon's write-ahead
record. DEL and CHECK use it, never today's intents (an intent edited or removed since must not change what DEL
does), and a daemon that died mid-ADD finds in it what to undo.

Each attachment has a state:
- `adding`: written before its delegate runs (the write-ahead). Its delegate may have run, in part or whole,
  or not at all; nobody was told it succeeded. A daemon starting up, a DEL, or a new ADD of the container
  undoes it (plugins tolerate a DEL of what was never added: CNI spec, "DEL").
- `attached`: its ADD succeeded and the result is recorded; the runtime has been (or is being) told so.
- `undo`: it must be DELeted (its ADD failed, or was rolled back) and that DEL failed; `error` says why. It stays
  until a DEL completes it.

Entries name their format (`"kind": "netcompCacheV2"`, as libcni's cache says `cniCacheV1`). Version 2 is
version 1's document followed by any number of outcome records, each an RFC 7464 JSON text (an RS byte, one
object, a newline): an ADD writes its write-ahead as a whole file, then appends the outcome, the attachments now
attached and their results, rather than writing the whole entry again. Version 1 entries (no records) are read as
they are. Entries written before the format had a name (netcomp 0.1.0 before the write-ahead) are read as version
0: every attachment attached, no namespace identity. An entry of a kind this version does not know is reported by
name and kept.

Whole writes are atomic (a temp file and a rename), appends are a single write of one record; none is fsync'd.
They must survive the daemon's death (OOM, watchdog, kill -9), which the page cache does, not the machine's. A
daemon killed in the middle of an append leaves a record without its newline, which a reader ignores: its
attachments stay `adding`, and are undone, as the runtime was never told they were attached. A machine that loses
power loses every container, netns and interface with it; what outlives it on disk (host-local's leases, written
as new files without fsync in the same milliseconds as the entry, and so usually written out by the same periodic
writeback, about 30 s later) is what the runtime's DEL after the reboot frees. An fsync would put about 1.5 ms on
each write of every ADD. The outcome was renamed over the write-ahead until issue 14's last round; ext4 then
writes the new file out at once (auto_da_alloc), which had the entry on disk within a journal commit but put its
block allocation on the answer's path and the freeing of those blocks (a discard on this machine) on every DEL:
0.45 ms of the daemon's CPU per ADD with 16 at once. An entry whose file the power cut left empty is removed by
the DEL that reads it (`_torn`); an appended record it left as NUL bytes is ignored. A whole record that is not
what netcomp writes is an entry that cannot be read (reported, and kept).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson

from netcomp.cni.spec import DEFAULT_VERSION, loads
from netcomp.errors import HostError
from netcomp.fsutil import WRITE_FLAGS, atomic_write, discard, read_bounded, remove_stale_tmp
from netcomp.host.netns import NetnsId

log = logging.getLogger("netcomp.cache")

KIND = "netcompCacheV2"
KNOWN_KINDS = ("netcompCacheV1", KIND)
# An entry is a few KiB (a plugin result may be up to 16 MiB: cni.invoke.MAX_STDOUT); more is not netcomp's.
MAX_ENTRY_BYTES = 64 << 20
RS = b"\x1e"  # RFC 7464: what begins each outcome record appended to an entry
State = Literal["adding", "attached", "undo"]
STATES: tuple[State, ...] = ("adding", "attached", "undo")


@dataclass
class Attachment:
    """One network of a container: the exact conflist used, the interface name, and the result."""

    network: str
    ifname: str
    conflist: dict[str, Any]
    result: dict[str, Any] | None = None
    args: str = ""  # CNI_ARGS given to the delegates
    capability_args: dict[str, Any] = field(default_factory=dict)
    state: State = "adding"
    error: str = ""  # why an `undo` attachment's DEL failed
    permanent: bool = False  # that DEL fails the same way however often it is tried (DelegateError.permanent)
    claims: list[dict[str, Any]] = field(default_factory=list)  # the addresses netcomp claimed for it (ipam/)
    # The device a device plugin gave the pod for it (delegate/devices.py): resource, id, the device-info read
    # from the device plugin, and the file its CNI copy is written to (named here before it is written).
    device: dict[str, Any] | None = None
    # The pod annotation's element it was attached for (delegate/podsync.py: its identity), "" for the runtime's
    # own networks (the default network, CNI_ARGS): an edit of the annotation detaches what it no longer names.
    element: str = ""

    def to_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "network": self.network,
            "ifname": self.ifname,
            "state": self.state,
            "conflist": self.conflist,
            "result": self.result,
            "args": self.args,
            "capabilityArgs": self.capability_args,
        }
        if self.error:
            doc["error"] = self.error
        if self.permanent:
            doc["permanent"] = True
        if self.claims:
            doc["claims"] = self.claims
        if self.device:
            doc["device"] = self.device
        if self.element:
            doc["element"] = self.element
        return doc

    @staticmethod
    def from_doc(d: dict[str, Any]) -> Attachment:
        state = d.get("state", "attached")
        if state not in STATES:
            raise ValueError(f"unknown attachment state {state!r}")
        return Attachment(
            network=_str(d, "network"),
            ifname=_str(d, "ifname"),
            conflist=_dict(d, "conflist"),
            result=d.get("result") if isinstance(d.get("result"), dict) else None,
            args=str(d.get("args") or ""),
            capability_args=d.get("capabilityArgs") or {},
            state=state,
            error=str(d.get("error") or ""),
            permanent=d.get("permanent") is True,
            claims=[c for c in d.get("claims") or [] if isinstance(c, dict)],
            device=d["device"] if isinstance(d.get("device"), dict) else None,
            element=str(d.get("element") or ""),
        )


@dataclass
class Entry:
    container_id: str
    netns: str
    ifname: str  # the runtime's CNI_IFNAME
    cni_version: str
    attachments: list[Attachment] = field(default_factory=list)
    netns_id: NetnsId | None = None  # None only in entries of version 0
    netns_cookie: int | None = None  # the namespace's cookie (host.netns.cookie): its inode number is reused
    request: str = ""  # digest of the ADD request, to answer a repeated one from the record
    version: int = 1
    # The interfaces the namespace had when the last ADD began: what an undo finds beyond these and the attached
    # ones was left by a plugin killed half-way (a macvlan under its temporary name) and is removed.
    links_before: list[str] | None = None
    # The pod (namespace, name, uid) and the CNI_ARGS its delegates get, for a hot-plug that follows an edit of
    # the pod's annotation (delegate/podsync.py); None and "" when the runtime named no pod.
    pod: dict[str, str] | None = None
    args: str = ""
    # Not recorded: the file this entry was last written to (Cache.save), which its outcome is appended to.
    file: str = field(default="", compare=False, repr=False)

    @property
    def attached(self) -> list[Attachment]:
        return [a for a in self.attachments if a.state == "attached"]

    @property
    def unfinished(self) -> list[Attachment]:
        """What an ADD left undone or a rollback could not undo: to be DELeted before anything else."""
        return [a for a in self.attachments if a.state != "attached"]

    def to_json(self) -> bytes:
        doc: dict[str, Any] = {
            "kind": KIND,
            "containerID": self.container_id,
            "ifname": self.ifname,
            "netns": self.netns,
            "netnsID": list(self.netns_id) if self.netns_id else None,
            "netnsCookie": self.netns_cookie,
            "cniVersion": self.cni_version,
            "request": self.request,
            "attachments": [a.to_doc() for a in self.attachments],
        }
        if self.links_before is not None:
            doc["linksBefore"] = self.links_before
        if self.pod:
            doc["pod"] = self.pod
        if self.args:
            doc["args"] = self.args
        # orjson: the stdlib's indenting encoder is pure Python, and this is on the path of every ADD.
        try:
            return orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)
        except orjson.JSONEncodeError:  # what orjson refuses (an integer over 64 bits in a plugin's result)
            return _stdlib_json(doc, 2) + b"\n"

    def outcome(self, atts: list[Attachment]) -> bytes:
        """The record appended once `atts` (attachments of this entry, attached now) have their results: one RFC
        7464 JSON text, ended by its newline (a record without one was cut short and is ignored)."""
        doc = {"attached": [{"ifname": a.ifname, "network": a.network, "result": a.result} for a in atts]}
        try:
            return RS + orjson.dumps(doc) + b"\n"
        except orjson.JSONEncodeError:  # what orjson refuses (an integer over 64 bits in a plugin's result)
            return RS + _stdlib_json(doc, None) + b"\n"

    @staticmethod
    def from_json(data: bytes) -> Entry:
        """The entry the file's text records: its document, then each of its outcome records applied in turn. A
        record cut short (no newline, or NUL bytes a power cut left) is ignored; a whole one that is not what
        netcomp writes is a ValueError."""
        head, sep, tail = data.partition(RS)
        entry = Entry._document(head.rstrip(b"\0"))
        if entry.version == 0 and sep:
            raise ValueError("outcome records after an entry of version 0")
        for record in tail.split(RS) if sep else ():
            entry._apply(record)
        return entry

    def _apply(self, record: bytes) -> None:
        record = record.rstrip(b"\0")  # what a power cut left of what came after it
        if not record.endswith(b"\n") or b"\0" in record:
            return  # cut short: the daemon died in its write, before it answered (or the machine went down)
        try:
            doc = loads(record)
        except ValueError as e:  # whole, but not what netcomp wrote: a disk fault or a hand edit, never a kill
            raise ValueError(f"an outcome record is not JSON: {e}") from None
        attached = doc.get("attached") if isinstance(doc, dict) else None
        if not isinstance(attached, list):
            raise ValueError("an outcome record without its list of attachments")
        by_name = {a.ifname: a for a in self.attachments}
        for one in attached:
            a = by_name.get(_str(one, "ifname"))
            if a is None or a.state != "adding" or a.network != _str(one, "network"):
                name = one.get("ifname")
                raise ValueError(f"an outcome record names an attachment the entry has not begun: {name!r}")
            result = one.get("result")
            a.state, a.result = "attached", result if isinstance(result, dict) else None

    @staticmethod
    def _document(data: bytes) -> Entry:
        try:
            d = loads(data)
        except ValueError as e:
            raise NotJSON(f"not JSON: {e}") from None
        if not isinstance(d, dict):
            raise ValueError("not a JSON object")
        kind = d.get("kind")
        if kind is None and "container_id" in d:
            return _legacy(d)
        if kind not in KNOWN_KINDS:
            raise UnknownKind(str(kind))
        nid = d.get("netnsID")
        atts = d.get("attachments")
        if not isinstance(atts, list):
            raise ValueError("attachments is not a list")
        return Entry(
            container_id=_str(d, "containerID"),
            netns=str(d.get("netns") or ""),
            ifname=_str(d, "ifname"),
            cni_version=str(d.get("cniVersion") or DEFAULT_VERSION),
            attachments=[Attachment.from_doc(a) for a in atts],
            netns_id=(int(nid[0]), int(nid[1])) if isinstance(nid, list) and len(nid) == 2 else None,
            netns_cookie=d["netnsCookie"] if type(d.get("netnsCookie")) is int else None,
            request=str(d.get("request") or ""),
            links_before=[str(x) for x in d["linksBefore"]] if isinstance(d.get("linksBefore"), list) else None,
            pod={str(k): str(v) for k, v in d["pod"].items()} if isinstance(d.get("pod"), dict) else None,
            args=str(d.get("args") or ""),
        )


def _stdlib_json(doc: dict[str, Any], indent: int | None) -> bytes:
    """What orjson refuses, by the stdlib's encoder; ValueError for what neither can write (a plugin's result
    nested too deeply), which the caller reports as it reports a full disk."""
    try:
        return json.dumps(doc, indent=indent, separators=None if indent else (",", ":")).encode()
    except (RecursionError, ValueError) as e:
        raise ValueError(f"cannot write a record of it: {type(e).__name__}: {e}") from None


class NotJSON(ValueError):
    """An entry whose text is not JSON (a file cut short, or overwritten by hand)."""


class UnknownKind(ValueError):
    """An entry of a format this version does not read (written by a newer netcomp, or not netcomp's)."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"its kind {kind!r} is not one this netcomp reads ({', '.join(KNOWN_KINDS)})")
        self.kind = kind


def _legacy(d: dict[str, Any]) -> Entry:
    """An entry of version 0 (no "kind"): written after its ADD succeeded, so everything in it is attached."""
    atts = []
    for a in d.get("attachments") or []:
        atts.append(
            Attachment(
                network=_str(a, "network"),
                ifname=_str(a, "ifname"),
                conflist=_dict(a, "conflist"),
                result=a.get("result"),
                args=str(a.get("args") or ""),
                capability_args=a.get("capability_args") or {},
                state="attached",
            )
        )
    return Entry(
        container_id=_str(d, "container_id"),
        netns=str(d.get("netns") or ""),
        ifname=_str(d, "ifname"),
        cni_version=str(d.get("cni_version") or DEFAULT_VERSION),
        attachments=atts,
        version=0,
    )


def _str(d: Any, key: str) -> str:
    v = d.get(key) if isinstance(d, dict) else None
    if not isinstance(v, str):
        raise ValueError(f"{key} is missing or not a string")
    return v


def _dict(d: Any, key: str) -> dict[str, Any]:
    v = d.get(key) if isinstance(d, dict) else None
    if not isinstance(v, dict):
        raise ValueError(f"{key} is missing or not an object")
    return v


_READ_ERRORS = (ValueError, TypeError, KeyError, AttributeError, IndexError)


def _is_torn(data: bytes) -> bool:
    return not data.strip(b"\0")


def _torn(path: str, data: bytes) -> bool:
    """An entry with nothing in it (empty, or only NUL bytes): netcomp never writes one, and a daemon killed
    mid-write leaves the old entry or the new one (Cache.save); only the machine going down in the seconds after a
    write (entries are not fsync'd: the module docstring) leaves one. It records nothing that can be undone, so it
    is removed, said in the log, and read as no entry: the runtime's DEL after the reboot succeeds instead of
    failing on it for ever. Only load() removes it: its callers hold the container's lock, so no save of that
    entry can come between the read and the removal."""
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


class Cache:
    """The cache dir (0700). File names are a hash of the container ID and the runtime's ifname, so no ID can
    name a path (CNI: a container is identified by CNI_CONTAINERID plus CNI_IFNAME)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        # Told (container ID, ifname) after an entry is written or removed, by the writer's thread: what follows
        # the records (daemon/kubeslices.py) reads the entry again later, so a listener must only take note.
        self.listeners: list[Callable[[str, str], None]] = []

    def _changed(self, container_id: str, ifname: str) -> None:
        for fn in self.listeners:
            fn(container_id, ifname)

    @property
    def directory(self) -> Path:
        return self._directory

    @directory.setter
    def directory(self, value: Path) -> None:
        """Set again when netcomp.yaml's cacheDir changes (SIGHUP): every record goes there from then on."""
        self._directory = Path(value)
        self._dir = os.fspath(value)

    def path(self, container_id: str, ifname: str) -> Path:
        return Path(self._file(container_id, ifname))

    def _file(self, container_id: str, ifname: str) -> str:
        """The entry's path as a str: on the path of every request (pathlib cost 17 us a call here)."""
        return os.path.join(self._dir, _entry_name(container_id, ifname))

    def load(self, container_id: str, ifname: str) -> Entry | None:
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
            return Entry.from_json(data)
        except _READ_ERRORS as e:
            why = str(e) if isinstance(e, (UnknownKind, NotJSON)) else f"{type(e).__name__}: {e}"
            raise HostError(
                f"the attachment cache entry {path} of container {container_id} on {ifname} cannot be read "
                f"({why}); it is left as it is: restore it, or undo what it records by hand and remove it"
            ) from None

    def save(self, entry: Entry) -> None:
        """Atomic, not fsync'd (see the module docstring). OSError (ENOSPC...) leaves the previous entry; so does
        ValueError, for an entry that cannot be written as JSON."""
        path, data = self._file(entry.container_id, entry.ifname), entry.to_json()
        entry.file = path
        try:
            atomic_write(path, data, mode=0o600, durable=False)
        except FileNotFoundError:  # the dir is made when first needed (or again, if removed): not on every save
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            atomic_write(path, data, mode=0o600, durable=False)
        self._changed(entry.container_id, entry.ifname)

    def append_outcome(self, entry: Entry, atts: list[Attachment], halfway: Callable[[], None] | None = None) -> None:
        """Record that `atts` are attached, with their results: one record appended to the file save() wrote
        (the write-ahead), in one write. OSError (ENOSPC, the file gone) when it cannot be: a part written before
        the error has no newline and is ignored by readers, and the caller rolls the ADD back, which writes the
        entry whole again; ValueError, written nothing, for a result that cannot be written as JSON. `halfway`: a
        test hook (daemon.faults, mid-outcome), called with half of the record written."""
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
            if halfway is not None:
                view = view[os.write(fd, view[: len(view) // 2]) :]
                halfway()
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        self._changed(entry.container_id, entry.ifname)

    def remove_temp_files(self) -> None:
        """Temp files a daemon killed mid-save left, and removed entries it had not unlinked yet (never read as
        entries): at start-up, before serving. A dir that cannot be listed is said in the log and left: the
        clutter is harmless, a start that fails is not."""
        try:
            remove_stale_tmp(self.directory)
        except OSError as e:
            log.warning("cannot look for temp files left in the attachment cache %s: %s", self.directory, e)

    def remove(self, container_id: str, ifname: str) -> None:
        """The entry is gone for every reader when this returns; its file is unlinked after (fsutil.discard)."""
        discard(self._file(container_id, ifname))
        self._changed(container_id, ifname)

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
                    data = read_bounded(path, MAX_ENTRY_BYTES, follow=False)
                    if _is_torn(data):  # left here: only a load under the container's lock removes it
                        broken.append((path, f"empty ({len(data)} bytes): the machine went down while it was written"))
                        continue
                    out.append(Entry.from_json(data))
                except FileNotFoundError:  # removed by a DEL meanwhile
                    continue
                except (UnknownKind, NotJSON) as e:
                    broken.append((path, str(e)))
                except (OSError, *_READ_ERRORS) as e:
                    broken.append((path, f"{type(e).__name__}: {e}"))
        return out, broken
