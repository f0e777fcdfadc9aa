"""The shim: what it answers alone, how it behaves with the daemon away, and that its wire format is the
daemon's (netcomp/protocol.py)."""

from __future__ import annotations

import contextlib
import io
import json
import socket
import subprocess
import threading
from pathlib import Path

import pytest

from netcomp import protocol
from netcomp.shim import install as shimlaunch
from netcomp.shim import plugin as shim

SHIM = Path(shim.__file__)


def run(env: dict[str, str], config: bytes) -> tuple[int, bytes]:
    out = io.BytesIO()
    code = shim.run(env, io.BytesIO(config), out)
    return code, out.getvalue()


def test_version_is_answered_without_the_daemon() -> None:
    code, out = run({"CNI_COMMAND": "VERSION"}, b"")
    assert code == 0
    assert json.loads(out)["supportedVersions"] == ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]


def test_daemon_down_is_a_named_error_for_every_verb_del_too(tmp_path: Path) -> None:
    """A DEL that could not run is never reported as done (the runtime retries it): code 11, as for ADD."""
    sock = str(tmp_path / "nothing.sock")
    conf = json.dumps({"cniVersion": "0.4.0", "socket": sock, "readyTimeout": 0.05}).encode()
    for verb in ("ADD", "DEL", "CHECK"):
        code, out = run({"CNI_COMMAND": verb, "CNI_CONTAINERID": "c"}, conf)
        err = json.loads(out)
        assert code == 1 and err["code"] == 11 and err["cniVersion"] == "0.4.0", (verb, err)
        assert sock in err["msg"] and "systemctl status netcomp" in err["details"]
        assert ("did not run to the end" in err["details"]) == (verb == "DEL")


def test_wire_format_agrees_with_the_daemon() -> None:
    env = {
        "CNI_COMMAND": "ADD",
        "CNI_CONTAINERID": 'a"b\\c',
        "CNI_NETNS": "/var/run/netns/x",
        "CNI_IFNAME": "eth0",
        "CNI_ARGS": "K8S_POD_NAME=caf\u00e9;X=\n\t",
        "CNI_PATH": "/usr/lib/cni",
        "UNRELATED": "not sent",
    }
    config = json.dumps({"cniVersion": "1.0.0", "name": "netcomp", "type": "netcomp", "args": {"x": "\u2603"}})
    body = shim.encode_request(env, config.encode())
    got_env, got_config, _ = protocol.decode_request(body)
    assert got_env == {k: v for k, v in env.items() if k != "UNRELATED"}
    assert got_config == json.loads(config)
    assert shim.ENV_KEYS == protocol.ENV_KEYS and shim.SHIM_HEADER == protocol.SHIM_HEADER
    ours = protocol.encode_request(env, config.encode())
    assert protocol.decode_request(ours)[:2] == (got_env, got_config)


def test_config_fields_are_read_without_a_json_parser() -> None:
    text = '{"cniVersion": "0.3.1", "socket" : "/run/x \\"y\\".sock", "readyTimeout": 2.5, "name": "n"}'
    keys = ("cniVersion", "socket", "readyTimeout", "missing")
    assert shim.top_level(text, keys) == {"cniVersion": "0.3.1", "socket": '/run/x "y".sock', "readyTimeout": "2.5"}


def test_only_top_level_keys_count() -> None:
    """A nested "socket" (in args, a prevResult, a string value) is not the shim's; the last top-level one wins,
    as with json.loads."""
    text = json.dumps(
        {
            "args": {"socket": "/evil.sock", "x": ["socket", {"readyTimeout": 0}]},
            "name": "socket",
            "socket": "/a.sock",
            "note": 'a "socket": "/b.sock" in a string',
        }
    )
    assert shim.top_level(text, ("socket", "readyTimeout")) == {"socket": "/a.sock"}
    assert shim.top_level('{"socket": "/1", "socket": "/2"}', ("socket",)) == {"socket": "/2"}
    for junk in ["", "[", '{"socket"', '{"socket": "/x', "\\", '"}{"', '{"a": "\\"}', "{{{{"]:
        shim.top_level(junk, ("socket",))  # nothing but a dict, whatever the text


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, 10.0), ("2.5", 2.5), ("0", 0.0), ("-1", 10.0), ("nan", 10.0), ("inf", 10.0), ("x", 10.0), ("1e99", 10.0)],
)
def test_ready_timeout_is_sane(value: str | None, expected: float) -> None:
    assert shim.ready_timeout(value) == expected


