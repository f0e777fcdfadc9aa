"""The Kubernetes API calls the daemon makes, as raw JSON over a pool of kept-alive connections, or through the
`kubernetes` library's ApiClient for a kubeconfig only it can use (kubeconfig.py tells). The calls keep the names
and arguments of the library's CoreV1Api and CustomObjectsApi (`core()`, `custom()`), and raise apierrors.py's
ApiException as the library raises its own."""

from __future__ import annotations

import contextlib
import http.client
import logging
import socket
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from netcomp.kube.apierrors import ApiException, Unreachable, words
from netcomp.kube.kubeconfig import Endpoint, KubeConfigError, document

if TYPE_CHECKING:
    from netcomp.kube.following import Backoff
    from netcomp.metrics import Metrics

log = logging.getLogger("netcomp.kube")

IDLE_CONNECTIONS = 16  # connections kept alive for the next call; more may be open at once, then closed
LIBRARY_POOL = 64  # the library's: a burst of ADDs (maxInFlight) each writing once, without "Connection pool is full"


class Response:
    """An answer read whole (what the library returns with `_preload_content=False`: `.data`, `.status`)."""

    def __init__(self, status: int, data: bytes) -> None:
        self.status, self.data = status, data

    def json(self) -> Any:
        return orjson.loads(self.data) if self.data else None


# ------------------------------------------------------------------------------------------------ transports


class _Connection(http.client.HTTPConnection):
    """A connection that sends each request, its headers and its body, in one write, on a socket without Nagle's
    delay. http.client sends them apart: two TLS records to seal and for the server to read, and the body held back
    until the headers' segment is acknowledged (Nagle's algorithm against a delayed ACK)."""

    _held: list[bytes] | None = None

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)  # TCP: a _TLSConnection wraps it itself
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def request(self, method: str, url: str, body: Any = None, headers: Mapping[str, Any] = {}, *,
                encode_chunked: bool = False) -> None:  # fmt: skip
        self._held = []
        try:
            super().request(method, url, body, headers, encode_chunked=encode_chunked)
        finally:
            held, self._held = self._held, None
        super().send(b"".join(held))

    def send(self, data: Any) -> None:
        if self._held is None:
            super().send(data)
        else:
            self._held.append(bytes(data))


class _TLSConnection(_Connection, http.client.HTTPSConnection):
    """An HTTPS connection that may check the server's certificate against another name (tls-server-name)."""

    server_name: str | None = None

    def connect(self) -> None:
        _Connection.connect(self)
        self.sock = self._context.wrap_socket(self.sock, server_hostname=self.server_name or self.host)  # type: ignore[attr-defined]


class HttpTransport:
    """Requests over a pool of kept-alive connections (at most IDLE_CONNECTIONS stay open). A kept-alive
    connection the server closed meanwhile is opened again once, for any request: the server had not read it."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.ep = endpoint
        self.ctx = endpoint.tls() if endpoint.scheme == "https" else None
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def _open(self, timeout: float | None) -> http.client.HTTPConnection:
        if self.ctx is None:
            return _Connection(self.ep.host, self.ep.port, timeout=timeout)
        conn = _TLSConnection(self.ep.host, self.ep.port, timeout=timeout, context=self.ctx)
        conn.server_name = self.ep.server_name
        return conn

    def _send(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str], timeout: float | None
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        reused = conn is not None
        while True:
            if conn is None:
                conn = self._open(timeout)
            elif conn.sock is not None:
                conn.sock.settimeout(timeout)
            conn.timeout = timeout
            try:
                conn.request(method, self.ep.prefix + path, body=body, headers=headers)
                return conn, conn.getresponse()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                conn.close()
                if not reused:
                    raise
                conn, reused = None, False  # once more, on a connection of its own
            except BaseException:
                conn.close()
                raise

    def request(self, method: str, path: str, body: bytes | None, headers: dict[str, str], timeout: float | None
                ) -> Response:  # fmt: skip
        conn, resp = self._send(method, path, body, headers, timeout)
        try:
            data = resp.read()
        except BaseException:
            conn.close()
            raise
        with self._lock:
            kept = not resp.will_close and len(self._idle) < IDLE_CONNECTIONS
            if kept:
                self._idle.append(conn)
        if not kept:
            conn.close()
        return Response(resp.status, data)

    def stream(self, path: str, headers: dict[str, str], timeout: float | None) -> Iterator[bytes]:
        """The lines of a streamed answer (a watch), on a connection of its own that is closed at the end."""
        conn, resp = self._send("GET", path, None, headers, timeout)
        try:
            if resp.status >= 300:
                raise ApiException(resp.status, resp.reason, resp.read())
            while line := resp.readline():
                yield line
        finally:
            conn.close()


class _Demote(logging.Filter):
    """urllib3's warnings (its retries, a full pool) at debug level: an operator reads the failure's own line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.WARNING:
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


