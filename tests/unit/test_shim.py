"""The shim, both of them: every behaviour test runs against the Python shim (plugin.py, installed behind its
launcher), the compiled shim (netcomp-shim.c) and the compiled shim under ASan/UBSan, each exec'd as a runtime
execs a plugin (shimlab.py). Then what only the Python shim has (its import graph, its launcher), the compiled
shim's constants against plugin.py's and protocol.py's, and `netcomp install-shim`. Hypothesis drives both shims
in test_shim_props.py."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from netcomp.cni import codes as cnicodes
from netcomp.daemon.server import protocol
from netcomp.delegate import request
from netcomp.shim import install as shimlaunch
from netcomp.shim import plugin
from tests.lab.checkout import ROOT
from tests.lab.processes import reap
from tests.lab.shimlab import HANG, SHIMS, TAKEN, Act, Shim, answer, once, pick, scripted

SHIM = Path(plugin.__file__)
ADD = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c"}


def conf(**fields: object) -> bytes:
    return json.dumps(fields).encode()


def test_version_is_answered_without_the_daemon(shim: Shim) -> None:
    r = shim.run({"CNI_COMMAND": "VERSION"})
    assert r.code == 0
    assert r.out == b'{"cniVersion":"1.0.0","supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}\n'


def test_daemon_down_is_a_named_error_for_every_verb_del_too(shim: Shim, sockdir: Path) -> None:
    """A DEL that could not run is never reported as done (the runtime retries it): code 11, as for ADD."""
    sock = str(sockdir / "nothing.sock")
    for verb in ("ADD", "DEL", "CHECK"):
        r = shim.run(
            {"CNI_COMMAND": verb, "CNI_CONTAINERID": "c"}, conf(cniVersion="0.4.0", socket=sock, readyTimeout=0.05)
        )
        err = json.loads(r.out)
        assert r.code == 1 and err["code"] == 11 and err["cniVersion"] == "0.4.0", (verb, err)
        assert err["msg"] == f"netcomp daemon is not answering on {sock}: No such file or directory"
        assert err["details"].endswith("see `systemctl status netcomp` and `journalctl -u netcomp`")
        assert err["details"].startswith("the DEL did not run to the end; retry it. ") == (verb == "DEL")


def test_the_request_on_the_wire_is_the_daemons(shim: Shim, sockdir: Path) -> None:
    """What reaches the daemon: POST /cni with the shim's header and exactly the CNI variables, JSON-escaped
    (quotes, control characters, non-ASCII, bytes that are not UTF-8), decoded by
    delegate/request.py as they were set."""
    env: dict[str, str | bytes] = {
        "CNI_COMMAND": "ADD",
        "CNI_CONTAINERID": 'a"b\\c',
        "CNI_NETNS": "/var/run/netns/x",
        "CNI_IFNAME": "eth0",
        "CNI_ARGS": "K8S_POD_NAME=caf\u00e9;X=\n\t\x7f\U0001f600".encode() + b";BAD=\xff\xed\xa0\x80",
        "CNI_PATH": "",
        "UNRELATED": "not sent",
    }
    config = json.dumps({"cniVersion": "1.0.0", "name": "n", "type": "netcomp", "args": {"x": "\u2603"}})
    config = config[:-1] + f', "socket": "{sockdir / "d.sock"}"}}'
    with scripted(sockdir / "d.sock", [once(answer(200, b'{"cniVersion":"1.0.0"}'))]) as srv:
        r = shim.run(env, config.encode())
    assert (r.code, r.out) == (0, b'{"cniVersion":"1.0.0"}\n')
    (req,) = srv.seen
    lines = req.head.split(b"\r\n")
    assert lines[0] == b"POST " + protocol.CNI_PATH.encode() + b" HTTP/1.1"
    assert protocol.SHIM_HEADER.encode() + b": 1" in lines
    assert b"Content-Length: %d" % len(req.body) in lines
    got_env, got_config, _ = request.decode(req.body)
    assert got_env == {k: os.fsdecode(v) for k, v in env.items() if k != "UNRELATED"}
    assert got_config == json.loads(config)
    # The Python shim's encoder is what the compiled one must match byte for byte (test_shim_props.py compares
    # them on generated environments).
    assert req.body == plugin.encode_request({k: os.fsdecode(v) for k, v in env.items()}, config.encode())


def test_wire_format_agrees_with_the_daemon() -> None:
    env = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c", "CNI_ARGS": "K=caf\u00e9", "UNRELATED": "not sent"}
    config = json.dumps({"cniVersion": "1.0.0", "name": "netcomp", "type": "netcomp"}).encode()
    assert request.decode(plugin.encode_request(env, config)) == request.decode(protocol.encode_request(env, config))
    assert plugin.ENV_KEYS == protocol.ENV_KEYS and plugin.SHIM_HEADER == protocol.SHIM_HEADER


@pytest.mark.parametrize(
    ("acts", "code", "out"),
    [
        # busy (429) and starting (503) are tried again
        (
            [once(answer(429, b'{"code":11}')), once(answer(503, b'{"code":11}')), once(answer(200, b'{"a":1}'))],
            0,
            b'{"a":1}\n',
        ),
        # a daemon that closes without a word, then answers: tried again
        ([None, once(answer(200, b'{"a":1}\n'))], 0, b'{"a":1}\n'),
        # taken, then answered; 1xx answers may come more than once, in pieces
        ([once(TAKEN + answer(200, b'{"a":2}'))], 0, b'{"a":2}\n'),
        ([((0, TAKEN[:5]), (0.02, TAKEN[5:] + TAKEN), (0.02, answer(200, b'{"a":2}')))], 0, b'{"a":2}\n'),
        # taken, then the daemon died with the request: posted again, answered
        ([once(TAKEN + b"HTTP/1.1 200 OK\r\nContent-Le"), None, once(answer(200, b'{"a":3}'))], 0, b'{"a":3}\n'),
        # a CNI error from the daemon is printed as it is
        (
            [once(answer(400, b'{"cniVersion":"1.0.0","code":7,"msg":"m"}'))],
            1,
            b'{"cniVersion":"1.0.0","code":7,"msg":"m"}\n',
        ),
        # an empty 200 (DEL, CHECK) prints nothing
        ([once(TAKEN + answer(200, b""))], 0, b""),
        # the head's fields in any case and spacing; what follows the body is not read
        ([once(b"HTTP/1.0 200 OK\r\nX: y\r\ncOnTeNt-LeNgTh:\t 3 \r\n\r\n{}\nmore")], 0, b"{}\n"),
    ],
)
def test_daemon_answers(shim: Shim, sockdir: Path, acts: list[Act | None], code: int, out: bytes) -> None:
    with scripted(sockdir / "d.sock", acts) as srv:
        r = shim.run(ADD, conf(socket=srv.path, readyTimeout=5))
    assert (r.code, r.out) == (code, out)
    assert len(srv.seen) == len(acts)


@pytest.mark.parametrize(
    ("answer_", "words", "details"),
    [
        (b"SSH-2.0-OpenSSH\r\n\r\n", "answered something that is not HTTP", "SSH-2.0-OpenSSH\r\n\r\n"),
        (b"HTTP/1.1 500 Oops\r\nContent-Length: 5\r\n\r\noops!", "answered HTTP 500", "oops!"),
        (b"HTTP/1.1 204 OK\r\nContent-Length: 2\r\n\r\n[]", "answered HTTP 204", "[]"),
        (b"HTTP/1.1 000 OK\r\nContent-Length: 2\r\n\r\n{}", "answered something that is not HTTP", "{}"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 99999999\r\n\r\n", "answer is over 4 MiB", "not printed"),
        (b"HTTP/1.1 200 OK\r\n\r\n{}", "answered something that is not HTTP", "HTTP/1.1 200 OK\r\n\r\n"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 1e3\r\n\r\n{}", "not HTTP", "HTTP/1.1 200 OK\r\n"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 1234567890\r\n\r\n{}", "not HTTP", "HTTP/1.1 200 OK\r\n"),
        (b"HTTP/1.1 200 OK\r\nContent-Length\r\n\r\n{}", "not HTTP", "HTTP/1.1 200 OK\r\n"),
        (b"HTTP/2 200 OK\r\nContent-Length: 2\r\n\r\n{}", "not HTTP", "HTTP/2 200"),
        (b"HTTP/1.1  200 OK\r\nContent-Length: 2\r\n\r\n{}", "not HTTP", "HTTP/1.1  200"),
        (TAKEN + b"\xff\xfe junk \xe2\x82\r\n\r\n", "not HTTP", "\ufffd\ufffd junk \ufffd\r\n\r\n"),
        (b"x" * 70000 + b"\r\n\r\n", "not HTTP", "x" * 300),
    ],
)
def test_answers_that_are_not_the_daemons_are_errors(
    shim: Shim, sockdir: Path, answer_: bytes, words: str, details: str
) -> None:
    with scripted(sockdir / "d.sock", [once(answer_)]) as srv:
        r = shim.run(ADD, conf(cniVersion="0.3.1", socket=srv.path, readyTimeout=0))
    err = json.loads(r.out)
    assert r.code == 1 and err["code"] == 999 and err["cniVersion"] == "0.3.1" and words in err["msg"], err
    assert err["details"].startswith(details), err


def test_an_answer_cut_short_is_an_error_not_a_result(shim: Shim, sockdir: Path) -> None:
    """A daemon that promises 100 bytes, sends 10 and closes: the fragment is not a result."""
    with scripted(sockdir / "d.sock", [once(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b'{"cniVersi')]) as srv:
        r = shim.run(ADD, conf(socket=srv.path, readyTimeout=0))
    err = json.loads(r.out)
    assert r.code == 1 and err["code"] == 11
    assert err["msg"].endswith(": the daemon went away before its answer was complete")


def test_answers_of_4_mib_are_printed_and_larger_ones_refused(shim: Shim, sockdir: Path) -> None:
    body = b'{"x":"' + b"y" * (plugin.MAX_ANSWER - 8) + b'"}'
    assert len(body) == plugin.MAX_ANSWER
    too_big = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n{" % (plugin.MAX_ANSWER + 1)
    with scripted(sockdir / "d.sock", [once(TAKEN + answer(200, body)), once(too_big)]) as srv:
        r = shim.run(ADD, conf(socket=srv.path, readyTimeout=0))
        assert (r.code, r.out) == (0, body + b"\n")
        r = shim.run(ADD, conf(socket=srv.path, readyTimeout=0))
    err = json.loads(r.out)
    assert r.code == 1 and err["code"] == 999 and err["msg"] == "netcomp daemon's answer is over 4 MiB"


def test_a_config_over_4_mib_is_not_sent(shim: Shim, sockdir: Path) -> None:
    with scripted(sockdir / "d.sock", [once(answer(200, b"{}"))]) as srv:
        head = b'{"cniVersion": "0.4.0", "socket": "%s", "x": "' % srv.path.encode()
        r = shim.run(ADD, head + b"z" * (plugin.MAX_CONFIG + 1 - len(head)))
        assert srv.seen == []  # nothing of it reached the daemon
    err = json.loads(r.out)
    assert (r.code, err["code"], err["cniVersion"]) == (1, 7, "0.4.0")
    assert (err["msg"], err["details"]) == ("network configuration is over 4 MiB", "not sent")


def test_a_socket_that_is_no_path_is_a_config_error(shim: Shim) -> None:
    """A lone surrogate cannot be encoded as a file name (Python's connect() would raise, not fail)."""
    r = shim.run(ADD, b'{"cniVersion": "0.4.0", "socket": "/run/\\ud800.sock", "readyTimeout": 0}')
    err = json.loads(r.out)
    assert (r.code, err["code"], err["msg"]) == (1, 7, "network configuration's socket is not a valid path")


def test_a_daemon_that_dies_with_the_request_gets_it_again_max_restarts_times(shim: Shim, sockdir: Path) -> None:
    """Each death after '102 Processing' posts the request again with a fresh readyTimeout, MAX_RESTARTS times;
    then the error says what happened."""
    with scripted(sockdir / "d.sock", [once(TAKEN)]) as srv:
        r = shim.run({"CNI_COMMAND": "DEL", "CNI_CONTAINERID": "c"}, conf(socket=srv.path, readyTimeout=0))
    err = json.loads(r.out)
    assert len(srv.seen) == plugin.MAX_RESTARTS + 1
    assert r.code == 1 and err["code"] == 11 and err["details"].startswith("the DEL did not run to the end")
    assert err["msg"].endswith(": the daemon went away before its answer was complete")


def test_a_taken_request_may_take_longer_than_ready_timeout(shim: Shim, sockdir: Path) -> None:
    """After '102 Processing' the daemon bounds the work: the shim waits past readyTimeout and TAKE_MIN."""
    late = plugin.TAKE_MIN + 0.3
    with scripted(sockdir / "d.sock", [((0, TAKEN), (late, answer(200, b'{"late":1}')))]) as srv:
        r = shim.run(ADD, conf(socket=srv.path, readyTimeout=0))
    assert (r.code, r.out) == (0, b'{"late":1}\n') and r.seconds >= late
    assert len(srv.seen) == 1


def test_a_silent_daemon_gets_take_min_then_an_error(shim: Shim, sockdir: Path) -> None:
    """A daemon that accepts and says nothing: readyTimeout 0 still waits TAKE_MIN for it to take the request."""
    with scripted(sockdir / "d.sock", [HANG]) as srv:
        r = shim.run(ADD, conf(socket=srv.path, readyTimeout=0))
    err = json.loads(r.out)
    assert r.code == 1 and err["code"] == 11 and err["msg"].endswith(": timed out"), err
    assert plugin.TAKE_MIN <= r.seconds < plugin.TAKE_MIN + 1.5
    assert len(srv.seen) == 1


def test_an_answer_nobody_reads_is_a_failure(shim: Shim) -> None:
    """The runtime stopped reading (stdout is a pipe with no reader): exit status 1, no signal, no traceback."""
    r_fd, w_fd = os.pipe()
    os.close(r_fd)
    try:
        p = subprocess.run(
            shim.argv,
            env={"CNI_COMMAND": "VERSION", **shim.extra_env},
            stdin=subprocess.DEVNULL,
            stdout=w_fd,
            stderr=subprocess.PIPE,
            timeout=30,
            check=False,
        )
    finally:
        os.close(w_fd)
    assert (p.returncode, p.stderr) == (1, b"")


def test_a_shim_started_with_stdout_closed_asks_nothing(shim: Shim, sockdir: Path) -> None:
    """Nobody can read an answer, so nothing is asked of the daemon (and no socket of the shim's may take fd 1,
    where the answer would go): exit status 1."""
    with scripted(sockdir / "d.sock", [once(answer(200, b"{}"))]) as srv:
        p = subprocess.run(
            ["/bin/sh", "-c", 'exec "$0" >&-', *shim.argv],  # only a shell starts a program with an fd closed
            env={"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c", **shim.extra_env},
            input=conf(socket=srv.path, readyTimeout=0),
            stderr=subprocess.PIPE,
            timeout=30,
            check=False,
        )
    assert (p.returncode, p.stderr, srv.seen) == (1, b"", [])


@pytest.mark.skipif(os.geteuid() != 0, reason="the daemon serves only uid 0 by default (allowedUids)")
def test_every_shim_gets_the_same_answers_from_the_real_daemon(shims: dict[str, Shim], tmp_path: Path) -> None:
    """The real daemon (`netcomp daemon --root`, no networks, so no plugin runs): its CNI error printed as it is,
    a DEL of nothing done, the same bytes from every shim. The shims' readyTimeout waits for it to serve."""
    sockdir = Path(tempfile.mkdtemp(prefix="ncs-"))  # --root: the socket path must stay short
    daemon = subprocess.Popen(
        [str(Path(sys.executable).parent / "netcomp"), "daemon", "--root", str(sockdir), "--log-level", "error"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        sock = f"{sockdir}/run/netcomp/netcomp.sock"
        config = conf(cniVersion="1.0.0", name="netcomp", type="netcomp", socket=sock, readyTimeout=30)
        env = {"CNI_CONTAINERID": "ctr-x", "CNI_NETNS": "/var/run/netns/none", "CNI_IFNAME": "eth0", "CNI_PATH": "/"}
        seen = {}
        for name in SHIMS:
            shim = pick(shims, name)
            check = shim.run({**env, "CNI_COMMAND": "CHECK"}, config)
            delete = shim.run({**env, "CNI_COMMAND": "DEL"}, config)
            seen[name] = (check.code, check.out, delete.code, delete.out)
        err = json.loads(seen["python"][1])
        assert seen["python"][0] == 1 and err["code"] == 3 and "ctr-x" in err["msg"], err
        assert seen["python"][2:] == (0, b"")
        assert seen["c"] == seen["python"] and seen["c-asan"] == seen["python"]
    finally:
        daemon.terminate()
        reap(daemon, 30)
        shutil.rmtree(sockdir, ignore_errors=True)


# ---- the compiled shim's copies of the rules ----

C_SOURCE = shimlaunch.SOURCE.read_text()


def c_define(name: str) -> str:
    m = re.search(rf"^#define NC_{name} (.+)$", C_SOURCE, re.M)
    assert m, name
    return m.group(1).strip()


def c_string(name: str) -> str:
    value = c_define(name)
    assert value.startswith('"') and value.endswith('"'), value
    parsed: str = json.loads(value)  # the C literals here use only escapes JSON shares
    return parsed


def c_number(name: str) -> float:
    return float(eval(c_define(name), {"__builtins__": {}}))  # "(4 << 20)", "10.0", "429": C and Python agree


def test_the_compiled_shims_constants_are_plugin_pys_and_protocol_pys() -> None:
    assert c_string("DEFAULT_SOCKET") == plugin.DEFAULT_SOCKET
    assert c_string("VERSIONS") == plugin.VERSIONS
    assert c_string("DEFAULT_VERSION") == plugin.DEFAULT_VERSION
    assert c_string("SHIM_HEADER") == plugin.SHIM_HEADER == protocol.SHIM_HEADER
    assert c_string("CNI_PATH") == protocol.CNI_PATH
    assert (c_number("RETRY_BUSY"), c_number("RETRY_STARTING")) == plugin.RETRY_STATUS
    codes = (c_number("E_TRY_LATER"), c_number("E_PLUGIN"), c_number("E_INVALID_CONFIG"))
    assert codes == (plugin.E_TRY_LATER, plugin.E_PLUGIN, plugin.E_INVALID_CONFIG)
    assert codes == (cnicodes.E_TRY_LATER, cnicodes.E_OTHER, cnicodes.E_INVALID_CONFIG)  # the daemon's
    assert c_number("DEFAULT_READY_TIMEOUT") == plugin.DEFAULT_READY_TIMEOUT
    assert c_number("MAX_CONFIG") == plugin.MAX_CONFIG and c_number("MAX_ANSWER") == plugin.MAX_ANSWER
    assert c_number("ANSWER_TIMEOUT") == plugin.ANSWER_TIMEOUT and c_number("TAKE_MIN") == plugin.TAKE_MIN
    assert c_number("MAX_RESTARTS") == plugin.MAX_RESTARTS
    m = re.search(r"ENV_KEYS\[\] = \{([^}]*)\}", C_SOURCE)
    assert m and tuple(re.findall(r'"(\w+)"', m.group(1))) == plugin.ENV_KEYS == protocol.ENV_KEYS


def test_the_package_builds_the_compiled_shim_with_the_same_warnings() -> None:
    rules = (ROOT / "debian" / "rules").read_text()
    m = re.search(r"^SHIM_WARNINGS := (.+)$", rules, re.M)
    assert m and tuple(m.group(1).split()) == shimlaunch.WARNINGS


# ---- the Python shim only ----


def test_config_fields_are_read_without_a_json_parser() -> None:
    text = '{"cniVersion": "0.3.1", "socket" : "/run/x \\"y\\".sock", "readyTimeout": 2.5, "name": "n"}'
    keys = ("cniVersion", "socket", "readyTimeout", "missing")
    assert plugin.top_level(text, keys) == {"cniVersion": "0.3.1", "socket": '/run/x "y".sock', "readyTimeout": "2.5"}


def test_only_top_level_keys_count() -> None:
    """A nested "socket" (in args, a prevResult, a string value) is not the shim's; the last top-level one wins,
    as with json.loads. (test_shim_props.py holds the compiled shim's scan to this one.)"""
    text = json.dumps(
        {
            "args": {"socket": "/evil.sock", "x": ["socket", {"readyTimeout": 0}]},
            "name": "socket",
            "socket": "/a.sock",
            "note": 'a "socket": "/b.sock" in a string',
        }
    )
    assert plugin.top_level(text, ("socket", "readyTimeout")) == {"socket": "/a.sock"}
    assert plugin.top_level('{"socket": "/1", "socket": "/2"}', ("socket",)) == {"socket": "/2"}
    for junk in ["", "[", '{"socket"', '{"socket": "/x', "\\", '"}{"', '{"a": "\\"}', "{{{{"]:
        plugin.top_level(junk, ("socket",))  # nothing but a dict, whatever the text


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, 10.0),
        ("2.5", 2.5),
        ("0", 0.0),
        ("-1", 10.0),
        ("nan", 10.0),
        ("inf", 10.0),
        ("x", 10.0),
        ("1e99", 10.0),
        (" 1_0 ", 10.0),
        ("\u0663", 10.0),  # an Arabic-Indic 3: float() reads it, neither shim does
    ],
)
def test_ready_timeout_is_sane(value: str | None, expected: float) -> None:
    assert plugin.ready_timeout(value) == expected


