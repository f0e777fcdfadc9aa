"""This module reads and writes netcomp's record of a container's attachments (`"kind": "netcompCacheV2"`): a JSON
document of what an ADD is about to do (the write-ahead), then appended outcome records, each an RFC 7464 JSON
text naming the attachments now attached with their results. It reads versions 1 and 0 as they are, ignores a
record cut short, and names an unknown kind (docs/reliability.md, "The write-ahead record"). files.py stores them."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from netcomp.cni.spec import DEFAULT_VERSION, loads
from netcomp.host.netns import NetnsId
from netcomp.ipam.store import Claim

KIND = "netcompCacheV2"
KNOWN_KINDS = ("netcompCacheV1", KIND)
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
    # The device a device plugin gave the pod for it (pods/devices.py): resource, id, the device-info read
    # from the device plugin, and the file its CNI copy is written to (named here before it is written).
    device: dict[str, Any] | None = None
    # The pod annotation's element it was attached for (cluster/podsync.py: its identity), "" for the runtime's
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
        # The keys that are written only when set: each the attribute of its name.
        doc.update((k, v) for k in ("error", "permanent", "claims", "device", "element") if (v := getattr(self, k)))
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
            claims=_claims(d.get("claims")),
            device=d["device"] if isinstance(d.get("device"), dict) else None,
            element=str(d.get("element") or ""),
        )


@dataclass
class Record:
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
    # the pod's annotation (cluster/podsync.py); None and "" when the runtime named no pod.
    pod: dict[str, str] | None = None
    args: str = ""
    # The runtime's network whose plugin the netcomp shim is (its config's `name`): a GC is about that network only.
    runtime_network: str = ""
    # Not recorded: the file this entry was last written to (Records.save), which its outcome is appended to.
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
        if self.runtime_network:
            doc["runtimeNetwork"] = self.runtime_network
        return _dumps(doc, indent=True) + b"\n"

    def outcome(self, atts: list[Attachment]) -> bytes:
        """The record appended once `atts` (attachments of this entry, attached now) have their results: one RFC
        7464 JSON text, ended by its newline (a record without one was cut short and is ignored)."""
        doc = {"attached": [{"ifname": a.ifname, "network": a.network, "result": a.result} for a in atts]}
        return RS + _dumps(doc, indent=False) + b"\n"

    @staticmethod
    def from_json(data: bytes) -> Record:
        """The entry the file's text records: its document, then each of its outcome records applied in turn. A
        record cut short (no newline, or NUL bytes a power cut left) is ignored; a whole one that is not what
        netcomp writes is a ValueError."""
        head, sep, tail = data.partition(RS)
        entry = Record._document(head.rstrip(b"\0"))
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
    def _document(data: bytes) -> Record:
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
        return Record(
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
            runtime_network=str(d.get("runtimeNetwork") or ""),
        )


def _dumps(doc: dict[str, Any], *, indent: bool) -> bytes:
    """orjson (the stdlib's indenting encoder is pure Python), or the stdlib's encoder for what orjson refuses (an
    integer over 64 bits in a plugin's result); ValueError for what neither can write (a result nested too
    deeply), which the caller reports as it reports a full disk."""
    try:
        return orjson.dumps(doc, option=orjson.OPT_INDENT_2 if indent else 0)
    except orjson.JSONEncodeError:
        pass
    try:
        return json.dumps(doc, indent=2 if indent else None, separators=None if indent else (",", ":")).encode()
    except (RecursionError, ValueError) as e:
        raise ValueError(f"cannot write a record of it: {type(e).__name__}: {e}") from None


class NotJSON(ValueError):
    """An entry whose text is not JSON (a file cut short, or overwritten by hand)."""


class UnknownKind(ValueError):
    """An entry of a format this version does not read (written by a newer netcomp, or not netcomp's)."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"its kind {kind!r} is not one this netcomp reads ({', '.join(KNOWN_KINDS)})")
        self.kind = kind


def _legacy(d: dict[str, Any]) -> Record:
    """An entry of version 0 (no "kind"): written after its ADD succeeded, so everything in it is attached."""
    atts = [
        Attachment(
            network=_str(a, "network"),
            ifname=_str(a, "ifname"),
            conflist=_dict(a, "conflist"),
            result=a.get("result"),
            args=str(a.get("args") or ""),
            capability_args=a.get("capability_args") or {},
            state="attached",
        )
        for a in d.get("attachments") or []
    ]
    return Record(
        container_id=_str(d, "container_id"),
        netns=str(d.get("netns") or ""),
        ifname=_str(d, "ifname"),
        cni_version=str(d.get("cni_version") or DEFAULT_VERSION),
        attachments=atts,
        version=0,
    )


def _claims(docs: Any) -> list[dict[str, Any]]:
    """The address claims an attachment records; ValueError for one that is not whole (start-up and DEL need each)."""
    out = [c for c in docs or [] if isinstance(c, dict)]
    for c in out:
        Claim.check_doc(c)
    return out


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


READ_ERRORS = (ValueError, TypeError, KeyError, AttributeError, IndexError)