def _quiet_urllib3() -> None:
    pool = logging.getLogger("urllib3.connectionpool")
    if not any(isinstance(f, _Demote) for f in pool.filters):
        pool.addFilter(_Demote())


class LibraryTransport:
    """The same requests through the kubernetes library's ApiClient (its credential plugins, proxies)."""

    def __init__(self, path: str) -> None:
        from kubernetes import client
        from kubernetes.config import kube_config

        try:
            # Read bounded (fsutil.read_bounded), not whole by the library; its file names relative to its folder.
            doc = document(path)
            conf = client.Configuration()
            conf.connection_pool_maxsize = LIBRARY_POOL  # the library's default, 5 per CPU, is less than one burst
            _quiet_urllib3()
            kube_config.KubeConfigLoader(
                config_dict=doc, config_base_path=str(Path(path).absolute().parent)
            ).load_and_set(conf)
            self.api: Any = client.ApiClient(configuration=conf)
        except KubeConfigError:
            raise
        except Exception as e:
            raise KubeConfigError(str(e)) from None

    def _call(self, method: str, path: str, body: Any, headers: dict[str, str], timeout: float | None) -> Any:
        from kubernetes.client.exceptions import ApiException as LibError

        path, _, qs = path.partition("?")
        query = urllib.parse.parse_qsl(qs) or None
        try:
            if hasattr(self.api, "param_serialize"):
                # The library as openapi-generator 7 makes it (kubernetes 37.0): the request is built with its
                # credentials, then sent; its answer comes back unread whatever its status (Api.call raises).
                built = self.api.param_serialize(
                    method, path, query_params=query, header_params=headers, body=body, auth_settings=["BearerToken"]
                )
                return self.api.call_api(*built, _request_timeout=timeout).response
            return self.api.call_api(
                path, method, query_params=query, header_params=headers, body=body, auth_settings=["BearerToken"],
                _preload_content=False, _request_timeout=timeout,
            )  # fmt: skip
        except LibError as e:
            raise ApiException(e.status or 0, str(e.reason), (e.body or "").encode()) from None

    def request(self, method: str, path: str, body: bytes | None, headers: dict[str, str], timeout: float | None
                ) -> Response:  # fmt: skip
        resp = self._call(method, path, orjson.loads(body) if body else None, headers, timeout)
        return Response(resp.status, resp.data)

    def stream(self, path: str, headers: dict[str, str], timeout: float | None) -> Iterator[bytes]:
        resp = self._call("GET", path, None, headers, timeout)
        try:
            if resp.status >= 300:  # raised by the library before openapi-generator 7, returned since
                raise ApiException(resp.status, str(resp.reason), resp.data)
            buf = b""
            for chunk in resp.stream(amt=None, decode_content=False):
                buf += chunk
                *lines, buf = buf.split(b"\n")
                yield from (line + b"\n" for line in lines)
        finally:
            resp.release_conn()


# ------------------------------------------------------------------------------------------------ the API


@dataclass(frozen=True)
class Handle:
    """What a store kept on the API server takes of the cluster: the calls (`core`, `custom`), their timeout,
    a follower's backoff (one Wakeup for the server), where a follower's status_error is said, the counters."""

    core: Any
    custom: Any
    timeout: float
    backoff: Callable[[], Backoff]
    reporting: list[Callable[[], str | None]]
    metrics: Metrics


