"""netcomp's own Kubernetes API client (kube/apiclient.py): the kubeconfig it reads (a token or a token file, a
client certificate and a CA as data, what only the `kubernetes` library reads, what is wrong), the calls by the
library's names routed to the API's paths, and a daemon with a token that never loads that library. The API
server itself is in tests/integration/test_kube.py."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from netcomp.kube.apiclient import Api, Response
from netcomp.kube.kubeconfig import Endpoint, KubeConfigError
from tests.lab.kubeapi import write_kubeconfig


def test_a_kubeconfig_with_a_token_or_a_token_file(tmp_path: Path) -> None:
    ep = Endpoint(write_kubeconfig(tmp_path / "kubeconfig", {"token": "abc"}))
    got = (ep.host, ep.port, ep.verify, ep.authorization(), ep.needs_library)
    assert got == ("api.test", 6443, False, "Bearer abc", False)
    (tmp_path / "token").write_text("one\n")
    ep = Endpoint(write_kubeconfig(tmp_path / "kubeconfig", {"tokenFile": "token"}))  # relative to the kubeconfig's dir
    assert ep.authorization() == "Bearer one"
    (tmp_path / "token").write_text("two\n")  # rotated: read again
    assert ep.authorization() == "Bearer two"


def test_a_kubeconfig_the_library_must_read(tmp_path: Path) -> None:
    for user in ({"exec": {"command": "x"}}, {"auth-provider": {"name": "oidc"}}, {"username": "a", "password": "b"}):
        assert Endpoint(write_kubeconfig(tmp_path / "kubeconfig", user)).needs_library
    with_proxy = {"server": "https://api.test", "proxy-url": "http://proxy:3128"}
    assert Endpoint(write_kubeconfig(tmp_path / "kubeconfig", {"token": "t"}, with_proxy)).needs_library


def test_a_kubeconfig_that_is_wrong_says_what(tmp_path: Path) -> None:
    with pytest.raises(KubeConfigError, match="not an https:// URL"):
        Endpoint(write_kubeconfig(tmp_path / "kubeconfig", {"token": "t"}, {"server": "api.test"}))
    (tmp_path / "kubeconfig").write_text("just text")
    with pytest.raises(KubeConfigError, match="no mapping"):
        Endpoint(str(tmp_path / "kubeconfig"))
    with pytest.raises(KubeConfigError):
        Endpoint(str(tmp_path / "missing"))
    for text in ("false", "true", "no", 1):  # a string, not YAML's boolean: kubectl refuses it; never read as true
        with pytest.raises(KubeConfigError, match="insecure-skip-tls-verify is not true or false"):
            Endpoint(
                write_kubeconfig(
                    tmp_path / "kubeconfig",
                    {"token": "t"},
                    {"server": "https://a.test", "insecure-skip-tls-verify": text},
                )
            )
    assert Endpoint(write_kubeconfig(tmp_path / "kubeconfig", {"token": "t"}, {"server": "https://a.test"})).verify


def test_a_client_certificate_and_a_ca_as_data(tmp_path: Path) -> None:
    """A real certificate and key made with openssl, handed over as data: the TLS context takes them."""
    import subprocess

    argv = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=t", "-days", "1"]
    subprocess.run(
        [*argv, "-keyout", str(tmp_path / "k"), "-out", str(tmp_path / "c")], check=True, capture_output=True
    )
    cert, key = (tmp_path / "c").read_bytes(), (tmp_path / "k").read_bytes()
    user = {
        "client-certificate-data": base64.b64encode(cert).decode(),
        "client-key-data": base64.b64encode(key).decode(),
    }
    cluster = {"server": "https://api.test", "certificate-authority-data": base64.b64encode(cert).decode()}
    ep = Endpoint(write_kubeconfig(tmp_path / "kubeconfig", user, cluster))
    assert ep.cert == cert and ep.key == key and ep.verify
    ctx = ep.tls()
    assert ctx.cert_store_stats()["x509_ca"] == 1


class Recorded:
    """A transport that records what it is asked and answers `answer`: the routing of the calls by the library's
    names under test, not the API server (the integration tests talk to a real one)."""

    def __init__(self, answer: bytes = b"{}") -> None:
        self.asked: list[tuple[str, str, bytes | None, dict[str, str]]] = []
        self.answer = answer

    def request(self, method: str, path: str, body: bytes | None, headers: dict[str, str], timeout: float | None
                ) -> Response:  # fmt: skip
        self.asked.append((method, path, body, headers))
        return Response(200, self.answer)


def test_calls_by_the_librarys_names(tmp_path: Path) -> None:
    api = Api(write_kubeconfig(tmp_path / "kubeconfig", {"token": "t"}))
    rec = Recorded(b'{"items": []}')
    api.transport = rec  # type: ignore[assignment]
    custom, core = api.custom(), api.core()
    assert custom.list_cluster_custom_object("netcomp.io", "v1", "addressblocks", label_selector="a in (b)",
                                             limit=500, _continue=None) == {"items": []}  # fmt: skip
    custom.patch_cluster_custom_object("g", "v1", "p", "x", [{"op": "test"}])
    custom.patch_cluster_custom_object("g", "v1", "p", "x", {"spec": {}})
    core.patch_namespaced_pod("web-0", "team a", {"metadata": {}}, _preload_content=False)
    paths = [(m, p, h.get("Content-Type")) for m, p, _, h in rec.asked]
    assert paths == [
        ("GET", "/apis/netcomp.io/v1/addressblocks?labelSelector=a+in+%28b%29&limit=500", None),
        ("PATCH", "/apis/g/v1/p/x", "application/json-patch+json"),
        ("PATCH", "/apis/g/v1/p/x", "application/merge-patch+json"),
        ("PATCH", "/api/v1/namespaces/team%20a/pods/web-0", "application/strategic-merge-patch+json"),
    ]
    assert all(h["Authorization"] == "Bearer t" for *_, h in rec.asked)
    with pytest.raises(AttributeError):
        _ = core.delete_namespace


def test_a_daemon_with_a_cluster_does_not_load_the_kubernetes_library(tmp_path: Path) -> None:
    """The cluster's parts made as the daemon makes them, in a fresh interpreter: the `kubernetes` library (its
    model tree costs the idle daemon tens of MB) is not imported for a kubeconfig with a token."""
    import subprocess
    import sys

    path = write_kubeconfig(tmp_path / "kubeconfig", {"token": "t"})
    code = f"""