def test_retries_while_the_daemon_is_not_ready(tmp_path: Path) -> None:
    """A scripted server stands in for a starting daemon (503 twice, then the answer), so the retry can be
    observed; the real daemon is exercised in tests/integration."""
    path = str(tmp_path / "d.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(4)
    srv.settimeout(30)  # if the shim gives up early, the server thread must not wait forever
    seen: list[bytes] = []

    def serve() -> None:
        with contextlib.suppress(TimeoutError):
            _serve()

    def _serve() -> None:
        for status, body in ((503, b'{"code":11}'), (503, b'{"code":11}'), (200, b'{"cniVersion":"1.0.0"}')):
            conn, _ = srv.accept()
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, _, rest = data.partition(b"\r\n\r\n")
            length = int(next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")).split(b":")[1])
            while len(rest) < length:
                rest += conn.recv(65536)
            seen.append(rest)
            conn.sendall(b"HTTP/1.1 %d X\r\nContent-Length: %d\r\n\r\n%s" % (status, len(body), body))
            conn.close()

    t = threading.Thread(target=serve)
    t.start()
    code, out = run({"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c"}, json.dumps({"socket": path}).encode())
    t.join()
    srv.close()
    assert (code, out) == (0, b'{"cniVersion":"1.0.0"}\n')
    assert len(seen) == 3 and protocol.decode_request(seen[-1])[0]["CNI_CONTAINERID"] == "c"


def test_shim_imports_nothing_heavy() -> None:
    """Start-up cost is the import graph: the shim may load only C modules and what `python3 -I -S` loads
    anyway (json would pull in re and enum; http.client far more)."""
    p = subprocess.run(
        ["python3", "-I", "-S", "-X", "importtime", str(SHIM)],
        env={"CNI_COMMAND": "VERSION"},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    bare = subprocess.run(
        ["python3", "-I", "-S", "-X", "importtime", "-c", "pass"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )

    def modules(stderr: str) -> set[str]:
        return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines() if line.startswith("import time:")}

    extra = modules(p.stderr) - modules(bare.stderr) - {"module"}
    assert extra <= {"_socket", "binascii", "time"}, extra
    assert json.loads(p.stdout)["cniVersion"] == "1.0.0"
    # A request with plain ASCII values (here: ADD with the daemon away) does not load _json either.
    conf = json.dumps({"cniVersion": "1.0.0", "socket": "/nonexistent/n.sock", "readyTimeout": 0}).encode()
    p = subprocess.run(
        ["python3", "-I", "-S", "-X", "importtime", str(SHIM)],
        env={"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_NETNS": "/run/netns/x", "CNI_IFNAME": "eth0"},
        input=conf,
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert p.returncode == 1 and json.loads(p.stdout)["code"] == 11
    assert "_json" not in modules(p.stderr.decode()) - modules(bare.stderr)


def test_values_with_escapes_still_round_trip() -> None:
    """The fast paths (no _json) must hand anything unusual to the real encoder and decoder."""
    for value in ["plain", 'q"uote', "back\\slash", "tab\t", "caf\u00e9", "\x7f", ""]:
        assert json.loads(shim._q(value)) == value
        text = json.dumps({"socket": value, "other": 1})
        assert shim.top_level(text, ("socket",)) == {"socket": value}


def test_shim_runs_through_its_own_shebang(tmp_path: Path) -> None:
    """Installed, the shim is exec'd directly: the kernel passes everything after the interpreter in a shebang as
    one argument, so the flags must be one token ("-IS", not "-I -S")."""
    exe = tmp_path / "netcomp"
    exe.write_bytes(SHIM.read_bytes())
    exe.chmod(0o755)
    first = SHIM.read_text().splitlines()[0]
    assert first.startswith("#!/usr/bin/python3 ") and len(first.split()) == 2
    p = subprocess.run([str(exe)], env={"CNI_COMMAND": "VERSION"}, capture_output=True, timeout=30, check=False)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["cniVersion"] == "1.0.0"


def test_installed_launcher_runs_the_shim_from_bytecode(tmp_path: Path) -> None:
    """As installed (debian/rules, netcomp.shimlaunch): the CNI plugin is a launcher importing the shim from a
    directory, and once compiled (postinst) it runs from the bytecode without compiling the source."""
    plugin, shim_dir = tmp_path / "bin" / "netcomp", tmp_path / "lib"
    shimlaunch.install(plugin, shim_dir)
    p = subprocess.run([str(plugin)], env={"CNI_COMMAND": "VERSION"}, capture_output=True, timeout=30, check=True)
    assert json.loads(p.stdout)["supportedVersions"][-1] == "1.1.0"
    pyc = list((shim_dir / "__pycache__").glob("netcomp_shim.cpython-*.pyc"))
    assert len(pyc) == 1
    p = subprocess.run(
        [shimlaunch.INTERPRETER, "-I", "-S", "-v", str(plugin)],
        env={"CNI_COMMAND": "VERSION"},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert f"code object from '{pyc[0]}'" in p.stderr
    # The same wire behaviour as the shim run directly: ADD with the daemon away is a named CNI error.
    conf = json.dumps({"cniVersion": "0.4.0", "socket": str(tmp_path / "none.sock"), "readyTimeout": 0}).encode()
    env = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_NETNS": "/run/netns/x", "CNI_IFNAME": "eth0"}
    p = subprocess.run([str(plugin)], env=env, input=conf, capture_output=True, timeout=30, check=False)
    assert p.returncode == 1 and json.loads(p.stdout)["cniVersion"] == "0.4.0"


def test_launcher_without_its_shim_answers_a_cni_error(tmp_path: Path) -> None:
    plugin, shim_dir = tmp_path / "netcomp", tmp_path / "lib"
    shimlaunch.install(plugin, shim_dir, compile_now=False)
    (shim_dir / shimlaunch.MODULE).unlink()
    p = subprocess.run([str(plugin)], env={"CNI_COMMAND": "VERSION"}, capture_output=True, timeout=30, check=False)
    err = json.loads(p.stdout)
    assert p.returncode == 1 and err["code"] == 999 and str(shim_dir) in err["msg"] and p.stderr == b""


def test_install_shim_command_installs_a_working_plugin(tmp_path: Path) -> None:
    """`netcomp install-shim`, for a node without the Debian package: the same launcher and bytecode."""
    from netcomp.cli import main

    out, err = io.StringIO(), io.StringIO()
    bin_dir, lib = tmp_path / "opt-cni-bin", tmp_path / "lib" / "shim"
    assert main(["install-shim", "--cni-bin-dir", str(bin_dir), "--shim-dir", str(lib)], out, err) == 0
    assert out.getvalue() == f"installed {bin_dir / 'netcomp'} (the shim: {lib / 'netcomp_shim.py'})\n"
    p = subprocess.run([str(bin_dir / "netcomp")], env={"CNI_COMMAND": "VERSION"}, capture_output=True, timeout=30)
    assert p.returncode == 0 and json.loads(p.stdout)["cniVersion"] == "1.0.0"
    assert list((lib / "__pycache__").glob("netcomp_shim.cpython-*.pyc"))
    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where the shim dir should go
    assert main(["install-shim", "--cni-bin-dir", str(bin_dir), "--shim-dir", str(blocked / "x")], out, err) == 73
    assert err.getvalue().startswith("netcomp: cannot install the shim: ")


def test_an_answer_cut_short_is_an_error_not_a_result(tmp_path: Path) -> None:
    """A scripted server (the real daemon never does this) promises 100 bytes, sends 10 and closes: the shim
    must not print the fragment as a result."""
    path = str(tmp_path / "d.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)
    srv.settimeout(30)

    def serve() -> None:
        conn, _ = srv.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b'{"cniVersi')

    t = threading.Thread(target=serve)
    t.start()
    conf = json.dumps({"cniVersion": "1.0.0", "socket": path, "readyTimeout": 0}).encode()
    code, out = run({"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c"}, conf)
    t.join()
    srv.close()
    err = json.loads(out)
    assert (
        code == 1 and err["code"] == 11 and err["msg"].endswith(": the daemon went away before its answer was complete")
    )


class Scripted:
    """A unix socket server that answers each connection with the next of `answers` (raw bytes, sent after the
    whole request is read; None: close without a word), recording the requests. Stands in for the daemon where
    the test needs it to misbehave; the real daemon is exercised in tests/integration."""

    def __init__(self, path: Path, answers: list[bytes | None]) -> None:
        self.path = str(path)
        self.answers = answers
        self.seen: list[bytes] = []
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(self.path)
        self.srv.listen(8)
        self.srv.settimeout(30)  # if the shim gives up early, the server thread must not wait forever
        self.thread = threading.Thread(target=self._serve)
        self.thread.start()

    def _serve(self) -> None:
        with contextlib.suppress(TimeoutError, OSError):
            for answer in self.answers:
                conn, _ = self.srv.accept()
                with conn:
                    data = b""
                    while b"\r\n\r\n" not in data:
                        data += conn.recv(65536)
                    head, _, rest = data.partition(b"\r\n\r\n")
                    length = int(
                        next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")).split(b":")[1]
                    )
                    while len(rest) < length:
                        rest += conn.recv(65536)
                    self.seen.append(rest)
                    if answer is not None:
                        conn.sendall(answer)

    def close(self) -> None:
        self.thread.join()
        self.srv.close()


def _answer(status: int, body: bytes) -> bytes:
    return b"HTTP/1.1 %d X\r\nContent-Length: %d\r\n\r\n%s" % (status, len(body), body)


TAKEN = b"HTTP/1.1 102 Processing\r\n\r\n"


@pytest.mark.parametrize(
    ("answers", "code", "out"),
    [
        # busy (429) and starting (503) are tried again
        ([_answer(429, b'{"code":11}'), _answer(503, b'{"code":11}'), _answer(200, b'{"a":1}')], 0, b'{"a":1}\n'),
        # taken, then answered
        ([TAKEN + _answer(200, b'{"a":2}')], 0, b'{"a":2}\n'),
        # taken, then the daemon died with the request: posted again, answered
        ([TAKEN + b"HTTP/1.1 200 OK\r\nContent-Le", None, _answer(200, b'{"a":3}')], 0, b'{"a":3}\n'),
        # a CNI error from the daemon is printed as it is
        (
            [_answer(400, b'{"cniVersion":"1.0.0","code":7,"msg":"m"}')],
            1,
            b'{"cniVersion":"1.0.0","code":7,"msg":"m"}\n',
        ),
        # an empty 200 (DEL, CHECK) prints nothing
        ([TAKEN + _answer(200, b"")], 0, b""),
    ],
)
def test_daemon_answers(tmp_path: Path, answers: list[bytes | None], code: int, out: bytes) -> None:
    srv = Scripted(tmp_path / "d.sock", answers)
    conf = json.dumps({"socket": srv.path, "readyTimeout": 5}).encode()
    try:
        got = run({"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c"}, conf)
    finally:
        srv.close()
    assert got == (code, out)
    assert len(srv.seen) == len(answers)


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (b"SSH-2.0-OpenSSH\r\n\r\n", "not HTTP"),
        (b"HTTP/1.1 500 Oops\r\nContent-Length: 5\r\n\r\noops!", "answered HTTP 500"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 99999999\r\n\r\n", "over 4 MiB"),
        (b"HTTP/1.1 200 OK\r\n\r\n{}", "not HTTP"),  # no Content-Length: not what the daemon sends
    ],
)
def test_answers_that_are_not_the_daemons_are_errors(tmp_path: Path, answer: bytes, words: str) -> None:
    srv = Scripted(tmp_path / "d.sock", [answer])
    conf = json.dumps({"socket": srv.path, "readyTimeout": 0}).encode()
    try:
        code, out = run({"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c"}, conf)
    finally:
        srv.close()
    err = json.loads(out)
    assert code == 1 and err["code"] == 999 and words in err["msg"], err
