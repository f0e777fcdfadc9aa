"""The shim <-> daemon wire format, compatible with Multus's thick plugin: its paths, the request's body and the
CNI error object (docs/delegation.md, "The wire format"). shim/plugin.py carries its own copy of the client side
(it may import nothing of netcomp); tests/unit/test_shim.py keeps the two in agreement."""

from __future__ import annotations

import base64
import json
from typing import Any

from netcomp.cni.result import FIRST_UNVERSIONED, IP_VERSIONED
from netcomp.cni.spec import DEFAULT_VERSION

CNI_PATH = "/cni"
DELEGATE_PATH = "/delegate"
HEALTHZ_PATH = "/healthz"
READYZ_PATH = "/readyz"
STATUS_PATH = "/status"
ATTACHMENTS_PATH = "/attachments"
METRICS_PATH = "/metrics"
IPAM_PATH = "/ipam"
IPAM_GC_PATH = "/ipam/gc"
EXPLAIN_PATH = "/explain"
SHIM_HEADER = "X-Netcomp-Shim"
ENV_KEYS = ("CNI_COMMAND", "CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_ARGS", "CNI_PATH")


def wrapped_version(version: str) -> str:
    """The cniVersion of the result in a `{"Result": ...}` answer to a caller whose config says `version`: that
    version from 1.0.0 on, else 1.0.0. Multus's shim unmarshals the Result into Go's `types/100.Result` (no
    `version` per IP) and converts it to its config's cniVersion itself, which it cannot do from 0.x."""
    return FIRST_UNVERSIONED if version in IP_VERSIONED else version


class ProtocolError(ValueError):
    def __init__(self, code: int, msg: str, details: str = "") -> None:
        super().__init__(msg)
        self.code, self.msg, self.details = code, msg, details


def encode_request(env: dict[str, str], config: bytes) -> bytes:
    body = {"env": {k: env[k] for k in ENV_KEYS if k in env}, "config": base64.b64encode(config).decode()}
    return json.dumps(body).encode()


def error_body(code: int, msg: str, details: str = "", version: str = DEFAULT_VERSION) -> bytes:
    doc: dict[str, Any] = {"cniVersion": version, "code": code, "msg": msg}
    if details:
        doc["details"] = details
    return json.dumps(doc).encode()