import sys
from pathlib import Path
from netcomp.cluster.intents import Cluster
from netcomp.ipam.blockobjects import KubeBlocks
from netcomp.ipam.claimobjects import KubeStore
from netcomp.metrics import Metrics
from netcomp.settings import KubeSettings
c = Cluster(KubeSettings(kubeconfig={path!r}), Path({str(tmp_path)!r}), Metrics(), "n1")
KubeStore(c.handle), KubeBlocks(c.handle)
print(sorted(m for m in sys.modules if m == "kubernetes" or m.startswith("kubernetes.")))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stderr


def test_an_ipv6_server_is_named_as_a_url_names_it(tmp_path: Path) -> None:
    """[::1]:6443, so that an error naming the server reads as an address an operator can paste."""
    api = Api(
        write_kubeconfig(
            tmp_path / "kubeconfig",
            {"token": "t"},
            {"server": "https://[fd00::1]:6443", "insecure-skip-tls-verify": True},
        )
    )
    assert (api.endpoint.host, api.server()) == ("fd00::1", "https://[fd00::1]:6443")


def test_a_kubeconfig_that_is_not_yaml_is_said_in_one_line(tmp_path: Path) -> None:
    """Not YAML, or YAML nested deeper than the parser recurses: a KubeConfigError of one line (doctor prints a
    line per check), never a RecursionError out of Api."""
    bad = tmp_path / "kubeconfig"
    bad.write_text("{{{: [")
    with pytest.raises(KubeConfigError) as e:
        Api(str(bad))
    assert "\n" not in str(e.value) and "line 1, column 4" in str(e.value), str(e.value)
    bad.write_text("[" * 100_000)
    with pytest.raises(KubeConfigError, match="nested too deeply"):
        Api(str(bad))
