#!/usr/bin/python3 -IS
"""netcomp: the CNI plugin a container runtime execs. It forwards the request to the netcomp daemon over its unix
socket and prints the answer. It runs on every container start, so it starts fast: stdlib C modules only, no
`json`, no `http.client`, no netcomp import (it runs as `python3 -IS`: isolated, no site; installed as a single file).

VERSION is answered here; every other verb is posted to the daemon, tried again (a growing, jittered delay) while
the daemon cannot take it, until "readyTimeout" (the runtime's config; "socket" names the daemon) has passed,
then CNI error 11; a request the daemon took ("102 Processing") and did not answer is posted again, at most
MAX_RESTARTS times: the daemon makes a repeated request safe. A DEL is never reported as done unless it ran to
the end. The whole behaviour, which netcomp-shim.c shares: docs/delegation.md, "The shim on the wire"."""

import _socket
import binascii
import sys
import time

MYPY = False
if MYPY:  # type names for the checker only: importing typing would cost start-up time
    from collections.abc import Mapping
    from typing import BinaryIO

DEFAULT_SOCKET = "/run/netcomp/netcomp.sock"
DEFAULT_READY_TIMEOUT = 10.0
ENV_KEYS = ("CNI_COMMAND", "CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_ARGS", "CNI_PATH")
VERSIONS = '["0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]'
DEFAULT_VERSION = "1.0.0"
SHIM_HEADER = "X-Netcomp-Shim"
RETRY_STATUS = (429, 503)  # busy, starting: the request was not taken
E_TRY_LATER, E_PLUGIN, E_INVALID_CONFIG = 11, 999, 7
MAX_CONFIG = 4 << 20  # bytes of stdin read at most (the daemon takes 1 MiB by default)
MAX_ANSWER = 4 << 20  # bytes of an answer read at most
ANSWER_TIMEOUT = 900.0  # seconds to wait for the answer once the daemon has taken the request
MAX_RESTARTS = 3  # times a request is posted again after the daemon died with it
TAKE_MIN = 1.0  # seconds each try waits for the daemon to take the request, even past readyTimeout


class _Retry(Exception):
    """The daemon did not take the request (or went away before answering it): try again."""

    def __init__(self, why: str, taken: bool = False) -> None:
        super().__init__(why)
        self.why = why
        self.taken = taken


def _string_end(text: str, i: int) -> int:
    """The index of the quote closing the JSON string whose opening quote is at i-1; -1 if none."""
    n = len(text)
    while True:
        j = text.find('"', i)
        if j < 0:
            return -1
        k = j - 1
        while k >= i and text[k] == "\\":
            k -= 1
        if (j - 1 - k) % 2 == 0:  # an even number of backslashes before it: the quote is not escaped
            return j
        i = j + 1
        if i >= n:
            return -1


def _unquote(text: str, start: int, end: int) -> "str | None":
    raw = text[start:end]
    if "\\" not in raw:
        return raw  # no escapes: the common case, without loading _json
    from _json import scanstring

    try:
        value: str = scanstring(text, start, True)[0]
        return value
    except ValueError:
        return None


def top_level(text: str, keys: "tuple[str, ...]") -> "dict[str, str]":
    """The values of `keys` among the top-level keys of a JSON object, as text (strings unquoted, other values
    as written), without a JSON parser: a bounded scan that counts brackets between strings. The last of
    duplicate keys wins, as with json.loads. Text that is not a JSON object gives what could be found."""
    found: dict[str, str] = {}
    depth = 0
    pos = 0
    n = len(text)
    while pos < n:
        q = text.find('"', pos)
        seg = text[pos : q if q >= 0 else n]
        depth += seg.count("{") + seg.count("[") - seg.count("}") - seg.count("]")
        if q < 0:
            break
        end = _string_end(text, q + 1)
        if end < 0:
            break
        pos = end + 1
        if depth != 1:
            continue
        j = pos
        while j < n and text[j] in " \t\r\n":
            j += 1
        if j >= n or text[j] != ":":
            continue  # a value, not a key
        name = _unquote(text, q + 1, end)
        j += 1
        while j < n and text[j] in " \t\r\n":
            j += 1
        if j < n and text[j] == '"':
            vend = _string_end(text, j + 1)
            if vend < 0:
                break
            if name in keys:
                value = _unquote(text, j + 1, vend)
                if value is not None:
                    found[name] = value
            pos = vend + 1
        elif name in keys:
            k = j
            while k < n and text[k] not in ",}] \t\r\n":
                k += 1
            if k > j:
                found[name] = text[j:k]
    return found


