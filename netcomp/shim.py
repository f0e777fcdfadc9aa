#!/usr/bin/python3 -IS
"""netcomp: the CNI plugin a container runtime execs. It forwards the request to the netcomp daemon over its unix
socket and prints the answer. It runs on every container start, so it starts fast: stdlib C modules only, no
`json`, no `http.client`, no netcomp import (it runs as `python3 -IS`: isolated, no site; installed as a single file).

Config keys it reads (from the runtime's config on stdin): "socket" (default /run/netcomp/netcomp.sock),
"readyTimeout" (seconds ADD/CHECK wait for a daemon that is starting; default 10).
- VERSION is answered here.
- A daemon that is down or not yet ready: ADD/CHECK retry until readyTimeout, then fail with a CNI error naming
  the socket and `systemctl status netcomp`; DEL exits 0 (nothing can be cleaned without the daemon; the runtime
  must not be blocked from removing the container)."""

import _socket
import binascii
import sys
import time

MYPY = False
if MYPY:  # type names for the checker only: importing typing would cost start-up time
    from collections.abc import Mapping
    from typing import BinaryIO

DEFAULT_SOCKET = "/run/netcomp/netcomp.sock"
ENV_KEYS = ("CNI_COMMAND", "CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_ARGS", "CNI_PATH")
VERSIONS = '["0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]'
SHIM_HEADER = "X-Netcomp-Shim"
RETRY_STATUS = (503,)


def _field(config: str, key: str) -> "str | None":
    """The string value of a top-level-looking key, without a JSON parser (the config is the shim's own)."""
    i = config.find('"' + key + '"')
    if i < 0:
        return None
    i += len(key) + 2
    n = len(config)
    while i < n and config[i] in " \t\r\n":
        i += 1
    if i >= n or config[i] != ":":
        return None
    i += 1
    while i < n and config[i] in " \t\r\n":
        i += 1
    if i < n and config[i] == '"':
        end = config.find('"', i + 1)
        if end > i and "\\" not in config[i + 1 : end]:
            return config[i + 1 : end]  # no escapes: the common case, without loading _json
        from _json import scanstring

        try:
            value: str = scanstring(config, i + 1, True)[0]
            return value
        except ValueError:
            return None
    j = i
    while j < n and config[j] not in ",}] \t\r\n":
        j += 1
    return config[i:j] or None


def _q(s: str) -> str:
    """s as a JSON string. CNI values are plain ASCII nearly always: those are quoted here, the rest by _json
    (loading it costs about 0.5 ms of start-up)."""
    if s.isascii() and s.isprintable() and '"' not in s and "\\" not in s:
        return '"' + s + '"'
    from _json import encode_basestring_ascii

    quoted: str = encode_basestring_ascii(s)
    return quoted


def encode_request(env: "Mapping[str, str]", config: bytes) -> bytes:
    pairs = ",".join(_q(k) + ":" + _q(env[k]) for k in ENV_KEYS if k in env)
    b64 = binascii.b2a_base64(config, newline=False).decode()
    return ('{"env":{' + pairs + '},"config":"' + b64 + '"}').encode()


def _post(path: str, body: bytes, timeout: float) -> "tuple[int, bytes]":
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        s.settimeout(timeout)
        s.connect(path)
        request = (
            "POST /cni HTTP/1.1\r\nHost: netcomp\r\nContent-Type: application/json\r\n"
            + SHIM_HEADER
            + ": 1\r\nConnection: close\r\nContent-Length: "
            + str(len(body))
            + "\r\n\r\n"
        )
        s.sendall(request.encode() + body)
        raw = b""
        head_seen = False
        want: int | None = None  # bytes of the whole answer, when its head gives a Content-Length
        while want is None or len(raw) < want:
            chunk = s.recv(65536)
            if not chunk:
                break
            raw += chunk
            if not head_seen and (end := raw.find(b"\r\n\r\n")) >= 0:
                head_seen = True
                length = _content_length(raw[:end])
                want = None if length is None else end + 4 + length  # None: until the daemon closes
    finally:
        s.close()
    if want is not None and len(raw) < want:
        raise ConnectionError("the daemon's answer was cut short")  # it went away mid-answer: nothing to print
    head, _, payload = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, payload


def _content_length(head: bytes) -> "int | None":
    """Content-Length of an answer's head, if it has one."""
    for line in head.lower().split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip() == b"content-length" and value.strip().isdigit():
            return int(value)
    return None


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


def run(env: "Mapping[str, str]", stdin: "BinaryIO", stdout: "BinaryIO") -> int:
    """The plugin: env (mapping), stdin and stdout (binary streams). Returns the exit status."""
    command = env.get("CNI_COMMAND", "")
    if command == "VERSION":
        stdout.write(('{"cniVersion":"1.0.0","supportedVersions":' + VERSIONS + "}\n").encode())
        return 0
    config = stdin.read()
    text = config.decode("utf-8", "replace")
    version = _field(text, "cniVersion") or "1.0.0"
    sock = _field(text, "socket") or DEFAULT_SOCKET
    try:
        wait = float(_field(text, "readyTimeout") or 10)
    except ValueError:
        wait = 10.0
    body = encode_request(env, config)
    deadline = time.monotonic() + (0 if command == "DEL" else wait)
    delay = 0.02
    why = ""
    while True:
        try:
            status, payload = _post(sock, body, 600)
            if status not in RETRY_STATUS:
                break
            why = "the daemon is not ready yet"
        except OSError as e:
            why = e.strerror or str(e)
        except (ValueError, IndexError):
            why = "the daemon's answer was not HTTP"
        if time.monotonic() >= deadline:
            if command == "DEL":
                return 0  # nothing to clean up without the daemon; never block container removal
            stdout.write(
                _error(
                    version,
                    11,
                    "netcomp daemon is not answering on " + sock + ": " + why,
                    "see `systemctl status netcomp` and `journalctl -u netcomp`",
                )
            )
            return 1
        time.sleep(delay)
        delay = min(delay * 2, 0.5)
    if status == 200:
        stdout.write(payload if payload.endswith(b"\n") or not payload else payload + b"\n")
        return 0
    if payload.startswith(b"{"):
        stdout.write(payload + b"\n")
    else:
        stdout.write(
            _error(
                version, 999, "netcomp daemon answered HTTP " + str(status), payload[:300].decode("utf-8", "replace")
            )
        )
    return 1


def main() -> None:
    import posix  # built in, already loaded: `os` would cost 2 ms of imports

    env = {k.decode("utf-8", "surrogateescape"): v.decode("utf-8", "surrogateescape") for k, v in posix.environ.items()}
    out = sys.stdout.buffer
    code = run(env, sys.stdin.buffer, out)
    try:
        out.flush()
    except OSError:
        code = code or 1  # the runtime stopped reading: the answer is lost, do not claim success silently
    # The interpreter's orderly shutdown (GC, module teardown) costs about 1.3 ms and has nothing to do here:
    # everything the shim wrote is flushed, its socket is closed.
    posix._exit(code)


if __name__ == "__main__":
    main()
