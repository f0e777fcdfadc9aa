"""This module keeps the node's record of the IPAMClaims it knows (ipam/ipamclaims.py): a file per claim under
`<cacheDir>/ipam/ipamclaims/`, so that an ADD naming a claim writes that claim's file, not every claim's. A claim
whose block entries this node holds is written durably (fsynced); one only seen here is not: it serves an ADD while
the API server is away, and its loss in a power cut answers that ADD 11."""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from netcomp.fsutil import atomic_write, discard, fsync_dir, read_bounded, remove_stale_tmp
from netcomp.ipam.store import Claim

log = logging.getLogger("netcomp.ipam")
RECORD_KIND = "netcompIPAMClaimsV1"
MAX_RECORD = 16 << 20  # the version before's one file for every claim
_UID = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,63}")


@dataclass
class Kept:
    """A claim this node knows: its addresses (the block entries it holds for it when `held`, else what its
    status said when last read here), and whether its status says them."""

    key: str  # namespace/name/uid
    network: str
    interface: str
    entries: list[Claim] = field(default_factory=list)
    held: bool = False
    status: bool = False
    pod: str = ""  # the claim is deleted: namespace/name of the pod that keeps the address until it is gone
    owner: str = ""  # the pod whose ADD gave the claim its first address (its status's ownerPod)

    @property
    def ref(self) -> str:
        return self.key.rpartition("/")[0]

    def to_doc(self) -> dict[str, Any]:
        return {"key": self.key, "network": self.network, "interface": self.interface, "held": self.held,
                "status": self.status, "entries": [e.to_doc() for e in self.entries], "pod": self.pod,
                "owner": self.owner}  # fmt: skip

    @staticmethod
    def from_doc(d: dict[str, Any]) -> Kept:
        for e in d["entries"]:
            Claim.check_doc(e)
        return Kept(str(d["key"]), str(d["network"]), str(d["interface"]),
                    [Claim.from_doc(e) for e in d["entries"]], d["held"] is True, d["status"] is True,
                    str(d.get("pod") or ""), str(d.get("owner") or ""))  # fmt: skip


class ClaimRecord:
    """The claims this node knows, by uid, and their files. The caller holds its own lock around changes."""

    def __init__(self, path: Path, node: str) -> None:
        self.path, self.node = path, node
        self.kept: dict[str, Kept] = {}  # by the claim's uid
        self.unread: set[str] = set()  # the names (uids) of claims' files load could not read: left as they are

    def load(self) -> list[Claim]:
        """The claims this node knows, read from their files; the block entries it holds for them (for the
        blocks). The version before's one file for every claim is taken in, written as files per claim."""
        self.path.mkdir(parents=True, exist_ok=True, mode=0o700)
        remove_stale_tmp(self.path)
        legacy = self.path.with_suffix(".json")
        docs = [("", d) for d in self._load(legacy, "claims")] if legacy.exists() else []
        for f in sorted(self.path.iterdir()):
            if f.suffix == ".json" and not f.name.startswith("."):
                got = self._load(f, "claim")
                docs += [(f.stem, d) for d in got]
                if not got:
                    self.unread.add(f.stem)
        for stem, d in docs:
            try:
                k = Kept.from_doc(d)
            except (KeyError, ValueError, TypeError, AttributeError) as e:
                log.error("%s: a claim this node kept cannot be read (%s): left out", self.path, e)
                if stem:  # a claim's own file (not the legacy one)
                    self.unread.add(stem)
                continue
            self.kept[k.key.rpartition("/")[2]] = k
        if legacy.exists():
            try:
                for uid in self.kept:
                    self.write(uid)
                legacy.unlink()
                fsync_dir(legacy.parent)
            except OSError as e:
                log.error("cannot write %s (the IPAMClaims this node keeps addresses for): %s", self.path, e)
        return [e for k in self.kept.values() if k.held for e in k.entries]

    def _load(self, path: Path, key: str) -> list[dict[str, Any]]:
        """The claims' documents of one file of the record; none (said in the log) when it is not this node's."""
        try:
            doc = orjson.loads(read_bounded(path, MAX_RECORD, follow=False))
            if not isinstance(doc, dict) or doc.get("kind") != RECORD_KIND or doc.get("node") != self.node:
                raise ValueError(f"not this node's record of IPAMClaims ({type(doc).__name__})")
            got = doc.get(key)
            return [d for d in (got if key == "claims" else [got]) or [] if isinstance(d, dict)]
        except (OSError, ValueError, AttributeError, TypeError) as e:
            log.error("cannot read %s (an IPAMClaim this node keeps addresses for): %s", path, e)
            return []

    def file(self, uid: str) -> Path:
        """A claim's file: its uid (the API server makes it; anything else is hashed, never a path)."""
        name = uid if _UID.fullmatch(uid) else hashlib.sha256(uid.encode()).hexdigest()
        return self.path / f"{name}.json"

    def write(self, uid: str) -> None:
        """The claim's file written (atomic; fsynced for a claim this node holds, or has no status yet), or
        removed once it is not kept; OSError."""
        k = self.kept.get(uid)
        if k is None:
            if discard(self.file(uid)):
                fsync_dir(self.path)
            return
        data = orjson.dumps({"kind": RECORD_KIND, "node": self.node, "claim": k.to_doc()},
                            option=orjson.OPT_APPEND_NEWLINE)  # fmt: skip
        try:
            atomic_write(self.file(uid), data, mode=0o600, durable=k.held or not k.status)
        except FileNotFoundError:  # load() makes the dir; a record written before it, once
            self.path.mkdir(parents=True, exist_ok=True, mode=0o700)
            atomic_write(self.file(uid), data, mode=0o600, durable=k.held or not k.status)
