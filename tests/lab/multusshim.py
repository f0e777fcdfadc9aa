"""Multus's thick shim (`multus-shim` v4.1.4) as a client of netcomp's socket, as a test can play it: the bytes it
sends and what it makes of the answers, written from its source (`cmd/multus-shim`, `pkg/server/api/shim.go` and
`api.go`, the vendored CNI library's `skel` and `types/100`) and checked against the built binary
(test_multus_shim.py compares the two byte for byte when the binary is there).

What it does, per CNI verb (the runtime execs it with the conf file's JSON on stdin):
- it reads `cniVersion` and `daemonSocketDir` (default `/run/multus/`) from the config and connects to
  `<daemonSocketDir>/multus.sock`;
- ADD and CHECK: `POST /healthz` with the body `null` every 100 ms until a 200 (at most 60 s); DEL: once, and a
  DEL whose check fails is reported as done without asking anything; then `POST /cni` with
  `{"env": <its whole environment>, "config": "<base64 of stdin>"}`, compact, map keys sorted, as Go's
  encoding/json writes it, over HTTP/1.1 with Go's default headers and no timeout;
- any answer but 200 is an error: `CmdAdd (shim): CNI request failed with status N: '<body>': StdinData:
  <stdin>`, printed as CNI error 999 (for DEL, logged and dropped: exit status 0, nothing printed);
- a 200's body is unmarshalled into `{"Result": <Go's CNI 1.0 result type>}` (an empty body is no result); ADD
  converts the result to the config's cniVersion and prints it (a missing Result crashes the shim); CHECK and DEL
  print nothing;
- CHECK with a config older than 0.4.0, GC and STATUS with one older than 1.1.0, are refused by the shim itself
  (CNI error 1); GC and STATUS from 1.1.0 on, and VERSION, are answered by the shim without the daemon."""

from __future__ import annotations

import base64
import ipaddress
import json
import socket
from collections.abc import Mapping
from typing import Any

SOCKET_NAME = "multus.sock"
HEALTHZ_BODY = b"null"  # json.Marshal(nil): DoCNI marshals the readiness check's request, which is nil
ONE_X = ("1.0.0", "1.1.0")  # the result versions types/100 converts from, to every version a config can have
_OLD = ("0.3.0", "0.3.1", "0.4.0")
_ERROR_PREFIX = {"ADD": "CmdAdd (shim): ", "CHECK": "CmdCheck (shim): "}


def go_json(obj: Any) -> str:
    """encoding/json's Marshal for what the shim marshals (strings and maps of strings): compact, map keys
    sorted, `<`, `>`, `&`, U+2028 and U+2029 escaped; other non-ASCII as it is."""
    out = json.dumps(obj, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    for c, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        out = out.replace(c, esc)
    return out


def post(path: str, body: bytes) -> bytes:
    """A request as Go's http.Client writes it for its client's `Post` to "http://dummy"+path (application/json)."""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: dummy\r\nUser-Agent: Go-http-client/1.1\r\nContent-Length: {len(body)}\r\n"
        "Content-Type: application/json\r\nAccept-Encoding: gzip\r\n\r\n"
    )
    return head.encode() + body


def healthz() -> bytes:
    return post("/healthz", HEALTHZ_BODY)


def cni(env: Mapping[str, str], stdin: bytes) -> bytes:
    """`POST /cni` with the shim's `Request{Env, Config}`: the struct's fields in order, the map's keys sorted."""
    body = '{"env":' + go_json(dict(env)) + ',"config":"' + base64.b64encode(stdin).decode() + '"}'
    return post("/cni", body.encode())


def exchange(sock_path: str, request: bytes, timeout: float = 120) -> tuple[int, bytes]:
    """Send one request, read the answer to its end (the daemon closes the connection): (status, body)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(sock_path)
        s.sendall(request)
        return read_answer(s)


def read_answer(s: socket.socket) -> tuple[int, bytes]:
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    return split_answer(data)


def split_answer(data: bytes) -> tuple[int, bytes]:
    """(status, body) of an HTTP/1.1 answer as Go's client reads it: the body is Content-Length bytes."""
    head, sep, rest = data.partition(b"\r\n\r\n")
    assert sep, f"no complete HTTP head in {data[:200]!r}"
    lines = head.split(b"\r\n")
    assert lines[0].startswith(b"HTTP/1.1 "), lines[0]
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(b":") for line in lines[1:])}
    length = int(headers[b"content-length"])
    assert len(rest) >= length, f"answer cut short: {len(rest)} of {length} bytes"
    return int(lines[0].split()[1]), rest[:length]


# ------------------------------------------------------------------------------------------ what it prints