class Api:
    """JSON calls to the API server named by a kubeconfig. HostError-free: KubeConfigError at construction,
    ApiException for an error status, OSError (and ssl/http.client errors) when the server is not reached."""

    def __init__(self, kubeconfig: str) -> None:
        try:
            ep = Endpoint(kubeconfig)
            self.transport: HttpTransport | LibraryTransport = (
                LibraryTransport(kubeconfig) if ep.needs_library else HttpTransport(ep)
            )
        except (OSError, ValueError, TypeError, KeyError) as e:  # a CA or key ssl cannot load, a malformed field
            raise KubeConfigError(str(e)) from None
        self.endpoint = ep

    def _headers(self, content_type: str | None = None, accept: str | None = None) -> dict[str, str]:
        h = {"Accept": accept or "application/json", "User-Agent": "netcomp"}
        if not isinstance(self.transport, LibraryTransport) and (auth := self.endpoint.authorization()):
            h["Authorization"] = auth
        if content_type:
            h["Content-Type"] = content_type
        return h

    def call(
        self,
        method: str,
        path: str,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        *,
        timeout: float | None = None,
        content_type: str = "application/json",
        accept: str | None = None,
    ) -> Response:
        """One call; ApiException for a status of 300 and more. `accept`: the form of the answer (a list of
        PartialObjectMetadata, say), JSON as the server writes it by default."""
        url = path + ("?" + urllib.parse.urlencode(_query(query)) if query else "")
        data = orjson.dumps(body) if body is not None else None
        headers = self._headers(content_type if data else None, accept)
        try:
            resp = self.transport.request(method, url, data, headers, timeout)
        except ApiException:
            raise
        except Exception as e:
            raise self._unreachable(e, f"{method} {path}", timeout) from e
        if resp.status >= 300:
            raise ApiException(resp.status, self._status_words(resp), resp.data)
        return resp

    def server(self) -> str:
        ep = self.endpoint
        host = f"[{ep.host}]" if ":" in ep.host else ep.host  # an IPv6 address, bracketed as in a URL (RFC 3986)
        return f"{ep.scheme}://{host}:{ep.port}{ep.prefix}"

    def _unreachable(self, e: Exception, what: str, timeout: float | None) -> Unreachable:
        log.debug("API call %s failed: %s: %s", what, type(e).__name__, e)  # the library's words, for debugging
        return Unreachable(words(e, self.server(), timeout))

    def _status_words(self, resp: Response) -> str:
        """An error status's reason and, when the server says one, its message; for 401, whose credentials were
        refused (the server's own message says only "Unauthorized")."""
        if resp.status == 401:
            return f"Unauthorized: the API server does not accept the credentials of kubeconfig {self.endpoint.path}"
        with contextlib.suppress(ValueError, AttributeError):
            doc = resp.json()
            if isinstance(doc, dict) and doc.get("message"):
                return f"{http.client.responses.get(resp.status, '')}: {doc['message']}".strip(": ")
        return http.client.responses.get(resp.status, str(resp.status))

    def watch(
        self,
        path: str,
        query: Mapping[str, Any],
        timeout: float | None,
        loads: Callable[[bytes], Any] = orjson.loads,
        accept: str | None = None,
    ) -> Iterator[dict[str, Any]]:
        """The events of a watch, each {"type", "object"}; an ERROR event is raised as ApiException (410: the
        resourceVersion is too old, list again)."""
        url = path + "?" + urllib.parse.urlencode(_query({**query, "watch": "true"}))
        lines = self.transport.stream(url, self._headers(accept=accept), timeout)
        while True:
            try:
                line = next(lines)
            except StopIteration:
                return
            except ApiException:
                raise
            except Exception as e:
                raise self._unreachable(e, f"watch {path}", timeout) from e
            event = loads(line) if line.strip() else None  # a blank line keeps the stream alive
            if not isinstance(event, dict):
                continue
            if event.get("type") == "ERROR":
                obj = event.get("object") or {}
                raise ApiException(int(obj.get("code") or 500), f"{obj.get('reason')}: {obj.get('message')}")
            yield event

    def core(self) -> Facade:
        return Facade(self, CORE)

    def custom(self) -> Facade:
        return Facade(self, CUSTOM)


def _query(q: Mapping[str, Any]) -> list[tuple[str, str]]:
    return [(k, str(v).lower() if isinstance(v, bool) else str(v)) for k, v in q.items() if v is not None]


# ------------------------------------------------------------------------------------------------ the names


