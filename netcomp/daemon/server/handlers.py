"""The daemon's CNI endpoints, apart from HTTP: `/cni` (the runtime's request, Multus-thick compatible),
`/delegate` (hot-plug) and `/explain` (what an ADD would do, read-only), each a function from the body to its
Outcome: the answer, and the line logged once the answer is out. The server (server.py) runs them on workers."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from netcomp.cni import result as cniresult
from netcomp.cni.codes import E_IO, E_OTHER
from netcomp.cni.spec import DEFAULT_VERSION, SUPPORTED_VERSIONS, compact
from netcomp.daemon.server import protocol
from netcomp.daemon.server.protocol import ProtocolError
from netcomp.delegate import request
from netcomp.delegate.delegator import Delegator
from netcomp.delegate.explain import Explainer
from netcomp.errors import DelegateError, HostError, printable
from netcomp.metrics import Metrics

log = logging.getLogger("netcomp.server")
Line = tuple[int, str, tuple[object, ...]]  # a log line: level, message, arguments
FIELD = 200  # characters of a peer's value (an ID, a network's name) a log line carries at most


def _error(
    code: int, msg: str, details: str = "", version: str = DEFAULT_VERSION, *, line: Line | None = None
) -> Outcome:
    return Outcome(400, protocol.error_body(code, msg, details, version), line)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What an endpoint answers, and the line it logs about it: the server writes the answer first and calls
    `log()` once the answer is out (under systemd a line wakes journald, which must not sit on the answer's path)."""

    status: int
    body: bytes
    line: Line | None = None

    def log(self) -> None:
        if self.line is not None:
            level, msg, args = self.line
            log.log(level, msg, *args)


def cni(delegator: Delegator, metrics: Metrics, body: bytes, *, bare: bool) -> Outcome:
    """POST /cni. `bare`: the netcomp shim asked for the result itself, not wrapped in {"Result": ...}; a wrapped
    ADD result is in CNI 1.x's shape (protocol.wrapped_version), as Multus's shim needs it. The request is
    counted before its answer, so that /metrics agrees with the client; a bug's traceback is logged at once."""
    t = time.perf_counter()
    verb, cid, version, ok = "?", "?", DEFAULT_VERSION, "error"
    line: Line
    try:
        env, config, raw = request.decode(body)
        if isinstance(config, dict) and config.get("cniVersion") in SUPPORTED_VERSIONS:
            version = config["cniVersion"]  # of the error too, when the request is refused
        req = request.parse_request(env, config, raw)
        verb, cid, version = req.command, printable(req.container_id or "-", FIELD), req.cni_version
        done = delegator.handle(req)
        ms, nets = (time.perf_counter() - t) * 1000, _networks(done.networks)
        line = logging.INFO, "CNI %s container=%s networks=%s ok in %.1f ms", (verb, cid, nets, ms)
        result, ok = done.result, "ok"
        if bare:
            answer = Outcome(200, compact(result) if result else b"", line)
        else:
            if verb == "ADD":
                result = cniresult.convert(result, protocol.wrapped_version(version))
            answer = Outcome(200, compact({"Result": result or None}), line)
    except DelegateError as e:
        if verb == "?":  # not a request at all: refused before it said what it is
            line = logging.WARNING, "CNI request refused: code %d: %s", (e.code, printable(e.full_msg, FIELD))
        else:
            why = printable(e.full_msg) + (f" ({printable(e.details)})" if e.details else "")
            ms, msg = (time.perf_counter() - t) * 1000, "CNI %s container=%s networks=%s failed in %.1f ms: code %d: %s"
            line = logging.WARNING, msg, (verb, cid, _networks(e.networks), ms, e.code, why)
        answer = _error(e.code, e.full_msg, e.details, version, line=line)
    except HostError as e:
        why, nets = printable(str(e)), _networks(e.networks)
        line = logging.ERROR, "CNI %s container=%s networks=%s host error: %s", (verb, cid, nets, why)
        answer = _error(E_IO, str(e), version=version, line=line)
    except Exception as e:  # a bug: answer, log, keep serving
        log.exception("CNI %s container=%s internal error", verb, cid)
        answer = _error(E_OTHER, f"internal error: {type(e).__name__}: {e}", "this is a bug in netcomp", version)
    metrics.requests.labels(verb, ok).inc()
    metrics.latency.labels(verb).observe(time.perf_counter() - t)
    return answer


def _networks(names: tuple[str, ...] | None) -> str:
    """The networks a request was about, for its log line: those it attached or its record named; "?" when it
    failed before it knew them."""
    return "?" if names is None else printable(",".join(names), FIELD) or "-"


def delegate(delegator: Delegator, body: bytes) -> Outcome:
    """POST /delegate: hot-plug one network into (ADD) or out of (DEL) a running container."""
    hp: request.Hotplug | str = "?"
    try:
        hp = request.parse_hotplug(body)
        result = delegator.hotplug(
            hp.command, hp.container_id, hp.netns, hp.network, hp.ifname, hp.runtime_ifname, hp.pod
        )
        return Outcome(200, compact({"Result": result or None}), (logging.INFO, "hot-plug %s ok", (str(hp),)))
    except DelegateError as e:
        line = logging.WARNING, "hot-plug %s failed: code %d: %s", (str(hp), e.code, printable(e.full_msg))
        return _error(e.code, e.full_msg, e.details, line=line)
    except HostError as e:
        return _error(E_IO, str(e), line=(logging.ERROR, "hot-plug %s host error: %s", (str(hp), printable(str(e)))))
    except Exception as e:
        log.exception("hot-plug internal error")
        return _error(E_OTHER, f"internal error: {type(e).__name__}: {e}", "this is a bug in netcomp")


def explain(delegator: Delegator, body: bytes, *, hotplug: bool) -> dict[str, object]:
    """POST /explain: what an ADD of the subject would do now, and why; nothing is changed. A subject the ADD
    would refuse outright (a container ID or interface name that is not one) is a 400, in the ADD's words."""
    try:
        return Explainer(delegator).explain(request.parse_subject(body), hotplug=hotplug)
    except DelegateError as e:
        raise ProtocolError(e.code, e.full_msg, e.details) from None
