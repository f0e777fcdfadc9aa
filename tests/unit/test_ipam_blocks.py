"""Blocks of a pool (ipam/blocks.py), a node's record of the blocks it holds (ipam/blockstate.py), the AddressBlock
objects' shape (kube/kubeblocks.py) and the kubeconfig the API client reads (kube/apiclient.py): pure, or on
files in a temp dir. What the allocator does with them runs against a real kube-apiserver in
tests/integration/test_ipam_blocks.py and test_cluster_ipam.py."""

from __future__ import annotations

import base64
import ipaddress
import logging
from pathlib import Path
from typing import Any

import pytest

from netcomp.ipam.blocks import Layout, block_name, block_size, lowest
from netcomp.ipam.blockstate import Held, LocalRecord, Record
from netcomp.ipam.pool import Pool, network_label
from netcomp.ipam.store import Claim
from netcomp.kube import kubeblocks
from netcomp.kube.apiclient import Api, Response
from netcomp.kube.kubeconfig import Endpoint, KubeConfigError


def pool(*ranges: dict[str, object], network: str = "n", block: int | None = None) -> Pool:
    doc: dict[str, Any] = {"type": "cluster", "ranges": [list(ranges)]}
    if block is not None:
        doc["blockSize"] = block
    p = Pool.of(network, {"netcomp": {"pool": doc}})
    assert p is not None
    return p


def test_the_default_block_size_follows_the_pool() -> None:
    sizes = {
        s: block_size(pool({"subnet": s}), 0) for s in ("10.0.0.0/30", "10.0.0.0/27", "10.0.0.0/24", "10.0.0.0/16")
    }
    assert sizes == {"10.0.0.0/30": 4, "10.0.0.0/27": 4, "10.0.0.0/24": 8, "10.0.0.0/16": 64}
    assert block_size(pool({"subnet": "10.0.0.0/16"}, block=256), 0) == 256
    assert pool({"subnet": "10.0.0.0/24"}, block=1).per_address and not pool({"subnet": "10.0.0.0/24"}).per_address


def test_blocks_cover_what_the_pool_hands_out_once() -> None:
    p = pool({"subnet": "10.0.0.0/26", "gateway": "10.0.0.1", "rangeEnd": "10.0.0.50", "exclude": ["10.0.0.16/28"]})
    lay = Layout(p, 0)
    nets = list(lay.blocks("node-a"))
    assert all(n.prefixlen == 30 for n in nets) and len(set(nets)) == len(nets)
    given = {n.network_address + off for n in nets for off in range(4) if lay.usable(n) >> off & 1}
    assert given == {a for a in ipaddress.ip_network("10.0.0.0/26") if p.range_of(a) is not None}
    assert ipaddress.ip_network("10.0.0.16/30") not in nets  # excluded whole: never claimed
    assert lay.usable(ipaddress.ip_network("10.0.0.0/30")) == 0b1100  # not the network's address, not the gateway
    assert next(Layout(p, 0).blocks("node-a")) != next(Layout(p, 0).blocks("node-b"))  # nodes mostly start apart
    assert lay.block_of(ipaddress.ip_address("10.0.0.45")) == ipaddress.ip_network("10.0.0.44/30")


def test_a_subnet_smaller_than_a_block_is_one_block() -> None:
    lay = Layout(pool({"subnet": "10.9.0.0/29"}, block=64), 0)
    assert list(lay.blocks("x")) == [ipaddress.ip_network("10.9.0.0/29")]
    six = Layout(pool({"subnet": "fd00::/120"}, block=16), 0)
    assert next(six.blocks("x")).prefixlen == 124