def _q(s: str) -> str:
    """s as a JSON string. CNI values are plain ASCII nearly always: those are quoted here, the rest by _json
    (loading it is start-up time every exec of the shim would pay)."""
    if s.isascii() and s.isprintable() and '"' not in s and "\\" not in s:
        return '"' + s + '"'
    from _json import encode_basestring_ascii

    quoted: str = encode_basestring_ascii(s)
    return quoted


def encode_request(env: "Mapping[str, str]", config: bytes) -> bytes:
    pairs = ",".join(_q(k) + ":" + _q(env[k]) for k in ENV_KEYS if k in env)
    b64 = binascii.b2a_base64(config, newline=False).decode()
    return ('{"env":{' + pairs + '},"config":"' + b64 + '"}').encode()


def _head(raw: bytes, end: int) -> "tuple[int, int | None]":
    """(status, Content-Length or None) of an answer's head raw[:end]; ValueError when it is not HTTP."""
    lines = raw[:end].split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or len(parts[1]) != 3 or not parts[1].isdigit():
        raise ValueError("not HTTP")
    length = None
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            value = value.strip()
            if not value.isdigit() or len(value) > 9:
                raise ValueError("bad Content-Length")
            length = int(value)
    return int(parts[1]), length


def post(path: str, body: bytes, ready_deadline: float) -> "tuple[int, bytes]":
    """POST body to /cni on the daemon's socket: (status, payload) of its final answer; status 0 for an answer
    that is not HTTP, -1 for one over MAX_ANSWER. Raises _Retry when the daemon did not take the request by
    ready_deadline (or TAKE_MIN from now, whichever is later), or went away before answering (`taken` says
    whether it had taken it)."""
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    taken = False
    deadline = max(ready_deadline, time.monotonic() + TAKE_MIN)
    try:
        s.settimeout(deadline - time.monotonic())
        try:
            s.connect(path)
            head = (
                "POST /cni HTTP/1.1\r\nHost: netcomp\r\nContent-Type: application/json\r\n"
                + SHIM_HEADER
                + ": 1\r\nConnection: close\r\nContent-Length: "
                + str(len(body))
                + "\r\n\r\n"
            )
            s.sendall(head.encode() + body)
        except OSError as e:
            raise _Retry(e.strerror or str(e) or type(e).__name__) from None
        raw = b""
        while True:
            end = raw.find(b"\r\n\r\n")
            if end >= 0:
                shown = raw[: end + 4][:300]  # a head that is not HTTP is shown alone: what follows depends on timing
                try:
                    status, length = _head(raw, end)
                except ValueError:
                    return 0, shown
                if 100 <= status < 200:
                    raw = raw[end + 4 :]  # "taken": from now on the daemon bounds the work
                    taken = True
                    deadline = time.monotonic() + ANSWER_TIMEOUT
                    continue
                if status in RETRY_STATUS:
                    raise _Retry("the daemon is starting" if status == 503 else "the daemon is busy")
                if length is None:
                    return 0, shown
                if length > MAX_ANSWER:
                    return -1, b""
                if len(raw) >= end + 4 + length:
                    return status, raw[end + 4 : end + 4 + length]
            elif len(raw) > 65536:
                return 0, raw[:300]
            left = deadline - time.monotonic()
            if left <= 0:
                raise _Retry("the daemon did not answer in time" if taken else "the daemon did not take the request")
            s.settimeout(left)
            try:
                chunk = s.recv(65536)
            except OSError as e:
                raise _Retry(e.strerror or str(e) or type(e).__name__, taken) from None
            if not chunk:
                raise _Retry("the daemon went away before its answer was complete", taken)
            raw += chunk
    finally:
        s.close()


def _error(version: str, code: int, msg: str, details: str) -> bytes:
    return (
        '{"cniVersion":'
        + _q(version)
        + ',"code":'
        + str(code)
        + ',"msg":'
        + _q(msg)
        + ',"details":'
        + _q(details)
        + "}\n"
    ).encode()