def outcome(verb: str, stdin: bytes, status: int, body: bytes) -> tuple[int, Any]:
    """(exit status, what is printed: parsed JSON or None) of the shim for the daemon's answer to its /cni
    request: postRequest, then CmdAdd / CmdCheck / CmdDel and skel's printing of errors."""
    version = json.loads(stdin).get("cniVersion", "")
    if status != 200:
        if verb == "DEL":
            return 0, None  # "No error in DEL (as of CNI spec)"
        err = f"CNI request failed with status {status}: '{body.decode()}': StdinData: {stdin.decode()}"
        return 1, {"code": 999, "msg": _ERROR_PREFIX[verb] + err}
    result = unmarshal_result(body)
    if verb != "ADD":
        return 0, None
    assert result is not None, "an ADD answered without a Result: multus-shim dereferences it and crashes"
    return 0, convert(result, version)


def unmarshal_result(body: bytes) -> dict[str, Any] | None:
    """`json.Unmarshal(body, &Response{})`: the Result, in Go's CNI 1.0 result type, as a dict of what that type
    keeps (unknown keys dropped, as Go drops them; a wrong type or an address that is no CIDR fails, as in Go)."""
    if not body:
        return None
    doc = json.loads(body)
    assert isinstance(doc, dict), f"the answer is not an object: {body[:200]!r}"
    # Go matches a struct field's name case-insensitively, an exact match first.
    key = "Result" if "Result" in doc else next((k for k in doc if k.lower() == "result"), None)
    raw = doc.get(key) if key is not None else None
    if raw is None:
        return None
    assert isinstance(raw, dict), f"Result is not an object: {raw!r}"
    out: dict[str, Any] = {"cniVersion": _typed(raw, "cniVersion", str, "")}
    out["interfaces"] = [
        _fields(i, {"name": str, "mac": str, "mtu": int, "sandbox": str, "socketPath": str, "pciID": str})
        for i in _list(raw, "interfaces")
    ]
    out["ips"] = [_ip(ip) for ip in _list(raw, "ips")]
    out["routes"] = [_route(r) for r in _list(raw, "routes")]
    dns = raw.get("dns") or {}
    assert isinstance(dns, dict), f"dns is not an object: {dns!r}"
    out["dns"] = _fields(dns, {"nameservers": list, "domain": str, "search": list, "options": list})
    return out


def convert(result: dict[str, Any], version: str) -> dict[str, Any]:
    """cnitypes.PrintResult(result, version): types/100's converters, then the printed JSON."""
    frm = result["cniVersion"] or "1.1.0"  # GetAsVersion: an unset version is the newest it implements
    if frm != version:
        assert frm in ONE_X, f"multus-shim has no conversion of a {frm} result to {version} (types/100 panics)"
    if frm == version or version in ONE_X:
        # types/100's own type, printed by its MarshalJSON (which drops an empty dns), omitempty elsewhere
        return {k: v for k, v in {**result, "cniVersion": version}.items() if v not in ([], {})}
    assert version in _OLD, f"not a version a CNI 0.3+ config can have: {version}"
    out = {
        "cniVersion": version,
        "interfaces": [{k: v for k, v in i.items() if k in ("name", "mac", "sandbox")} for i in result["interfaces"]],
        "ips": [{"version": "4" if ip_version(ip) == 4 else "6", **ip} for ip in result["ips"]],
        "routes": result["routes"],
        "dns": result["dns"],  # types040.Result prints its dns even when empty
    }
    return {k: v for k, v in out.items() if k == "dns" or v != []}


def ip_version(ip: dict[str, Any]) -> int:
    return ipaddress.ip_interface(ip["address"]).version


def _list(doc: dict[str, Any], key: str) -> list[dict[str, Any]]:
    v = doc.get(key) or []
    assert isinstance(v, list) and all(isinstance(x, dict) for x in v), f"{key} is not a list of objects: {v!r}"
    return v


def _typed(doc: dict[str, Any], key: str, typ: type, default: Any) -> Any:
    v = doc.get(key, default)
    ok = isinstance(v, typ) and not (typ is int and isinstance(v, bool))
    assert v is None or ok, f"{key}: {v!r} does not unmarshal into a Go {typ.__name__}"
    return v


_POINTERS = ("interface", "table", "scope")  # *int in Go: omitempty drops nil only, 0 is kept


def _fields(doc: dict[str, Any], types: dict[str, type]) -> dict[str, Any]:
    """The fields Go's struct has, those that are set (omitempty: what Go would print back)."""
    return {
        k: _typed(doc, k, t, None)
        for k, t in types.items()
        if doc.get(k) is not None and (k in _POINTERS or doc[k] not in ("", 0, []))
    }


def _ip(doc: dict[str, Any]) -> dict[str, Any]:
    out = _fields(doc, {"interface": int, "address": str, "gateway": str})
    ipaddress.ip_interface(out["address"])  # types.IPNet: net.ParseCIDR
    if "gateway" in out:
        ipaddress.ip_address(out["gateway"])
    return out


def _route(doc: dict[str, Any]) -> dict[str, Any]:
    out = _fields(doc, {"dst": str, "gw": str, "mtu": int, "advmss": int, "priority": int, "table": int, "scope": int})
    ipaddress.ip_network(out["dst"], strict=False)
    return out
