"""The daemon's CNI endpoints, apart from HTTP: `/cni` (the runtime's request, Multus-thick compatible),
`/delegate` (hot-plug) and `/explain` (what an ADD would do, read-only), each a function from the body to its
Outcome (the answer, and the line logged about it once the answer is out). The server (server.py) only moves
bytes; it runs these on its worker threads."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from netcomp.cni import result as cniresult
from netcomp.cni.codes import E_DECODE, E_INVALID_CONFIG, E_INVALID_ENV, E_IO, E_OTHER
from netcomp.cni.spec import DEFAULT_VERSION, compact, loads
from netcomp.daemon.server import protocol
from netcomp.daemon.server.protocol import ProtocolError
from netcomp.delegate import dispatch, hotplug
from netcomp.delegate.delegator import Delegator
from netcomp.delegate.explain import Subject
from netcomp.delegate.explain import explain as explain_subject
from netcomp.delegate.request import parse_request
from netcomp.errors import DelegateError, HostError, printable
from netcomp.metrics import Metrics
from netcomp.pods.naming import PodRef

log = logging.getLogger("netcomp.server")
Line = tuple[int, str, tuple[object, ...]]  # a log line: level, message, arguments
FIELD = 200  # characters of a peer's value (an ID, a network's name) a log line carries at most


@dataclass(frozen=True, slots=True)
class Hotplug:
    """A `/delegate` request: `{"command": "ADD"|"DEL", "containerID", "netns", "network", "ifname"?,
    "runtimeIfname"?, "podNamespace"?, "podName"?, "podUID"?}` (what `netcomp attach|detach` sends; the pod for
    a network of a device plugin's resource)."""

    command: str
    container_id: str
    netns: str
    network: str
    ifname: str | None
    runtime_ifname: str
    pod: PodRef | None = None


def parse_hotplug(body: bytes) -> Hotplug:
    try:
        doc = loads(body)
    except ValueError as e:
        raise ProtocolError(E_DECODE, f"request is not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise ProtocolError(E_DECODE, "request must be a JSON object")
    command = doc.get("command", "ADD")
    if command not in ("ADD", "DEL"):
        raise ProtocolError(E_INVALID_ENV, f"command must be ADD or DEL, not {str(command)[:40]!r}")
    values: dict[str, str | None] = {}
    for key, required in (("containerID", True), ("network", True), ("netns", False), ("ifname", False)):
        v = doc.get(key)
        if v is not None and not isinstance(v, str):
            raise ProtocolError(E_INVALID_CONFIG, f"{key} must be a string")
        if required and not v:
            raise ProtocolError(E_INVALID_CONFIG, "containerID and network are required")
        values[key] = v or None
    runtime_ifname = doc.get("runtimeIfname") or "eth0"
    if not isinstance(runtime_ifname, str):
        raise ProtocolError(E_INVALID_CONFIG, "runtimeIfname must be a string")
    if command == "ADD" and not values["netns"]:
        raise ProtocolError(E_INVALID_ENV, "netns is required to attach")
    pod_keys = ("podNamespace", "podName", "podUID")
    ns, name, uid = (doc.get(k) or "" for k in pod_keys)
    if not all(isinstance(v, str) for v in (ns, name, uid)) or bool(ns) != bool(name):
        raise ProtocolError(E_INVALID_CONFIG, "podNamespace and podName must be given together, as strings")
    return Hotplug(
        command,
        values["containerID"] or "",
        values["netns"] or "",
        values["network"] or "",
        values["ifname"],
        runtime_ifname,
        PodRef(ns, name, uid) if ns else None,
    )


def _error(
    code: int,
    msg: str,
    details: str = "",
    version: str = DEFAULT_VERSION,
    *,
    line: Line | None = None,
) -> Outcome:
    return Outcome(400, protocol.error_body(code, msg, details, version), line)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What an endpoint answers, and the line it logs about it: the server writes the answer first and calls
    `log()` once the answer is out (under systemd a line is a write to journald's socket, which wakes journald;
    on a two-core node that sat on the path of every answer)."""

    status: int
    body: bytes
    line: Line | None = None

    def log(self) -> None:
        if self.line is not None:
            level, msg, args = self.line
            log.log(level, msg, *args)


def cni(delegator: Delegator, metrics: Metrics, body: bytes, *, bare: bool) -> Outcome:
    """POST /cni. `bare`: the netcomp shim asked for the result itself, not wrapped in {"Result": ...}; a wrapped
    ADD result is in CNI 1.x's shape (protocol.wrapped_version), as Multus's shim needs it. A bug's traceback is
    logged at once; the request is counted before its answer, so that /metrics agrees with the client."""
    t = time.perf_counter()
    verb, cid, version, req = "?", "?", DEFAULT_VERSION, None
    line: Line
    try:
        env, config, raw = protocol.decode_request(body)
        req = parse_request(env, config, raw)
        verb, cid, version = req.command, printable(req.container_id or "-", FIELD), req.cni_version
        done = dispatch.handle(delegator, req)
        ms, nets = (time.perf_counter() - t) * 1000, delegator.describe(req, done.networks)
        line = logging.INFO, "CNI %s container=%s networks=%s ok in %.1f ms", (verb, cid, nets, ms)
        result, ok = done.result, "ok"
        if bare:
            answer = Outcome(200, compact(result) if result else b"", line)
        else:
            if verb == "ADD":
                result = cniresult.convert(result, protocol.wrapped_version(version))
            answer = Outcome(200, compact({"Result": result or None}), line)
    except ProtocolError as e:
        line, ok = (logging.WARNING, "CNI request refused: code %d: %s", (e.code, printable(e.msg, FIELD))), "error"
        answer = _error(e.code, e.msg, e.details, line=line)
    except DelegateError as e:
        ms, nets = (time.perf_counter() - t) * 1000, delegator.describe(req, e.networks) if req is not None else "-"
        why = printable(e.full_msg) + (f" ({printable(e.details)})" if e.details else "")
        msg = "CNI %s container=%s networks=%s failed in %.1f ms: code %d: %s"
        line, ok = (logging.WARNING, msg, (verb, cid, nets, ms, e.code, why)), "error"
        answer = _error(e.code, e.full_msg, e.details, version, line=line)
    except HostError as e:
        nets = delegator.describe(req, e.networks) if req is not None else "-"
        line = logging.ERROR, "CNI %s container=%s networks=%s host error: %s", (verb, cid, nets, printable(str(e)))
        answer, ok = _error(E_IO, str(e), version=version, line=line), "error"
    except Exception as e:  # a bug: answer, log, keep serving
        log.exception("CNI %s container=%s internal error", verb, cid)
        ok = "error"  # a bug after the request ran (its answer's making) is not "ok"
        answer = _error(E_OTHER, f"internal error: {type(e).__name__}: {e}", "this is a bug in netcomp", version)
    metrics.requests.labels(verb, ok).inc()
    metrics.latency.labels(verb).observe(time.perf_counter() - t)
    return answer


def delegate(delegator: Delegator, body: bytes) -> Outcome:
    """POST /delegate: hot-plug one network into (ADD) or out of (DEL) a running container."""
    hp: Hotplug | None = None
    try:
        hp = parse_hotplug(body)
        result = hotplug.hotplug(
            delegator, hp.command, hp.container_id, hp.netns, hp.network, hp.ifname, hp.runtime_ifname, hp.pod
        )
        return Outcome(200, compact({"Result": result or None}), (logging.INFO, "hot-plug %s ok", (_what(hp),)))
    except ProtocolError as e:
        return _error(e.code, e.msg, e.details)
    except DelegateError as e:
        line = logging.WARNING, "hot-plug %s failed: code %d: %s", (_what(hp), e.code, printable(e.full_msg))
        return _error(e.code, e.full_msg, e.details, line=line)
    except HostError as e:
        return _error(E_IO, str(e), line=(logging.ERROR, "hot-plug %s host error: %s", (_what(hp), printable(str(e)))))
    except Exception as e:
        log.exception("hot-plug internal error")
        return _error(E_OTHER, f"internal error: {type(e).__name__}: {e}", "this is a bug in netcomp")


def _what(hp: Hotplug | None) -> str:
    """The request in a log line: every value a peer chose escaped and cut to FIELD characters."""
    if hp is None:
        return "?"
    return f"{hp.command} container={printable(hp.container_id, FIELD)} network={printable(hp.network, FIELD)}"


def parse_explain(body: bytes) -> Subject:
    """A `/explain` request: `{"pod": "namespace/name"}`, `{"container": ID}` or `{"cniArgs": "...", "ifname"?}`
    (what `netcomp explain` sends). ProtocolError when it is none of them."""
    try:
        doc = loads(body)
    except ValueError as e:
        raise ProtocolError(E_DECODE, f"request is not JSON: {e}") from None
    if not isinstance(doc, dict) or not all(
        isinstance(doc.get(k, ""), str) for k in ("pod", "container", "cniArgs", "ifname")
    ):
        raise ProtocolError(E_DECODE, "request must be a JSON object of strings")
    given = [k for k in ("pod", "container", "cniArgs") if k in doc]
    if len(given) != 1:
        raise ProtocolError(E_INVALID_CONFIG, "give exactly one of pod, container and cniArgs")
    ns, _, name = str(doc.get("pod") or "").partition("/")
    if "pod" in doc and not (ns and name):
        raise ProtocolError(E_INVALID_CONFIG, f"pod must be namespace/name, not {str(doc['pod'])[:80]!r}")
    return Subject(
        pod=PodRef(ns, name) if "pod" in doc else None,
        container=doc.get("container"),
        cni_args=doc.get("cniArgs"),
        ifname=doc.get("ifname") or "eth0",
    )


def explain(delegator: Delegator, body: bytes, *, hotplug: bool) -> dict[str, object]:
    """POST /explain: what an ADD of the subject would do now, and why; nothing is changed. A subject the ADD
    would refuse outright (a container ID or interface name that is not one) is a 400, in the ADD's words."""
    subject = parse_explain(body)
    try:
        return explain_subject(delegator, subject, hotplug=hotplug)
    except DelegateError as e:
        raise ProtocolError(e.code, e.full_msg, e.details) from None