def ready_timeout(value: "str | None") -> float:
    if value is None or not value.isascii():  # float() would also read other scripts' digits: the C shim does not
        return DEFAULT_READY_TIMEOUT
    try:
        t = float(value)
    except ValueError:
        return DEFAULT_READY_TIMEOUT
    if not t >= 0 or t > 86400:  # NaN, negative, absurd: the default
        return DEFAULT_READY_TIMEOUT
    return t


def run(env: "Mapping[str, str]", stdin: "BinaryIO", stdout: "BinaryIO") -> int:
    """The plugin: env (mapping), stdin and stdout (binary streams). Returns the exit status."""
    command = env.get("CNI_COMMAND", "")
    if command == "VERSION":
        stdout.write(('{"cniVersion":"' + DEFAULT_VERSION + '","supportedVersions":' + VERSIONS + "}\n").encode())
        return 0
    config = stdin.read(MAX_CONFIG + 1)
    text = config.decode("utf-8", "replace")
    fields = top_level(text, ("cniVersion", "socket", "readyTimeout"))
    version = fields.get("cniVersion") or DEFAULT_VERSION
    if len(config) > MAX_CONFIG:
        stdout.write(_error(version, E_INVALID_CONFIG, "network configuration is over 4 MiB", "not sent"))
        return 1
    sock = fields.get("socket") or DEFAULT_SOCKET
    try:
        sock.encode("utf-8", "surrogateescape")  # as connect() will: a lone surrogate ("\\ud800") is no path
    except UnicodeEncodeError:
        msg = "network configuration's socket is not a valid path"
        stdout.write(_error(version, E_INVALID_CONFIG, msg, "not sent"))
        return 1
    wait = ready_timeout(fields.get("readyTimeout"))
    body = encode_request(env, config)
    deadline = time.monotonic() + wait
    delay = 0.01
    restarts = 0
    while True:
        try:
            status, payload = post(sock, body, deadline)
            break
        except _Retry as r:
            why = r.why
            if r.taken and restarts < MAX_RESTARTS:
                # It died with our request: post it again now, whatever readyTimeout (with readyTimeout 0 the
                # fresh deadline would already have passed), and give the restarted daemon a full readyTimeout.
                restarts += 1
                deadline = time.monotonic() + wait
                continue
        now = time.monotonic()
        if now >= deadline:
            stdout.write(
                _error(
                    version,
                    E_TRY_LATER,
                    "netcomp daemon is not answering on " + sock + ": " + why,
                    ("the DEL did not run to the end; retry it. " if command == "DEL" else "")
                    + "see `systemctl status netcomp` and `journalctl -u netcomp`",
                )
            )
            return 1
        # Jittered, so that many shims refused at once do not come back at once.
        jitter = 0.5 + (time.monotonic_ns() // 1000 % 1000) / 1000
        time.sleep(min(delay * jitter, max(0.0, deadline - now)))
        delay = min(delay * 2, 0.5)
    if status == 200:
        stdout.write(payload if payload.endswith(b"\n") or not payload else payload + b"\n")
        return 0
    if status > 0 and payload.startswith(b"{"):
        stdout.write(payload + b"\n")
    elif status < 0:
        stdout.write(_error(version, E_PLUGIN, "netcomp daemon's answer is over 4 MiB", "not printed"))
    else:
        what = "answered HTTP " + str(status) if status else "answered something that is not HTTP"
        stdout.write(_error(version, E_PLUGIN, "netcomp daemon " + what, payload[:300].decode("utf-8", "replace")))
    return 1


def main() -> None:
    import posix  # built in, already loaded: `os` would cost the start-up its imports

    if sys.stdout is None:  # started with stdout closed: nobody can read an answer, so nothing is asked
        posix._exit(1)
    env = {k.decode("utf-8", "surrogateescape"): v.decode("utf-8", "surrogateescape") for k, v in posix.environ.items()}
    out = sys.stdout.buffer
    code = run(env, sys.stdin.buffer if sys.stdin is not None else open("/dev/null", "rb"), out)  # noqa: SIM115
    try:
        out.flush()
    except OSError:
        code = code or 1  # the runtime stopped reading: the answer is lost, do not claim success silently
    # The interpreter's orderly shutdown (GC, module teardown) takes time and has nothing to do here: everything
    # the shim wrote is flushed, its socket is closed.
    posix._exit(code)


if __name__ == "__main__":
    main()
