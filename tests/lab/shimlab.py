"""What the shim tests share: the shims built and installed once per session, each exec'd as a runtime execs a
CNI plugin, and a scripted unix socket server that stands in for a daemon where a test needs one that misbehaves
on purpose (the real daemon is exercised through the shim in tests/integration and tests/system).

Shims: "python" (plugin.py installed as a package installs it: the launcher and the byte-compiled shim, run by
/usr/bin/python3), "c" (netcomp-shim.c built as `netcomp install-shim` builds it: warnings are errors, hardening
flags) and "c-asan" (the same source under AddressSanitizer and UndefinedBehaviorSanitizer, any report fatal: a
sanitizer report is an abort, which the runner fails on)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from netcomp.shim import install as shimlaunch

SHIMS = ("python", "c", "c-asan")
SANITIZER_ENV = {
    "ASAN_OPTIONS": "abort_on_error=1:detect_leaks=1",
    "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
}


@dataclass(frozen=True)
class Result:
    code: int
    out: bytes
    err: bytes
    seconds: float


@dataclass(frozen=True)
class Shim:
    """One shim as a runtime runs it: exec'd with the CNI environment only and the config on stdin."""

    name: str
    argv: tuple[str, ...]
    extra_env: Mapping[str, str] = field(default_factory=dict)

    def run(
        self,
        env: Mapping[str, str | bytes],
        config: bytes = b"",
        timeout: float = 30,
        cwd: Path | None = None,
        check: bool = True,
    ) -> Result:
        """Exec the shim; with `check`, fail on anything but exit status 0 or 1 with nothing on stderr (a
        traceback, a sanitizer report, a signal)."""
        full: dict[str | bytes, str | bytes] = {**env, **self.extra_env}
        t = time.monotonic()
        p = subprocess.run(
            self.argv, input=config, env=full, capture_output=True, timeout=timeout, check=False, cwd=cwd
        )
        took = time.monotonic() - t
        if check:
            assert p.returncode in (0, 1) and p.stderr == b"", (
                self.name,
                p.returncode,
                p.stderr.decode(errors="replace"),
            )
        return Result(p.returncode, p.stdout, p.stderr, took)


def build_all(base: Path) -> dict[str, Shim]:
    """Every shim of SHIMS, built or installed under base."""
    shims: dict[str, Shim] = {}
    plugin = base / "python" / "netcomp"
    shimlaunch.install(plugin, base / "python" / "lib")
    shims["python"] = Shim("python", (str(plugin),))
    cc = shimlaunch.find_cc()
    if cc is None:
        return shims
    shimlaunch.build(base / "netcomp-c", cc)
    shims["c"] = Shim("c", (str(base / "netcomp-c"),))
    shimlaunch.build(base / "netcomp-c-asan", cc, shimlaunch.SANITIZE)
    shims["c-asan"] = Shim("c-asan", (str(base / "netcomp-c-asan"),), SANITIZER_ENV)
    return shims


def pick(shims: Mapping[str, Shim], name: str) -> Shim:
    if name not in shims:
        pytest.skip("no C compiler (cc) on this machine: `make system-deps` installs gcc")
    return shims[name]


# A connection's script: the chunks the server sends (each after its delay in seconds) once it has read the whole
# request, then it closes. HANG: say nothing and keep the connection open until the shim closes it.
Chunk = tuple[float, bytes]
Act = Sequence[Chunk]
HANG: Act = ((-1.0, b""),)


def answer(status: int, body: bytes, reason: bytes = b"X") -> bytes:
    return b"HTTP/1.1 %d %s\r\nContent-Length: %d\r\n\r\n%s" % (status, reason, len(body), body)


TAKEN = b"HTTP/1.1 102 Processing\r\n\r\n"


@dataclass
class Request:
    head: bytes
    body: bytes


class Scripted:
    """A unix socket server standing in for the daemon: the n-th connection gets acts[n] (the last act for every
    connection after), after the whole request has been read; every request is recorded. Stands in for the daemon
    where a test needs it to misbehave."""

    def __init__(self, path: Path, acts: Sequence[Act | None]) -> None:
        self.path = str(path)
        self.acts = list(acts)
        self.seen: list[Request] = []
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(self.path)
        self.srv.listen(16)
        self.srv.settimeout(1)  # close() wakes accept(); this is only a second line of defence
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        n = 0
        while not self._stop.is_set():
            try:
                conn, _ = self.srv.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if self._stop.is_set():  # close()'s own connection
                conn.close()
                return
            act = self.acts[min(n, len(self.acts) - 1)] if self.acts else None
            n += 1
            try:
                with conn:
                    self._one(conn, act)
            except OSError:
                pass  # the shim went away first: that is its right
            except BaseException as e:  # reported by close()
                self.errors.append(e)

    def _one(self, conn: socket.socket, act: Act | None) -> None:
        conn.settimeout(10)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(body) < length:
            chunk = conn.recv(1 << 20)
            if not chunk:
                return
            body += chunk
        self.seen.append(Request(head, body))
        if act is None:
            return
        for delay, data in act:
            if delay < 0:  # HANG: until the shim closes its end (or the test ends)
                while not self._stop.is_set():
                    try:
                        if not conn.recv(65536):
                            return
                    except TimeoutError:
                        continue
                return
            if delay:
                time.sleep(delay)  # the misbehaviour under test: a slow daemon, not synchronisation
            conn.sendall(data)

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as wake:
            wake.connect(self.path)  # wakes accept() at once
        self.thread.join(timeout=30)
        self.srv.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        assert not self.thread.is_alive(), "the scripted server did not stop"
        assert not self.errors, self.errors


@contextlib.contextmanager
def scripted(path: Path, acts: Sequence[Act | None]) -> Iterator[Scripted]:
    srv = Scripted(path, acts)
    try:
        yield srv
    finally:
        srv.close()


def once(data: bytes) -> Act:
    """An act sending data at once."""
    return ((0.0, data),)