def test_shim_imports_nothing_heavy() -> None:
    """Start-up cost is the import graph: the shim may load only C modules and what `python3 -I -S` loads
    anyway (json would pull in re and enum; http.client far more)."""

    def modules(stderr: str) -> set[str]:
        return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines() if line.startswith("import time:")}

    def importtime(*argv: str, env: dict[str, str], config: bytes = b"") -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            ["python3", "-I", "-S", "-X", "importtime", *argv], env=env, input=config, capture_output=True, timeout=30
        )

    bare = modules(importtime("-c", "pass", env={}).stderr.decode())
    p = importtime(str(SHIM), env={"CNI_COMMAND": "VERSION"})
    assert modules(p.stderr.decode()) - bare - {"module"} <= {"_socket", "binascii", "time"}
    assert json.loads(p.stdout)["cniVersion"] == "1.0.0"
    # A request with plain ASCII values (here: ADD with the daemon away) does not load _json either.
    env = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_NETNS": "/run/netns/x", "CNI_IFNAME": "eth0"}
    p = importtime(str(SHIM), env=env, config=conf(cniVersion="1.0.0", socket="/nonexistent/n.sock", readyTimeout=0))
    assert p.returncode == 1 and json.loads(p.stdout)["code"] == 11
    assert "_json" not in modules(p.stderr.decode()) - bare