def test_block_names_are_distinct_and_say_network_family_and_prefix() -> None:
    names = {
        block_name("n", ipaddress.ip_network("10.0.0.0/28")),
        block_name("n", ipaddress.ip_network("10.0.0.0/27")),
        block_name("m", ipaddress.ip_network("10.0.0.0/28")),
        block_name("ns/n", ipaddress.ip_network("10.0.0.0/28")),
        block_name("n", ipaddress.ip_network("fd00::a:0/124")),
    }
    assert names == {
        "n.v4-10-0-0-0-28",
        "n.v4-10-0-0-0-27",
        "m.v4-10-0-0-0-28",
        "ns.n.v4-10-0-0-0-28",
        "n.v6-fd00--a-0-124",
    }


def test_lowest_wraps_around() -> None:
    assert (lowest(0), lowest(0b1010), lowest(0b1010, 2), lowest(0b1010, 4)) == (-1, 1, 3, 1)


def test_network_labels_fit_a_label_value() -> None:
    assert network_label("team-a/storage") == "team-a.storage"
    long = network_label("a" * 40 + "/" + "b" * 40)
    assert len(long) <= 63 and long.startswith("h-") and long == network_label("a" * 40 + "/" + "b" * 40)


def test_a_claim_of_a_block_says_so_and_one_of_its_own_reads_as_before() -> None:
    c = Claim("n.v4-10-0-0-0-28", "n", "10.0.0.5", "node-a", "c1", "net0", block="n.v4-10-0-0-0-28")
    assert Claim.from_doc(c.to_doc()) == c
    old = Claim("n.v4-10-0-0-5", "n", "10.0.0.5", "node-a", "c1", "net0")
    assert "block" not in old.to_doc() and Claim.from_doc(old.to_doc()).block == ""


def test_the_node_record_of_its_blocks_round_trips(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rec = LocalRecord(tmp_path / "ipam" / "blocks.json", "node-a")
    h = Held("n.v4-10-0-0-0-28", "n", 0, ipaddress.ip_network("10.0.0.0/28"), uid="u1")
    h.lent = {3: {"node": "node-b", "request": "node-b.1"}}
    h.lending = {4: ["17", True]}
    h.taken = {5}
    rec.save([h])
    assert (tmp_path / "ipam" / "blocks.json").stat().st_mode & 0o777 == 0o600
    [back] = rec.load()
    assert (back.name, back.uid, back.lent, back.taken) == (h.name, "u1", h.lent, {5})
    assert back.lending == {4: ["17", False]}  # whether the watch showed that version: not across a restart
    assert LocalRecord(tmp_path / "ipam" / "blocks.json", "node-b").load() == []  # another node's: not this one's
    (tmp_path / "ipam" / "blocks.json").write_text("{nope")
    with caplog.at_level(logging.ERROR):
        assert rec.load() == []
    assert "found again on the API server" in caplog.text


def test_an_address_block_object_round_trips() -> None:
    rec = Record("n.v4-10-0-0-0-28", "n", "10.0.0.0/28", "node-a", True,
                 used={"10.0.0.2": {"containerID": "c", "interface": "net0"}},
                 lent={"10.0.0.3": {"node": "node-b", "request": "r"}},
                 requests={"node-c.1": {"node": "node-c"}})  # fmt: skip
    obj = kubeblocks.to_object(rec)
    assert obj["metadata"]["labels"] == {"netcomp.io/network": "n", "netcomp.io/node": "node-a"}
    obj["metadata"].update(uid="u", resourceVersion="9", creationTimestamp="2026-01-01T00:00:00Z")
    back = kubeblocks.from_object(obj)
    assert back is not None and (back.used, back.lent, back.requests) == (rec.used, rec.lent, rec.requests)
    assert (back.uid, back.rv, back.created > 0) == ("u", "9", True)
    assert (
        kubeblocks.from_object({"kind": "AddressBlock", "spec": {"network": "n", "cidr": "nope", "node": "a"}}) is None
    )
    assert kubeblocks.from_object({"kind": "AddressClaim", "spec": {}}) is None
    assert kubeblocks._pointer("lent", "a/b~c") == "/spec/lent/a~1b~0c"


# ------------------------------------------------------------------------------------------------ kubeconfig


def kubeconfig(tmp_path: Path, user: dict[str, Any], cluster: dict[str, Any] | None = None) -> str:
    import yaml

    cluster = cluster or {"server": "https://api.test:6443", "insecure-skip-tls-verify": True}
    doc = {
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }  # fmt: skip
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(doc))
    return str(tmp_path / "kubeconfig")


