"""Plan -> disk. Writes only what changed (atomically), prunes only files netcomp owns, never touches anything
else in the directory. An Output remembers what it wrote, so a long-lived owner (the daemon) compares against
memory instead of re-reading every file."""

from __future__ import annotations

import contextlib
import difflib
import os
import queue
import threading
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar

from netcomp.compiler.marker import is_owned
from netcomp.compiler.plan import SUFFIX, Artifact, Plan
from netcomp.errors import HostError
from netcomp.fsutil import atomic_write, fsync_dir, publish, read_bounded, remove_stale_tmp, write_tmp

ChangeKind = Literal["add", "change", "remove"]
T = TypeVar("T")
_DONE = object()
MAX_BYTES = 16 << 20  # of a file in the output dir read to see whether it is netcomp's
PARALLEL_MIN = 16  # more writes than this go to a thread pool
WRITERS = 16


@dataclass(frozen=True, slots=True)
class Change:
    kind: ChangeKind
    filename: str
    old: bytes | None
    new: bytes | None


class Output:
    """The output directory of compiled conflists."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._owned: dict[str, bytes] | None = None  # what we believe is on disk and ours

    def forget(self) -> None:
        """Something else wrote the dir: read it again before the next apply."""
        self._owned = None

    def owned(self) -> dict[str, bytes]:
        if self._owned is None:
            owned: dict[str, bytes] = {}
            try:
                entries = list(os.scandir(self.directory))
            except FileNotFoundError:
                entries = []
            except OSError as e:
                raise HostError(f"cannot list {self.directory}: {e.strerror}") from None
            for entry in entries:
                if not entry.name.endswith(SUFFIX) or not entry.is_file(follow_symlinks=False):
                    continue
                try:
                    data = read_bounded(entry.path, MAX_BYTES, follow=False)
                except OSError:
                    continue
                if is_owned(data):
                    owned[entry.name] = data
            self._owned = owned
        return self._owned

    def changes(self, plan: Plan, *, keep: Collection[str] = ()) -> list[Change]:
        """What apply() would do. Files named in `keep` are left as they are even when the plan lacks them."""
        owned = self.owned()
        out: list[Change] = []
        for name in sorted(plan.artifacts):
            new = plan.artifacts[name].data
            old = owned.get(name)
            if old is None:
                if name not in owned and (self.directory / name).exists() and not self._is_ours_on_disk(name):
                    raise HostError(
                        f"{self.directory / name} exists and was not written by netcomp; "
                        "move it away or rename the network"
                    )
                out.append(Change("add", name, None, new))
            elif old is not new:
                if old != new:
                    out.append(Change("change", name, old, new))
                else:
                    owned[name] = new  # one copy of equal bytes in memory (the plan's), not two
        for name in sorted(owned):
            if name not in plan.artifacts and name not in keep:
                out.append(Change("remove", name, owned[name], None))
        return out

    def _is_ours_on_disk(self, name: str) -> bool:
        try:
            return is_owned(read_bounded(self.directory / name, MAX_BYTES, follow=False))
        except OSError:
            return False

    def _write(self, ch: Change, staged: Stager | None = None) -> None:
        assert ch.new is not None
        path = self.directory / ch.filename
        tmp = staged.take(ch.filename, ch.new) if staged is not None else None
        if tmp is not None:
            publish(tmp, path)
        else:
            atomic_write(path, ch.new, sync_dir=False)

    def stager(self) -> Stager:
        """Start writing artifacts to temp files while the compiler is still working (see Stager)."""
        return Stager(self)

    def apply(self, plan: Plan, *, keep: Collection[str] = (), staged: Stager | None = None) -> list[Change]:
        try:
            changes = self.changes(plan, keep=keep)
            if changes:
                if staged is not None:
                    staged.wait()
                self._apply(changes, staged)
            return changes
        finally:
            if staged is not None:
                staged.discard()

    def _apply(self, changes: list[Change], staged: Stager | None) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o755)
            if staged is None:
                remove_stale_tmp(self.directory)  # a Stager did this before it began
            owned = self.owned()
            writes = [ch for ch in changes if ch.new is not None]
            if len(writes) > PARALLEL_MIN:
                # fsync waits on the disk with the GIL released, and concurrent fsyncs share journal commits. Each
                # file is still written atomically on its own.
                _in_threads(lambda ch: self._write(ch, staged), writes, WRITERS)
            else:
                for ch in writes:
                    self._write(ch, staged)
            for ch in changes:
                if ch.new is not None:
                    owned[ch.filename] = ch.new
                else:
                    with contextlib.suppress(FileNotFoundError):
                        (self.directory / ch.filename).unlink()
                    owned.pop(ch.filename, None)
            fsync_dir(self.directory)
        except OSError as e:
            self._owned = None  # we no longer know what is on disk: re-read next time
            raise HostError(f"cannot write {e.filename or self.directory}: {e.strerror}") from None


class Stager:
    """Writes artifacts that differ from the output dir into their temp files (fsync'd, not yet visible) in
    background threads while the compiler goes on; apply() then only renames them into place, discard() removes
    what was not published. A queue and WRITERS threads, not an executor: a Future per artifact adds up, at the
    peak of a large compile, to memory the daemon then never gives back."""

    def __init__(self, output: Output) -> None:
        self.output = output
        self.owned = output.owned()
        self.staged: dict[str, bytes] = {}  # file name -> the data offered for it
        self.written: dict[str, Path | BaseException] = {}  # file name -> its temp file, or why there is none
        self._queue: queue.SimpleQueue[tuple[str, bytes] | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self.failed = False

    @classmethod
    def handed(cls, output: Output, staged: dict[str, bytes], written: dict[str, Path]) -> Stager:
        """What another process staged (compiler/coldstart.py): the data offered per file name, and the temp
        files it wrote."""
        stager = cls(output)
        stager.staged, stager.written = staged, dict(written)
        return stager

    def offer(self, art: Artifact) -> None:
        if self.failed or self.owned.get(art.filename) == art.data or art.filename in self.staged:
            return
        if not self._threads:
            try:
                self.output.directory.mkdir(parents=True, exist_ok=True, mode=0o755)
                remove_stale_tmp(self.output.directory)
            except OSError:
                self.failed = True  # apply() will report it
                return
            self._threads = [threading.Thread(target=self._work, name="stager", daemon=True) for _ in range(WRITERS)]
            for t in self._threads:
                t.start()
        self.staged[art.filename] = art.data
        self._queue.put((art.filename, art.data))

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            name, data = item
            try:
                self.written[name] = write_tmp(self.output.directory / name, data)
            except BaseException as e:  # the file is written afresh by apply(), which reports what fails
                self.written[name] = e

    def wait(self) -> None:
        for _ in self._threads:
            self._queue.put(None)
        for t in self._threads:
            t.join()
        self._threads = []

    def take(self, filename: str, data: bytes) -> Path | None:
        """The staged temp file holding exactly data, now owned by the caller; None to write it afresh."""
        offered = self.staged.pop(filename, None)
        result = self.written.pop(filename, None)
        return result if offered == data and isinstance(result, Path) else None

    def discard(self) -> None:
        self.wait()
        for result in self.written.values():
            if isinstance(result, Path):
                with contextlib.suppress(FileNotFoundError):
                    result.unlink()
        self.staged.clear()
        self.written.clear()


def _in_threads(fn: Callable[[T], object], items: Sequence[T], threads: int) -> None:
    """fn(item) for every item, in up to `threads` threads; the first exception is raised once all are done."""
    todo = iter(items)
    lock = threading.Lock()
    errors: list[BaseException] = []

    def work() -> None:
        while True:
            with lock:
                item = next(todo, _DONE)
            if item is _DONE:
                return
            try:
                fn(item)  # type: ignore[arg-type]
            except BaseException as e:
                errors.append(e)

    pool = [threading.Thread(target=work, name="writer", daemon=True) for _ in range(min(threads, len(items)))]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    if errors:
        raise errors[0]


def unified_diff(changes: list[Change], directory: Path) -> str:
    out: list[str] = []
    for ch in changes:
        old = (ch.old or b"").decode().splitlines(keepends=True)
        new = (ch.new or b"").decode().splitlines(keepends=True)
        a = "/dev/null" if ch.old is None else str(directory / ch.filename)
        b = "/dev/null" if ch.new is None else str(directory / ch.filename)
        out.extend(difflib.unified_diff(old, new, a, b))
    return "".join(out)
