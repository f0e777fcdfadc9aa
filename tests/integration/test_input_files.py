"""Hostile files where netcomp reads its inputs: an intent, a static conflist or netcomp.yaml that is endless
(/dev/zero behind a symlink), huge (a 2 GB sparse file) or a FIFO. Each is refused without being read whole and
without blocking, named with why; the networks it feeds keep their last good output; the daemon says degraded,
keeps serving, reloads and stops. And a compile that never finishes: not ready, and SIGTERM still stops it."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from netcomp.daemon.server.client import call
from tests.lab.poll import until
from tests.lab.procdaemon import ProcNode, proc_node

pytestmark = pytest.mark.root


def status(node: ProcNode) -> dict[str, Any]:
    p = node.cli("status", "-o", "json")
    assert p.stdout, p.stderr
    doc: dict[str, Any] = json.loads(p.stdout)
    return doc


def said(doc: dict[str, Any], file: Path | str, words: str) -> dict[str, Any]:
    """The diagnostic about `file` that says `words` (AssertionError when there is none)."""
    for d in doc["diagnostics"]:
        if d["file"] == str(file) and words in d["message"]:
            return dict(d)
    raise AssertionError(f"no diagnostic about {file} saying {words!r}: {json.dumps(doc['diagnostics'], indent=1)}")


def kept(doc: dict[str, Any]) -> set[str]:
    return {n["name"] for n in doc["networks"] if n["keptLastGood"]}


def test_endless_and_huge_inputs_are_refused_unread(tmp_path: Path) -> None:
    """The daemon runs under a 2 GiB address-space limit: reading /dev/zero or the 2 GB file whole fails there
    (MemoryError) instead of taking the machine's memory."""
    with proc_node(tmp_path, wrap=["prlimit", f"--as={2 << 30}", "--"]) as node:
        out = tmp_path / "out"
        good = {n: (out / f"{n}.conflist").read_bytes() for n in ("mgmt", "storage")}
        storage = tmp_path / "networks.d" / "20-storage.yaml"
        storage.unlink()
        storage.symlink_to("/dev/zero")
        static = tmp_path / "static.d" / "lab-bridge.conflist"
        with open(static, "r+b") as f:
            f.truncate(2 << 30)  # sparse: nothing is written
        node.reload()
        doc = status(node)
        assert doc["degraded"] and kept(doc) == {"mgmt", "storage"}
        said(doc, storage, "not a regular file: a character device")
        # The static file's problem, at the networkID of the intent that names it.
        d = said(doc, tmp_path / "networks.d" / "10-mgmt.yaml", "larger than 4 MiB")
        assert str(static) in d["message"] and d["line"] > 0
        assert {n: (out / f"{n}.conflist").read_bytes() for n in good} == good

        node.config.unlink()
        node.config.symlink_to("/dev/zero")
        node.reload()
        doc = status(node)
        assert doc["degraded"]
        said(doc, node.config, "not a regular file: a character device")
        ctr = node.lab.container()
        assert node.shim("ADD", ctr, args="NETCOMP_NETWORKS=storage")[0] == 0  # the last good networks serve
        assert node.shim("DEL", ctr)[0] == 0
        assert node.stop() == 0


def test_fifos_in_place_of_inputs_block_nothing(tmp_path: Path) -> None:
    """An intent replaced by a FIFO (the watcher's compile) and netcomp.yaml replaced by one (SIGHUP): both are
    refused at once, the reload ends (READY=1 again), `netcomp status` answers, and SIGTERM stops the daemon."""
    with proc_node(tmp_path) as node:
        storage = tmp_path / "networks.d" / "20-storage.yaml"
        storage.unlink()
        os.mkfifo(storage)
        node.config.unlink()
        os.mkfifo(node.config)
        node.reload()
        doc = status(node)
        assert doc["degraded"] and "storage" in kept(doc)
        said(doc, storage, "not a regular file: a FIFO")
        said(doc, node.config, "not a regular file: a FIFO")
        assert node.stop() == 0


def readyz(node: ProcNode) -> tuple[int, Any]:
    return call(node.sock, "GET", "/readyz", timeout=10)


def test_a_compile_that_never_finishes_is_not_ready_and_sigterm_still_stops_the_daemon(tmp_path: Path) -> None:
    """NETCOMP_STALL_AT=compile makes every compile after the first wait for ever (as a read from a hung mount
    would). Past compileTimeout the daemon says it is not ready, and why; it serves the last good networks
    meanwhile; SIGTERM stops it."""
    env = {"NETCOMP_STALL_AT": "compile"}
    with proc_node(tmp_path, extra={"compileTimeout": 0.05}, env=env) as node:
        assert readyz(node)[0] == 200
        assert node.proc is not None
        node.proc.send_signal(signal.SIGHUP)

        def not_ready() -> Any:  # the reload thread starts and passes compileTimeout: polled
            answer = readyz(node)
            return answer if answer[0] != 200 else None

        answer = until(not_ready, "still ready", 30, 0.02)
        assert answer[0] == 503 and "has not finished" in answer[1]["why"]
        doc = status(node)
        assert not doc["ready"] and doc["degraded"]
        assert any("has not finished" in d["message"] for d in doc["diagnostics"])
        ctr = node.lab.container()
        assert node.shim("ADD", ctr)[0] == 0
        assert node.shim("DEL", ctr)[0] == 0
        assert node.stop() == 0
        assert "stopping with a compile unfinished" in node.logs()
