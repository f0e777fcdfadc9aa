"""The claims of a node with no cluster: one file per claim in a directory (`ipamDir`), created atomically and
only if absent (a temp file link(2)ed to the claim's name: EEXIST is the lock), so the guarantees are those of
host-local on one node, whatever the number of daemons or processes at work."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from netcomp.fsutil import TMP_SUFFIX, fsync_dir, read_bounded
from netcomp.ipam.store import Claim, StoreUnavailable, Taken

SUFFIX = ".claim"
MAX_CLAIM_BYTES = 1 << 20  # a claim is a few hundred bytes


class LocalStore:
    """A directory of claims; `cls` the claim type (Claim, or tenants.IdClaim: anything with a `name`, `uid`,
    `created`, to_doc() and from_doc())."""

    kind = "node-local"

    def __init__(self, directory: Path, cls: Any = Claim) -> None:
        self.directory = directory
        self.cls = cls

    def _path(self, name: str) -> Path:
        return self.directory / f"{name}{SUFFIX}"

    def create(self, claim: Any) -> Any:
        stored = self.cls(**{**claim.to_doc(), "uid": uuid.uuid4().hex, "created": time.time()})
        path = self._path(claim.name)
        try:
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            # A temp file of its own (two claimers of one name must not share one), never a name that is a claim.
            fd, name = tempfile.mkstemp(prefix=f".{claim.name}.", suffix=TMP_SUFFIX, dir=self.directory)
            with os.fdopen(fd, "wb") as f:
                f.write(json.dumps(stored.to_doc()).encode())
            tmp = Path(name)
        except OSError as e:
            raise StoreUnavailable(f"cannot write in {self.directory}: {e.strerror}") from None
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise Taken(self._read(path)) from None
        except OSError as e:
            raise StoreUnavailable(f"cannot write {path}: {e.strerror}") from None
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        return stored

    def delete(self, claim: Any) -> bool:
        path = self._path(claim.name)
        current = self._read(path)
        if current is None or (claim.uid and current.uid != claim.uid):
            return False
        try:
            path.unlink()
        except FileNotFoundError:
            return False
        except OSError as e:
            raise StoreUnavailable(f"cannot remove {path}: {e.strerror}") from None
        with contextlib.suppress(OSError):
            fsync_dir(self.directory)
        return True

    def _read(self, path: Path) -> Any:
        try:
            return self.cls.from_doc(json.loads(read_bounded(path, MAX_CLAIM_BYTES, follow=False)))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError, KeyError) as e:
            raise StoreUnavailable(f"cannot read the claim {path}: {e}") from None

    def list(self) -> list[Any]:
        try:
            names = sorted(os.listdir(self.directory))
        except FileNotFoundError:
            return []
        except OSError as e:
            raise StoreUnavailable(f"cannot list {self.directory}: {e.strerror}") from None
        claims = (self._read(self.directory / n) for n in names if n.endswith(SUFFIX) and not n.startswith("."))
        return [c for c in claims if c is not None]

    def follow(self, on_change: Callable[[str, Any], None], stop: threading.Event) -> None:
        return  # only this daemon writes here: the allocator updates its view itself