# The library's method name -> (HTTP method, path, its parameters in order, the content type of a dict body patched).
Route = tuple[str, str, tuple[str, ...], str]
STRATEGIC, MERGE = "application/strategic-merge-patch+json", "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"  # a list body's
# A list's items (a watch's objects) as their metadata only: what a pod's labels need, not its spec and status.
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
POD = "/api/v1/namespaces/{namespace}/pods"
CO = "/apis/{group}/{version}"
CORE: dict[str, Route] = {
    "read_namespaced_pod": ("GET", POD + "/{name}", ("name", "namespace"), ""),
    "list_pod_for_all_namespaces": ("GET", "/api/v1/pods", (), ""),
    "list_namespace": ("GET", "/api/v1/namespaces", (), ""),
    "patch_namespaced_pod": ("PATCH", POD + "/{name}", ("name", "namespace", "body"), STRATEGIC),
    "create_namespaced_event": ("POST", "/api/v1/namespaces/{namespace}/events", ("namespace", "body"), ""),
    "read_node": ("GET", "/api/v1/nodes/{name}", ("name",), ""),
    "list_node": ("GET", "/api/v1/nodes", (), ""),
    "list_service_for_all_namespaces": ("GET", "/api/v1/services", (), ""),
}
GVP = ("group", "version", "plural")
ONE = CO + "/{plural}/{name}"
NS_GVP = ("group", "version", "namespace", "plural")
NS_ONE = CO + "/namespaces/{namespace}/{plural}/{name}"
CUSTOM: dict[str, Route] = {
    "list_cluster_custom_object": ("GET", CO + "/{plural}", GVP, ""),
    "create_cluster_custom_object": ("POST", CO + "/{plural}", (*GVP, "body"), ""),
    "get_cluster_custom_object": ("GET", ONE, (*GVP, "name"), ""),
    "delete_cluster_custom_object": ("DELETE", ONE, (*GVP, "name", "body"), ""),
    "patch_cluster_custom_object": ("PATCH", ONE, (*GVP, "name", "body"), MERGE),
    "get_namespaced_custom_object": ("GET", NS_ONE, (*NS_GVP, "name"), ""),
    "create_namespaced_custom_object": ("POST", CO + "/namespaces/{namespace}/{plural}", (*NS_GVP, "body"), ""),
    "replace_namespaced_custom_object": ("PUT", NS_ONE, (*NS_GVP, "name", "body"), ""),
    "patch_namespaced_custom_object": ("PATCH", NS_ONE, (*NS_GVP, "name", "body"), MERGE),
    "patch_namespaced_custom_object_status": ("PATCH", NS_ONE + "/status", (*NS_GVP, "name", "body"), MERGE),
    "list_custom_object_for_all_namespaces": ("GET", CO + "/{plural}", GVP, ""),
    "delete_namespaced_custom_object": ("DELETE", NS_ONE, (*NS_GVP, "name", "body"), ""),
    "get_api_resources": ("GET", CO, ("group", "version"), ""),
}


class Facade:
    """CoreV1Api's or CustomObjectsApi's methods by their names, taking their parameters as the library does, and
    `_preload_content=False` for a Response, `watch=True` for events, `_loads` to parse with, `_accept` for the
    Accept header. A list body is a JSON patch."""

    def __init__(self, api: Api, routes: dict[str, Route]) -> None:
        self.api, self.routes = api, routes

    def __getattr__(self, name: str) -> Callable[..., Any]:
        try:
            route = self.routes[name]
        except KeyError:
            raise AttributeError(name) from None
        return lambda *args, **kwargs: self._call(route, args, kwargs)

    def _call(self, route: Route, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        method, template, params, patch = route
        values = dict(zip(params, args, strict=False)) | {k: kwargs.pop(k) for k in params if k in kwargs}
        body = values.pop("body", None)
        path = template.format(**{k: urllib.parse.quote(str(v), safe="") for k, v in values.items()})
        timeout, loads = kwargs.pop("_request_timeout", None), kwargs.pop("_loads", orjson.loads)
        preload, watch = kwargs.pop("_preload_content", True), kwargs.pop("watch", False)
        accept = kwargs.pop("_accept", None)  # a list's or a watch's items as metadata only: METADATA_LIST, METADATA
        query = {_wire(k): v for k, v in kwargs.items()}
        if watch:
            return self.api.watch(path, query, timeout, loads, accept=accept and accept.replace("List;", ";"))
        ctype = (JSON_PATCH if isinstance(body, list) else patch) if method == "PATCH" else "application/json"
        resp = self.api.call(method, path, query, body, timeout=timeout, content_type=ctype, accept=accept)
        return resp if not preload else (loads(resp.data) if resp.data else None)


def _wire(name: str) -> str:
    """A keyword argument of the library's as the query parameter it is (label_selector: labelSelector)."""
    head, *rest = name.lstrip("_").split("_")
    return head + "".join(word.title() for word in rest)
