"""Malformed, oversized and hostile requests on the daemon's socket: each gets a CNI error (code and message) as
JSON, whatever it is (not HTTP, a namespace that is the host's, a hot-plug of the wrong shape, a client that hangs
up, a peer the daemon refuses), with no traceback, and the daemon keeps serving."""

from __future__ import annotations

import base64
import json
import socket
import struct
from pathlib import Path
from typing import Any

import pytest

from tests.lab.daemonlab import DaemonLab, daemon_lab
from tests.lab.wire import CONF, cni, env, post, raw

pytestmark = pytest.mark.root


@pytest.mark.parametrize(
    ("body", "code", "words"),
    [
        (b"{not json", 6, "not JSON"),
        (b'{"env": {}, "config": "%%%"}', 6, "not valid base64"),
        (json.dumps({"env": {}, "config": base64.b64encode(b"{nope").decode()}).encode(), 6, "not JSON"),
        (b'{"env": {"CNI_COMMAND": 1}, "config": ""}', 4, "strings"),
        (b"[]", 6, '"env" and "config"'),
        (cni(env(CNI_COMMAND="EXPLODE"), CONF), 4, "unknown CNI_COMMAND"),
        (cni(env(CNI_CONTAINERID="../../etc"), CONF), 4, "invalid CNI_CONTAINERID"),
        (cni(env(CNI_IFNAME="../eth0"), CONF), 4, "invalid interface name"),
        (cni(env(CNI_IFNAME="a-very-long-interface"), CONF), 4, "invalid interface name"),
        (cni(env(CNI_NETNS="/var/run/netns/../../etc/passwd"), CONF), 4, "without '..'"),
        (cni(env(CNI_NETNS="/etc/passwd"), CONF), 4, "is not a network namespace"),
        (cni(env(CNI_NETNS="relative/ns"), CONF), 4, "absolute path"),
        (cni(env(CNI_ARGS="NETCOMP_NETWORKS=../../bin/sh"), CONF), 7, "invalid network name"),
        (cni(env(CNI_ARGS="NETCOMP_NETWORKS=nosuchnet"), CONF), 7, "not compiled on this node"),
        (cni(env(CNI_ARGS="NETCOMP_NETWORKS=storage@x/y"), CONF), 4, "invalid interface name"),
        (cni(env(), {**CONF, "cniVersion": "9.9.9"}), 1, "incompatible CNI versions"),
        (cni(env(), b'"a string"'), 6, "not a JSON object"),
    ],
)
def test_malformed_requests_get_cni_errors(dl: DaemonLab, body: bytes, code: int, words: str) -> None:
    status, err = post(dl.sock, body)
    assert status == 400
    assert err["code"] == code and words in err["msg"], err
    assert raw(dl.sock, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")[0] == 200


def test_oversized_body_and_missing_length(dl: DaemonLab) -> None:
    big = b"x" * (10 * 1024 * 1024)
    status, err = post(dl.sock, big)
    assert status == 413 and err["code"] == 101
    status, err = raw(dl.sock, b"POST /cni HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 411 and err["code"] == 6
    status, err = raw(dl.sock, b"PUT /cni HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
    assert status == 405
    status, err = raw(dl.sock, b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 404
    assert raw(dl.sock, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")[0] == 200


@pytest.mark.parametrize(
    ("request_bytes", "status", "code", "words"),
    [
        (b"SSH-2.0-OpenSSH_9.2\r\n\r\n", 400, 6, "not an HTTP/1.1 request"),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400, 6, "not an HTTP/1.1 request"),
        (b"BREW /cni HTTP/1.1\r\nHost: x\r\n\r\n", 405, 7, "not allowed"),
        (b"DELETE /status HTTP/1.1\r\nHost: x\r\n\r\n", 405, 7, "not allowed"),
        (b"GET /cni HTTP/1.1\r\nHost: x\r\n\r\n", 405, 7, "not allowed"),
        (b"POST /cni HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 411, 6, "not chunked"),
        (b"GET / HTTP/1.1\r\nBroken header\r\n\r\n", 400, 6, "malformed header"),
        (b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n", 431, 6, "over 64 KiB"),
    ],
)
def test_anything_gets_a_cni_json_answer(
    dl: DaemonLab, request_bytes: bytes, status: int, code: int, words: str
) -> None:
    got, err = raw(dl.sock, request_bytes)
    assert got == status and err["code"] == code and words in err["msg"], err
    assert raw(dl.sock, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")[0] == 200


@pytest.mark.parametrize(
    ("body", "code", "words"),
    [
        (b"[" * 100_000 + b"]" * 100_000, 6, "not JSON"),
        (cni(env(), b'{"cniVersion": "1.0.0", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"), 6, "not JSON"),
        (cni(env(CNI_CONTAINERID="abc\n"), CONF), 4, "invalid CNI_CONTAINERID"),
        (cni(env(CNI_IFNAME="e\x01th"), CONF), 4, "invalid interface name"),
        (cni(env(CNI_IFNAME="eth 0"), CONF), 4, "invalid interface name"),
        (cni(env(CNI_IFNAME="\u00e9th0"), CONF), 4, "invalid interface name"),
        # PID 1's: refused as the host's, or (in a sandbox whose PID 1 root may not open) as unreadable.
        (cni(env(CNI_NETNS="/proc/1/ns/net"), CONF), 4, ""),
        (cni(env(CNI_NETNS="/proc/self/ns/net"), CONF), 4, "the host's network namespace"),
    ],
)
def test_hostile_requests_get_cni_errors_and_no_traceback(
    dl: DaemonLab, body: bytes, code: int, words: str, caplog: pytest.LogCaptureFixture
) -> None:
    status, err = post(dl.sock, body)
    assert status == 400 and err["code"] == code and words in err["msg"], err
    dl.settled()  # the request's log line: written once its answer is out
    assert not [r for r in caplog.records if r.exc_info or r.levelname == "ERROR"]
    assert dl.cache_files() == []


def test_the_labs_host_namespace_is_refused_too(dl: DaemonLab) -> None:
    """The namespace the delegates run in (here the lab's "host") is the host for them: never a container's."""
    status, err = post(dl.sock, cni(env(CNI_NETNS=f"/var/run/netns/{dl.lab.host}"), CONF))
    assert status == 400 and err["code"] == 4 and "the host's network namespace" in err["msg"]
    assert sorted(dl.lab.links(dl.lab.host)) == ["lo", "ncm0", "ncm0p"]


@pytest.mark.parametrize(
    ("doc", "code", "words"),
    [
        ({"command": "ADD", "containerID": "c", "network": "storage", "netns": ["/x"]}, 7, "netns must be a string"),
        ({"command": "ADD", "containerID": 5, "network": "storage", "netns": "/x"}, 7, "containerID must be a string"),
        ({"command": ["ADD"], "containerID": "c", "network": "storage"}, 4, "command must be ADD or DEL"),
        ({"command": "ADD", "containerID": "c", "network": "storage", "runtimeIfname": 1}, 7, "runtimeIfname"),
        ({"command": "ADD", "containerID": "c\n", "network": "storage", "netns": "/x"}, 4, "invalid container id"),
        ([1, 2], 6, "JSON object"),
    ],
)
def test_hotplug_requests_of_the_wrong_shape(dl: DaemonLab, doc: Any, code: int, words: str) -> None:
    status, err = post(dl.sock, json.dumps(doc).encode(), path="/delegate")
    assert status == 400 and err["code"] == code and words in err["msg"], err


def test_a_client_that_hangs_up_leaves_no_traceback(dl: DaemonLab, caplog: pytest.LogCaptureFixture) -> None:
    for request_bytes in (
        b"GET /status HTTP/1.1\r\nHost: x\r\n\r\n",
        b"POST /cni HTTP/1.1\r\nContent-Length: 100\r\n\r\n{",
        b"GET /attachments HTTP/1.1\r\nHost: x\r\n\r\n",
    ):
        for _ in range(20):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(dl.sock)
            s.sendall(request_bytes)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
    assert raw(dl.sock, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")[0] == 200
    dl.settled()
    assert not [r for r in caplog.records if r.exc_info or r.levelname in ("ERROR", "WARNING")]


def test_cli_reports_a_refusal_without_a_traceback(tmp_path: Path) -> None:
    """`netcomp status` / `attachments` against a daemon that refuses this peer (root is not in allowedUids):
    exit 1 and the daemon's words, not an internal error."""
    import io

    from netcomp.cli.main import main

    with daemon_lab(tmp_path, extra={"allowedUids": [4242]}) as dl:
        cfg = tmp_path / "cli.yaml"
        cfg.write_text(f"socket: {dl.sock}\n")
        for command in ("status", "attachments"):
            out, err = io.StringIO(), io.StringIO()
            assert main([command, "--config", str(cfg)], out, err) == 1
            assert err.getvalue() == "netcomp: the daemon refused: peer uid 0 may not use the netcomp socket\n"
            assert out.getvalue() == ""
