"""Hypothesis against both shims: odd configs and environments, and a scripted daemon (shimlab.Scripted, standing
in for a daemon that misbehaves on purpose) answering malformed, truncated, oversized and slow answers. Whatever
it gets, a shim exits 0 or 1 with nothing on stderr (no crash, no sanitizer report, no traceback), prints exactly
one CNI error object or the daemon's answer, within its time bound, and the Python shim, the compiled shim and the
compiled shim under ASan/UBSan print the same bytes and send the daemon the same bytes.

Example counts are bounded so that this file runs in seconds (each example execs every shim)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from netcomp.delegate import request
from netcomp.shim import install as shimlaunch
from netcomp.shim import plugin
from tests.lab.shimlab import SANITIZER_ENV, TAKEN, Act, Shim, answer, pick, scripted

KEYS = ("cniVersion", "socket", "readyTimeout")
FAST = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=40)


@pytest.fixture(scope="module")
def scanner(tmp_path_factory: pytest.TempPathFactory, shims: dict[str, Shim]) -> Shim:
    """netcomp-shim.c built with NC_SCAN_ONLY (and the sanitizers): it prints what it read from the config and
    stops. The only difference from the installed shim is that last step (see the #ifdef in the source)."""
    pick(shims, "c")  # skips where there is no compiler
    out = tmp_path_factory.mktemp("scan") / "netcomp-scan"
    shimlaunch.build(out, shimlaunch.find_cc() or "cc", (*shimlaunch.SANITIZE, "-DNC_SCAN_ONLY"))
    return Shim("c-scan", (str(out),), SANITIZER_ENV)


@pytest.fixture(scope="module")
def every(shims: dict[str, Shim]) -> list[Shim]:
    return [pick(shims, name) for name in ("python", "c", "c-asan")]


@contextlib.contextmanager
def short_dir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="ncs-"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


# ---- configs: JSON, JSON cut short, near-JSON made of the tokens that matter to the scan, any bytes ----

TOKENS = [
    *'{}[]:, \n\t"\\',
    '"socket"',
    '"cniVersion"',
    '"readyTimeout"',
    '"socke\\u0074"',
    '"\\u0073ocket"',
    '"socket\\"',
    '"/a.sock"',
    '"/b \\"q\\".sock"',
    '"\\ud800"',
    '"\\udcff"',
    '"\\ud83d\\ude00"',
    '"\\ud83d\\u0041"',
    '"\\u00e9"',
    '"\\x"',
    '"\\u12"',
    '"a\tb"',
    '"\\t\\n\\/"',
    '"\\u0000"',
    '"\\u0031"',
    '""',
    '"0.3.1"',
    "1_0",
    "0.5",
    '"0.25"',
    '" 1e-2 "',
    '"1_0"',
    '"_1"',
    "nan",
    "-0",
    '"-1"',
    '"inf"',
    "0x10",
    "1e999",
    "true",
    "null",
    "\u00e9",
    "\ufffd",
    "\x00",
    "\x7f",
]
RAW = [b"\xff", b"\xe2\x82", b"\xed\xa0\x80", b"\xf0\x9f\x98\x80", b"\xc0\xaf", b"\xf4\x90\x80\x80"]
token_text = st.lists(st.sampled_from([t.encode() for t in TOKENS] + RAW), max_size=40).map(b"".join)
json_value = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
key = st.sampled_from([*KEYS, "name", "args"]).map(json.dumps) | st.sampled_from(
    ['"socke\\u0074"', '"readyTimeou\\u0074"']
)
value = st.sampled_from(
    ["0", "0.5", '"1_0"', '" 2 "', '"x"', '"\\ud800"', '"/s"', "-1", '[1, {"socket": "/n"}]']
) | json_value.map(json.dumps)
pairs = st.lists(st.tuples(key, value), max_size=6).map(lambda kv: "{" + ", ".join(f"{k}: {v}" for k, v in kv) + "}")
json_text = st.tuples(json_value, st.booleans()).map(lambda t: json.dumps(t[0], ensure_ascii=t[1]))
configs = st.one_of(
    token_text,
    pairs.map(str.encode),
    json_text.map(str.encode),
    st.tuples(pairs | json_text, st.integers(0, 200)).map(lambda t: t[0].encode()[: t[1]]),
    st.binary(max_size=64),
    st.text(max_size=40).map(lambda t: t.encode("utf-8", "surrogatepass")),
)


@settings(FAST, max_examples=300)
@given(config=configs)
def test_the_compiled_shim_reads_the_config_as_plugin_py(scanner: Shim, config: bytes) -> None:
    """The bounded top-level scan, JSON string unescaping, UTF-8 decoding and readyTimeout parsing of the
    compiled shim against plugin.py's, on the same bytes."""
    r = scanner.run({"CNI_COMMAND": "ADD"}, config)
    fields = plugin.top_level(config.decode("utf-8", "replace"), KEYS)
    version = fields.get("cniVersion") or plugin.DEFAULT_VERSION
    sock = fields.get("socket") or plugin.DEFAULT_SOCKET
    try:
        sock.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # the config error both shims answer without going further
        out = io.BytesIO()
        code = plugin.run({"CNI_COMMAND": "ADD"}, io.BytesIO(config), out)
        assert (r.code, r.out) == (code, out.getvalue())
        return
    prefix = ('{"cniVersion":' + plugin._q(version) + ',"socket":' + plugin._q(sock) + ',"readyTimeout":').encode()
    assert r.code == 0 and r.out.startswith(prefix) and r.out.endswith(b"}\n"), (r.out, prefix)
    assert float(r.out[len(prefix) : -2]) == plugin.ready_timeout(fields.get("readyTimeout"))


# ---- the request: odd environments and configs reach the daemon as the same bytes from every shim ----

env_value = (st.binary(max_size=24) | st.text(max_size=12).map(str.encode)).filter(lambda b: b"\0" not in b)
envs = st.dictionaries(st.sampled_from(plugin.ENV_KEYS[1:]), env_value, max_size=5)
commands = st.sampled_from(["ADD", "DEL", "CHECK", "GC", "STATUS", "", "add", "VERSION "])


@settings(FAST, max_examples=25)
@given(
    command=commands,
    env=envs,
    extra=st.dictionaries(st.text(max_size=6), json_value, max_size=3),
    version=st.text(max_size=8),
    ascii_only=st.booleans(),
    junk=st.booleans(),
)
def test_every_shim_sends_and_prints_the_same_bytes(
    every: list[Shim],
    command: str,
    env: dict[str, bytes],
    extra: dict[str, object],
    version: str,
    ascii_only: bool,
    junk: bool,
) -> None:
    full: dict[str, str | bytes] = {"CNI_COMMAND": command, **env}
    with short_dir() as d:
        doc = {**extra, "cniVersion": version, "socket": str(d / "d.sock"), "readyTimeout": 5}
        config = json.dumps(doc, ensure_ascii=ascii_only).encode()
        reply: Act = ((0.0, b"X not HTTP \xff\r\n\r\n" if junk else answer(200, b'{"ok":1}')),)
        seen: list[tuple[int, bytes, bytes]] = []
        for shim in every:
            with scripted(d / "d.sock", [reply]) as srv:
                r = shim.run(full, config)
            (req,) = srv.seen
            seen.append((r.code, r.out, req.body))
    assert seen[1:] == seen[:1] * (len(seen) - 1), seen
    decoded = {k: os.fsdecode(v) for k, v in full.items()}
    assert seen[0][2] == plugin.encode_request(decoded, config)
    assert request.decode(seen[0][2])[:2] == (decoded, json.loads(config))
    if junk:
        err = json.loads(seen[0][1])
        assert err["cniVersion"] == (version or plugin.DEFAULT_VERSION) and err["code"] == plugin.E_PLUGIN


# ---- a daemon that misbehaves: malformed, truncated, oversized, slow answers ----


@dataclass(frozen=True)
class Script:
    acts: list[Act | None]
    taken: bool  # some act says "1xx": the shim may then wait for MAX_RESTARTS more daemons
    slowest: float  # seconds the slowest act takes to say everything

    @property
    def data(self) -> bytes:
        return b"".join(chunk for act in self.acts if act for _, chunk in act)


INTERIM = st.sampled_from([TAKEN, b"HTTP/1.1 100 Continue\r\nContent-Length: 5\r\n\r\n", b"HTTP/1.0 199 x\r\n\r\n"])
STATUS = st.sampled_from([200, 200, 400, 400, 500, 204, 301, 0, 999, 429, 503])
BODY = st.binary(max_size=40) | st.binary(max_size=40).map(lambda b: b"{" + b) | st.just(b'{"cniVersion":"1.0.0"}\n')


@st.composite
def http_answer(draw: st.DrawFn, statuses: st.SearchStrategy[int] = STATUS) -> bytes:
    status, body = draw(statuses), draw(BODY)
    mode = draw(st.sampled_from(["exact", "exact", "short", "long", "none", "garbage", "huge", "twice"]))
    length = {
        "exact": b"%d" % len(body),
        "short": b"%d" % max(0, len(body) - 3),
        "long": b"%d" % (len(body) + 3),
        "garbage": draw(st.sampled_from([b"-1", b"1e3", b"", b"0x10", b"1234567890"])),
        "huge": b"%d" % (plugin.MAX_ANSWER + draw(st.integers(1, 10))),
        "twice": b"%d\r\nContent-Length: %d" % (len(body) + 1, len(body)),
    }.get(mode)
    head = b"HTTP/1.1 %03d %s\r\n" % (status, draw(st.sampled_from([b"OK", b"", b"Processing \xff"])))
    if length is not None:
        head += (
            draw(st.sampled_from([b"Content-Length", b"content-length", b" CONTENT-LENGTH "]))
            + b": "
            + length
            + b"\r\n"
        )
    return head + b"\r\n" + body


NOISE = st.one_of(
    http_answer(),
    st.binary(max_size=80),
    st.just(b"x" * 70000),  # no head within 64 KiB
    st.just(b"HTTP/1.1 200 OK\r\nX: " + b"y" * 70000 + b"\r\n\r\n{}"),
)
TERMINAL = http_answer(st.sampled_from([200, 400, 500, 204])).filter(lambda a: b"Content-Length: " in a) | st.binary(
    max_size=60
).map(lambda b: b"X" + b + b"\r\n\r\n")


@st.composite
def act(draw: st.DrawFn, last: bool) -> tuple[Act | None, bool, float]:
    """One connection's answer: interim answers, then noise (cut anywhere) or, last, an answer that ends the
    shim's tries; in up to three chunks, each after a short pause."""
    if not last and draw(st.integers(0, 5)) == 0:
        return None, False, 0.0  # close without a word
    interim = draw(st.lists(INTERIM, max_size=2))
    data = b"".join(interim) + draw(TERMINAL if last else NOISE)
    if not last:
        data = data[: draw(st.integers(0, len(data)))]
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=2)))
    pieces = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    delays = [draw(st.sampled_from([0.0, 0.0, 0.005, 0.02])) for _ in pieces]
    return tuple(zip(delays, pieces, strict=True)), bool(interim), sum(delays)