def test_values_with_escapes_still_round_trip() -> None:
    """The fast paths (no _json) must hand anything unusual to the real encoder and decoder."""
    for value in ["plain", 'q"uote', "back\\slash", "tab\t", "caf\u00e9", "\x7f", ""]:
        assert json.loads(plugin._q(value)) == value
        text = json.dumps({"socket": value, "other": 1})
        assert plugin.top_level(text, ("socket",)) == {"socket": value}


def test_shim_runs_through_its_own_shebang(tmp_path: Path) -> None:
    """plugin.py exec'd directly: the kernel passes everything after the interpreter in a shebang as one
    argument, so the flags must be one token ("-IS", not "-I -S")."""
    exe = tmp_path / "netcomp"
    exe.write_bytes(SHIM.read_bytes())
    exe.chmod(0o755)
    first = SHIM.read_text().splitlines()[0]
    assert first.startswith("#!/usr/bin/python3 ") and len(first.split()) == 2
    p = subprocess.run([str(exe)], env={"CNI_COMMAND": "VERSION"}, capture_output=True, timeout=30, check=False)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["cniVersion"] == "1.0.0"


def test_installed_launcher_runs_the_shim_from_bytecode(shims: dict[str, Shim]) -> None:
    """The Python shim as installed: a launcher importing the shim from a directory, and once compiled it runs
    from the bytecode without compiling the source."""
    plugin_exe = shims["python"].argv[0]
    shim_dir = Path(plugin_exe).parent / "lib"
    pyc = list((shim_dir / "__pycache__").glob("netcomp_shim.cpython-*.pyc"))
    assert len(pyc) == 1
    p = subprocess.run(
        [shimlaunch.INTERPRETER, "-I", "-S", "-v", plugin_exe],
        env={"CNI_COMMAND": "VERSION"},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert f"code object from '{pyc[0]}'" in p.stderr


def test_launcher_without_its_shim_answers_a_cni_error(tmp_path: Path) -> None:
    plugin_exe, shim_dir = tmp_path / "netcomp", tmp_path / "lib"
    shimlaunch.install(plugin_exe, shim_dir, compile_now=False)
    (shim_dir / shimlaunch.MODULE).unlink()
    p = subprocess.run([str(plugin_exe)], env={"CNI_COMMAND": "VERSION"}, capture_output=True, timeout=30, check=False)
    err = json.loads(p.stdout)
    assert p.returncode == 1 and err["code"] == 999 and str(shim_dir) in err["msg"] and p.stderr == b""


# ---- netcomp install-shim ----


def install_shim(*argv: str) -> tuple[int, str, str]:
    from netcomp.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    code = main(["install-shim", *argv], out, err)
    return code, out.getvalue(), err.getvalue()


def version_of(exe: Path) -> bytes:
    p = subprocess.run([str(exe)], env={"CNI_COMMAND": "VERSION"}, capture_output=True, timeout=30, check=True)
    return p.stdout


def test_install_shim_builds_the_compiled_shim_where_there_is_a_compiler(tmp_path: Path) -> None:
    cc = shimlaunch.find_cc()
    if cc is None:
        pytest.skip("no C compiler (cc) on this machine: `make system-deps` installs gcc")
    bin_dir = tmp_path / "opt-cni-bin"
    code, out, _ = install_shim("--cni-bin-dir", str(bin_dir), "--shim-dir", str(tmp_path / "lib"))
    plugin_exe = bin_dir / "netcomp"
    assert (code, out) == (0, f"installed {plugin_exe}: the compiled shim, built with {cc}\n")
    assert plugin_exe.read_bytes()[:4] == b"\x7fELF" and plugin_exe.stat().st_mode & 0o777 == 0o755
    assert json.loads(version_of(plugin_exe))["cniVersion"] == "1.0.0"
    assert sorted(p.name for p in bin_dir.iterdir()) == ["netcomp"]  # no temp file left behind
    assert not (tmp_path / "lib").exists()


def test_install_shim_installs_the_python_shim_without_a_compiler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No `cc` on PATH (a PATH with none), or --python: the launcher and the byte-compiled Python shim."""
    bin_dir, lib = tmp_path / "opt-cni-bin", tmp_path / "lib" / "shim"
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    code, out, _ = install_shim("--cni-bin-dir", str(bin_dir), "--shim-dir", str(lib))
    assert (code, out) == (
        0,
        f"installed {bin_dir / 'netcomp'}: the Python shim ({lib / 'netcomp_shim.py'}); no C compiler (cc) on PATH\n",
    )
    assert json.loads(version_of(bin_dir / "netcomp"))["cniVersion"] == "1.0.0"
    assert list((lib / "__pycache__").glob("netcomp_shim.cpython-*.pyc"))
    monkeypatch.undo()
    code, out, _ = install_shim("--cni-bin-dir", str(bin_dir), "--shim-dir", str(lib), "--python")
    assert (code, out.endswith("; asked for\n")) == (0, True)


def test_install_shim_falls_back_to_python_when_the_compiler_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `cc` that cannot build (a script standing in for a broken toolchain): the Python shim, and why."""
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "cc").write_text("#!/bin/sh\necho 'cc: fatal error: no headers' >&2\nexit 1\n")
    (tools / "cc").chmod(0o755)
    monkeypatch.setenv("PATH", str(tools))
    bin_dir = tmp_path / "bin"
    code, out, _ = install_shim("--cni-bin-dir", str(bin_dir), "--shim-dir", str(tmp_path / "lib"))
    assert code == 0 and out.endswith(
        f"; {tools / 'cc'} could not build the compiled one: cc: fatal error: no headers\n"
    )
    assert (bin_dir / "netcomp").read_text().startswith("#!/usr/bin/python3 -IS")
    assert sorted(p.name for p in bin_dir.iterdir()) == ["netcomp"]


def test_install_shim_that_cannot_write_exits_73(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where a directory should go
    code, _, err = install_shim("--cni-bin-dir", str(blocked / "bin"), "--shim-dir", str(blocked / "x"))
    assert code == 73 and err.startswith("netcomp: cannot install the shim: ")
    code, _, err = install_shim("--cni-bin-dir", str(blocked / "bin"), "--python", "--shim-dir", str(tmp_path / "s"))
    assert code == 73 and err.startswith("netcomp: cannot install the shim: ")
