"""A kubeconfig read as kubectl reads it, for the forms a node's daemon meets: the current context's server, CA and
credentials (a token, a token file re-read as it rotates, a client certificate). It notices what only the
kubernetes library implements (exec and auth-provider plugins, basic auth, a proxy) but does not read it."""

from __future__ import annotations

import base64
import contextlib
import ssl
import tempfile
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from netcomp.fsutil import read_bounded

MAX_KUBECONFIG = 4 << 20  # a kubeconfig, token or certificate file: far below this


class KubeConfigError(Exception):
    pass


def document(path: str) -> dict[str, Any]:
    """The kubeconfig's document: a mapping, or KubeConfigError."""
    try:
        doc = yaml.safe_load(read_bounded(path, MAX_KUBECONFIG))
    except yaml.MarkedYAMLError as e:  # its own text spans lines, with a caret under the place
        mark = e.problem_mark or e.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise KubeConfigError(f"not YAML{where}: {e.problem or e.context or 'invalid'}") from None
    except (OSError, yaml.YAMLError) as e:
        raise KubeConfigError(str(e)) from None
    except RecursionError:  # the parser recurses once per level
        raise KubeConfigError("not a kubeconfig: nested too deeply") from None
    if not isinstance(doc, dict):
        raise KubeConfigError("not a kubeconfig (no mapping at the top)")
    return doc


def _pick(items: Any, name: str, what: str) -> dict[str, Any]:
    for item in items or []:
        if isinstance(item, dict) and item.get("name") == name and isinstance(item.get(what), dict):
            return item[what]  # type: ignore[no-any-return]
    raise KubeConfigError(f"no {what} named {name!r}")


def _data_or_file(d: Mapping[str, Any], key: str, base: Path) -> bytes | None:
    if d.get(f"{key}-data"):
        return base64.b64decode(str(d[f"{key}-data"]))
    if d.get(key):
        return read_bounded(base / str(d[key]), MAX_KUBECONFIG)
    return None


class Endpoint:
    """Where the API server is and how to talk to it, from a kubeconfig's current context. `needs_library`: the
    context uses something only the kubernetes library implements."""

    def __init__(self, path: str) -> None:
        self.path = path
        doc = document(path)
        base = Path(path).parent
        name = doc.get("current-context") or next(
            (c.get("name") for c in doc.get("contexts") or [] if isinstance(c, dict)), None
        )
        if not name:
            raise KubeConfigError("no current-context and no context")
        context = _pick(doc.get("contexts"), str(name), "context")
        cluster = _pick(doc.get("clusters"), str(context.get("cluster")), "cluster")
        user = _pick(doc.get("users"), str(context.get("user")), "user") if context.get("user") else {}
        only_library = (user.get("exec"), user.get("auth-provider"), user.get("username"), cluster.get("proxy-url"))
        self.needs_library = any(only_library)
        server = urllib.parse.urlsplit(str(cluster.get("server") or ""))
        if server.scheme not in ("https", "http") or not server.hostname:
            raise KubeConfigError(f"cluster server {cluster.get('server')!r} is not an https:// URL")
        self.scheme, self.host = server.scheme, server.hostname
        self.port = server.port or (443 if server.scheme == "https" else 80)
        self.prefix = server.path.rstrip("/")
        insecure = cluster.get("insecure-skip-tls-verify") or False  # absent or null: false, as kubectl reads it
        if not isinstance(insecure, bool):  # "false" quoted is a string, which kubectl refuses: never read as true
            raise KubeConfigError(f"cluster insecure-skip-tls-verify is not true or false: {insecure!r}")
        self.verify = not insecure
        self.server_name = cluster.get("tls-server-name") or None
        try:
            self.ca = _data_or_file(cluster, "certificate-authority", base)
            self.cert = _data_or_file(user, "client-certificate", base)
            self.key = _data_or_file(user, "client-key", base)
        except (OSError, ValueError) as e:
            raise KubeConfigError(str(e)) from None
        self.token = str(user.get("token") or "")
        self.token_file = str(base / str(user["tokenFile"])) if user.get("tokenFile") else ""

    def tls(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        if not self.verify:
            ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        elif self.ca is not None:
            ctx.load_verify_locations(cadata=self.ca.decode())
        else:
            ctx.load_default_certs()
        if self.cert is not None and self.key is not None:
            # ssl takes a certificate chain from files only: a private temp file, gone once loaded.
            with tempfile.NamedTemporaryFile(prefix="netcomp-kube-") as f:
                f.write(self.cert + b"\n" + self.key)
                f.flush()
                ctx.load_cert_chain(f.name)
        return ctx

    def authorization(self) -> str:
        token = self.token
        if self.token_file:  # re-read: a projected token file is rotated under the daemon
            with contextlib.suppress(OSError):
                token = read_bounded(self.token_file, MAX_KUBECONFIG).decode().strip()
        return f"Bearer {token}" if token else ""