@st.composite
def scripts(draw: st.DrawFn) -> Script:
    acts = [draw(act(last=False)) for _ in range(draw(st.integers(0, 2)))] + [draw(act(last=True))]
    return Script([a for a, _, _ in acts], any(t for _, t, _ in acts), max(s for _, _, s in acts))


def answered(out: bytes, script: Script) -> bool:
    """out is one of the daemon's answers as the shim prints it (newline added)."""
    return out.endswith(b"\n") and (out[:-1] in script.data or out in script.data)


@settings(FAST, max_examples=40)
@given(script=scripts(), ready=st.sampled_from([0, 2]), verb=st.sampled_from(["ADD", "DEL"]))
def test_a_misbehaving_daemon_gets_one_answer_or_one_error_in_time(
    every: list[Shim], script: Script, ready: float, verb: str
) -> None:
    results = []
    config = {"cniVersion": "0.4.0", "readyTimeout": ready}
    with short_dir() as d:
        for shim in every:  # one path for all: the socket is in the error message
            with scripted(d / "d.sock", script.acts) as srv:
                r = shim.run(
                    {"CNI_COMMAND": verb, "CNI_CONTAINERID": "c"}, json.dumps({**config, "socket": srv.path}).encode()
                )
            # Never past readyTimeout (or TAKE_MIN for a try begun just before it), plus what the daemon took to
            # say its piece; a daemon that took the request and died gets MAX_RESTARTS more of those.
            epochs = 1 + plugin.MAX_RESTARTS if script.taken else 1
            assert r.seconds <= epochs * (max(ready, plugin.TAKE_MIN) + script.slowest) + 0.5, (shim.name, r)
            results.append((r.code, r.out))
    assert results[1:] == results[:1] * (len(results) - 1), results
    code, out = results[0]
    if out == b"":
        assert code == 0  # an empty 200 answer
        return
    try:
        err = json.loads(out)
    except ValueError:
        err = None
    if isinstance(err, dict) and set(err) == {"cniVersion", "code", "msg", "details"} and out.endswith(b"}\n"):
        assert code == 1 and err["cniVersion"] == "0.4.0" and err["code"] in (plugin.E_TRY_LATER, plugin.E_PLUGIN)
        assert out.count(b"\n") == 1  # exactly one object, on one line
    else:
        assert answered(out, script), out
        assert code == 0 or out.startswith(b"{")