def test_a_kubeconfig_with_a_token_or_a_token_file(tmp_path: Path) -> None:
    ep = Endpoint(kubeconfig(tmp_path, {"token": "abc"}))
    got = (ep.host, ep.port, ep.verify, ep.authorization(), ep.needs_library)
    assert got == ("api.test", 6443, False, "Bearer abc", False)
    (tmp_path / "token").write_text("one\n")
    ep = Endpoint(kubeconfig(tmp_path, {"tokenFile": "token"}))  # relative to the kubeconfig's dir
    assert ep.authorization() == "Bearer one"
    (tmp_path / "token").write_text("two\n")  # rotated: read again
    assert ep.authorization() == "Bearer two"


def test_a_kubeconfig_the_library_must_read(tmp_path: Path) -> None:
    for user in ({"exec": {"command": "x"}}, {"auth-provider": {"name": "oidc"}}, {"username": "a", "password": "b"}):
        assert Endpoint(kubeconfig(tmp_path, user)).needs_library
    with_proxy = {"server": "https://api.test", "proxy-url": "http://proxy:3128"}
    assert Endpoint(kubeconfig(tmp_path, {"token": "t"}, with_proxy)).needs_library


def test_a_kubeconfig_that_is_wrong_says_what(tmp_path: Path) -> None:
    with pytest.raises(KubeConfigError, match="not an https:// URL"):
        Endpoint(kubeconfig(tmp_path, {"token": "t"}, {"server": "api.test"}))
    (tmp_path / "kubeconfig").write_text("just text")
    with pytest.raises(KubeConfigError, match="no mapping"):
        Endpoint(str(tmp_path / "kubeconfig"))
    with pytest.raises(KubeConfigError):
        Endpoint(str(tmp_path / "missing"))


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
    ep = Endpoint(kubeconfig(tmp_path, user, cluster))
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
    api = Api(kubeconfig(tmp_path, {"token": "t"}))
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


def test_a_block_size_is_a_power_of_two() -> None:
    from pydantic import ValidationError

    from netcomp.intent.model import ClusterIPAM

    assert ClusterIPAM.model_validate({"type": "cluster", "subnet": "10.0.0.0/24", "blockSize": 16}).blockSize == 16
    for bad in (3, 0, 8192):
        with pytest.raises(ValidationError, match=r"power of two|greater than|less than"):
            ClusterIPAM.model_validate({"type": "cluster", "subnet": "10.0.0.0/24", "blockSize": bad})


def test_a_daemon_with_a_cluster_does_not_load_the_kubernetes_library(tmp_path: Path) -> None:
    """The cluster's parts made as the daemon makes them, in a fresh interpreter: the `kubernetes` library (its
    model tree costs the idle daemon tens of MB) is not imported for a kubeconfig with a token."""
    import subprocess
    import sys

    path = kubeconfig(tmp_path, {"token": "t"})
    code = f"""
import sys
from pathlib import Path
from netcomp.kube.cluster import Cluster
from netcomp.kube.kubeblocks import KubeBlocks
from netcomp.kube.kubestore import KubeStore
from netcomp.metrics import Metrics
from netcomp.settings import KubeSettings
c = Cluster(KubeSettings(kubeconfig={path!r}), Path({str(tmp_path)!r}), Metrics(), "n1")
KubeStore(c), KubeBlocks(c)
print(sorted(m for m in sys.modules if m == "kubernetes" or m.startswith("kubernetes.")))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stderr
