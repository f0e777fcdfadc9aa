"""Multus's own thick shim (`multus-shim` v4.1.4) as netcomp's client (docs/kubernetes.md,
"Multus's shim as a client"): a node moving from Multus keeps its `multus-shim` and its conf file and swaps only
the daemon, the shim reaching netcomp's socket through `<daemonSocketDir>/multus.sock`.

The wire-level tests always run: a client sends byte for byte what multus-shim sends (multusshim.py) to the
daemon as a process of its own (procdaemon.py: the socket held as systemd's socket unit holds it), with the real
plugins in network namespaces made here, and reads the answers as multus-shim reads them. When the binary built
from Multus's source is in /var/cache/netcomp-test/multus-shim (or $NETCOMP_MULTUS_SHIM), the same scenarios run
through it, and what it sends is compared with what the wire-level client sends, byte for byte."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.lab import multusshim as ms
from tests.lab.daemonlab import daemon_lab, kube_lab, wait_for
from tests.lab.kubeapi import ApiServer
from tests.lab.labpods import STATUS, pod_asking
from tests.lab.multus import NAD, NADS, nad
from tests.lab.netlab import ip
from tests.lab.poll import until
from tests.lab.procdaemon import ProcNode, proc_node

pytestmark = pytest.mark.root
MULTUS_SHIM = Path(os.environ.get("NETCOMP_MULTUS_SHIM", "/var/cache/netcomp-test/multus-shim/multus-shim"))
needs_binary = pytest.mark.skipif(
    not os.access(MULTUS_SHIM, os.X_OK),
    reason=f"no multus-shim binary at {MULTUS_SHIM} (built from Multus v4.1.4's source, outside the checkout); "
    "the wire-level tests send what it sends",
)
VERSIONS = ("0.3.1", "0.4.0", "1.0.0", "1.1.0")
# What kubelet's runtime (containerd, CRI-O) puts in CNI_ARGS; netcomp's own key asks for a second network.
POD_ARGS = "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID={cid}"


@pytest.fixture(scope="module")
def shim_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcNode]:
    """The daemon as on a node, and `<base>/multus/multus.sock`, a symlink to its socket: the daemonSocketDir
    of the docs' setup."""
    base = tmp_path_factory.mktemp("mshim")
    with proc_node(base) as n:
        d = base / "multus"
        d.mkdir(mode=0o700)
        (d / ms.SOCKET_NAME).symlink_to(n.sock)
        yield n


def socket_dir(node: ProcNode) -> Path:
    return node.base / "multus"


def conf(version: str, daemon_socket_dir: Path) -> bytes:
    """A conf file as Multus's daemon generates it (`multusConfigFile: auto`), with `daemonSocketDir` set."""
    doc = {
        "cniVersion": version,
        "name": "multus-cni-network",
        "type": "multus-shim",
        "logLevel": "verbose",
        "logToStderr": True,
        "capabilities": {"portMappings": True},
        "clusterNetwork": "/host/etc/cni/net.d/10-flannel.conflist",
        "cniConfigDir": "/host/etc/cni/net.d",
        "multusAutoconfigDir": "/host/etc/cni/net.d",
        "multusConfigFile": "auto",
        "daemonSocketDir": str(daemon_socket_dir),
    }
    return json.dumps(doc).encode()


def environ(verb: str, ctr: str, args: str | None = None) -> dict[str, str]:
    """The environment a runtime execs the shim with (libcni: its own environment plus the CNI variables), all of
    which the shim sends; one value needs Go's HTML escaping."""
    cid = f"ctr-{ctr}"
    return {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": "/root",
        "CONTAINERD_NOTE": "<a & b> é",
        "CNI_COMMAND": verb,
        "CNI_CONTAINERID": cid,
        "CNI_NETNS": f"/var/run/netns/{ctr}",
        "CNI_IFNAME": "eth0",
        "CNI_ARGS": POD_ARGS.format(cid=cid) + ";NETCOMP_NETWORKS=storage" if args is None else args,
        "CNI_PATH": "/opt/cni/bin",
    }


def cni(sock: str, verb: str, ctr: str, stdin: bytes, args: str | None = None) -> tuple[int, bytes]:
    """One verb as multus-shim runs it: the readiness check, then the request."""
    status, body = ms.exchange(sock, ms.healthz())
    assert status == 200, body
    return ms.exchange(sock, ms.cni(environ(verb, ctr, args), stdin))


def addresses(ctr: str, dev: str) -> list[str]:
    out = ip("-o", "addr", "show", "dev", dev, netns=ctr)
    return [f.split()[3] for f in out.splitlines() if " inet" in f and "scope link" not in f]


def check_attached(node: ProcNode, ctr: str, version: str, printed: dict[str, Any]) -> None:
    """What multus-shim printed for ADD is the container's eth0 as it is, in the config's version."""
    assert printed["cniVersion"] == version
    names = [i["name"] for i in printed["interfaces"]]
    eth0 = names.index("eth0")
    assert printed["interfaces"][eth0]["sandbox"] == f"/var/run/netns/{ctr}"
    mine = [i for i in printed["ips"] if i.get("interface") == eth0]
    assert [i["address"] for i in mine] == addresses(ctr, "eth0") and mine
    if version in ("0.3.0", "0.3.1", "0.4.0"):
        assert all(i["version"] == "4" for i in printed["ips"]), printed["ips"]  # CNI 0.x's IPConfig needs it
    else:
        assert all("version" not in i for i in printed["ips"])
    assert sorted(node.lab.links(ctr)) == ["eth0", "lo", "stor0"]  # the default network and storage


def check_detached(node: ProcNode, ctr: str, cache: list[str], leases: list[str]) -> None:
    assert node.lab.links(ctr) == ["lo"]
    assert node.cache_files() == cache and node.leases() == leases


# ------------------------------------------------------------------------------------------- on the wire


def test_readiness_check_is_answered(shim_node: ProcNode) -> None:
    sock = str(socket_dir(shim_node) / ms.SOCKET_NAME)
    assert ms.exchange(sock, ms.healthz()) == (200, b'{"ok":true}')


@pytest.mark.parametrize("version", VERSIONS)
def test_add_check_del_as_multus_shim_sends_them(shim_node: ProcNode, version: str) -> None:
    sock = str(socket_dir(shim_node) / ms.SOCKET_NAME)
    cache, leases = shim_node.cache_files(), shim_node.leases()
    ctr = shim_node.lab.container()
    stdin = conf(version, socket_dir(shim_node))

    status, body = cni(sock, "ADD", ctr, stdin)
    assert status == 200, body
    # The Result is in a version from which multus-shim converts to its config's, whatever that is.
    result = ms.unmarshal_result(body)
    assert result is not None and result["cniVersion"] in ms.ONE_X
    rc, printed = ms.outcome("ADD", stdin, status, body)
    assert rc == 0
    check_attached(shim_node, ctr, version, printed)
    assert len(shim_node.cache_files()) == len(cache) + 1

    if version != "0.3.1":  # multus-shim refuses CHECK itself below 0.4.0
        with_prev = json.dumps({**json.loads(stdin), "prevResult": printed}).encode()
        status, body = cni(sock, "CHECK", ctr, with_prev)
        assert (status, ms.outcome("CHECK", with_prev, status, body)) == (200, (0, None)), body

    status, body = cni(sock, "DEL", ctr, stdin)
    assert (status, ms.outcome("DEL", stdin, status, body)) == (200, (0, None)), body
    check_detached(shim_node, ctr, cache, leases)
    # DEL again (the runtime may repeat it): nothing to do, success.
    assert cni(sock, "DEL", ctr, stdin)[0] == 200


def test_a_refused_request_reaches_the_runtime_in_multus_shims_words(shim_node: ProcNode) -> None:
    sock = str(socket_dir(shim_node) / ms.SOCKET_NAME)
    cache, leases = shim_node.cache_files(), shim_node.leases()
    ctr = shim_node.lab.container()
    stdin = conf("1.0.0", socket_dir(shim_node))

    status, body = cni(sock, "ADD", ctr, stdin, args="IgnoreUnknown=1;NETCOMP_NETWORKS=nosuchnet")
    err = json.loads(body)
    assert status == 400 and err["code"] == 7 and "'nosuchnet'" in err["msg"] and "not compiled" in err["msg"]
    # multus-shim prints its own error 999 around the daemon's answer, netcomp's code and message inside.
    rc, printed = ms.outcome("ADD", stdin, status, body)
    assert rc == 1 and printed["code"] == 999
    assert printed["msg"].startswith("CmdAdd (shim): CNI request failed with status 400: '{")
    assert f"'{body.decode()}'" in printed["msg"] and '"code": 7' in printed["msg"]
    check_detached(shim_node, ctr, cache, leases)

    # A refused DEL is logged by multus-shim and reported as done: the runtime never sees it.
    status, body = cni(sock, "DEL", "../../etc", stdin)
    assert status == 400 and json.loads(body)["code"] == 4
    assert ms.outcome("DEL", stdin, status, body) == (0, None)

    # What multus-shim never sends but a broken client might: each gets a CNI error, not a crash.
    status, body = ms.exchange(sock, ms.post("/cni", b'{"env":{"CNI_COMMAND":"ADD"},"config":"%%%"}'))
    assert status == 400 and json.loads(body)["code"] == 6
    status, body = ms.exchange(sock, ms.post("/cni", b"null"))
    assert status == 400 and json.loads(body)["code"] == 6
    # Multus's hot-plug request (its api.CreateDelegateRequest) is not netcomp's /delegate: refused, not misread.
    env = {k: v for k, v in environ("ADD", ctr).items() if k.startswith("CNI_") and k != "CNI_PATH"}
    delegate = '{"env":' + ms.go_json(env) + ',"config":"e30=","interfaceAttributes":{"cni-args":null}}'
    status, body = ms.exchange(sock, ms.post("/delegate", delegate.encode()))
    assert status == 400 and json.loads(body)["code"] == 7 and shim_node.lab.links(ctr) == ["lo"]


def test_readiness_check_waits_in_the_backlog_for_a_restarting_daemon(shim_node: ProcNode) -> None:
    """With the socket held as netcomp.socket holds it, a readiness check made while the daemon is down is
    answered by the next one: multus-shim's ADD (and its one-shot DEL check) does not fail on a restart."""
    shim_node.kill()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(120)
        s.connect(str(socket_dir(shim_node) / ms.SOCKET_NAME))
        s.sendall(ms.healthz())
        shim_node.start()
        assert ms.read_answer(s) == (200, b'{"ok":true}')


@pytest.fixture
def open_node(tmp_path: Path) -> Iterator[tuple[Any, Path]]:
    """An in-process daemon whose socket sits under /tmp (pytest's temp dirs are closed to all but root), and
    its daemonSocketDir with the multus.sock symlink."""
    top = Path(tempfile.mkdtemp(prefix="nc-msock-", dir="/tmp"))
    try:
        with daemon_lab(tmp_path, socket_path=str(top / "run" / "netcomp.sock")) as dl:
            d = top / "multus"
            d.mkdir(mode=0o700)
            (d / ms.SOCKET_NAME).symlink_to(dl.sock)
            yield dl, d
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_readiness_says_try_later_while_the_daemon_stops(open_node: tuple[Any, Path]) -> None:
    """Stopping, the daemon says "not ready" to multus-shim's check, which then polls (every 100 ms, up to 60 s)
    instead of sending a request that would be refused; GET /healthz (liveness) stays 200."""
    dl, d = open_node
    sock = str(d / ms.SOCKET_NAME)
    assert ms.exchange(sock, ms.healthz())[0] == 200
    server = dl.daemon.server
    assert server is not None
    assert server.drain(5)  # nothing in flight: stops taking work at once
    status, body = ms.exchange(sock, ms.healthz())
    err = json.loads(body)
    assert status == 503 and err["code"] == 11 and "stopping" in err["msg"]
    assert ms.exchange(sock, b"GET /healthz HTTP/1.1\r\nHost: dummy\r\n\r\n")[0] == 200


def test_peer_credentials_apply_through_multus_sock(open_node: tuple[Any, Path]) -> None:
    """The symlink is a path, not a door: a connection made through it is the daemon's socket's, and a peer
    outside allowedUids is refused even when the directories and the socket are opened to it."""
    dl, d = open_node
    for p in (d, d.parent, Path(dl.sock).parent):
        os.chmod(p, 0o711)
    os.chmod(dl.sock, 0o666)
    code = f"""
import os, socket, sys
os.setgid(65534); os.setuid(65534)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.connect({str(d / ms.SOCKET_NAME)!r})
s.sendall({ms.healthz()!r})
data = b""
while chunk := s.recv(65536):
    data += chunk
sys.stdout.write(data.decode())
"""
    python = "/usr/bin/python3"  # the venv's python lives under /root, out of nobody's reach
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=30, check=True).stdout
    assert out.startswith("HTTP/1.1 403") and '"code": 100' in out and "peer uid 65534" in out
    assert ms.exchange(str(d / ms.SOCKET_NAME), ms.healthz())[0] == 200  # root, through the same path


# ------------------------------------------------------------------------------------- the real binary


class Recorder:
    """`<dir>/multus.sock`, passing each connection on to the daemon, one at a time, keeping each request and
    answer as they went over the wire."""

    def __init__(self, directory: Path, target: str) -> None:
        directory.mkdir(mode=0o700)
        self.dir, self.target = directory, target
        self.exchanges: list[tuple[bytes, bytes]] = []
        self._stop = False
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(directory / ms.SOCKET_NAME))
        self._listener.listen(16)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def requests(self) -> list[bytes]:
        return [req for req, _ in self.exchanges]

    def _serve(self) -> None:
        while True:
            conn, _ = self._listener.accept()
            with conn:
                if self._stop:
                    return
                conn.settimeout(60)
                request = _read_request(conn)
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as up:
                    up.settimeout(120)
                    up.connect(self.target)
                    up.sendall(request)
                    answer = b""
                    while chunk := up.recv(65536):
                        answer += chunk
                self.exchanges.append((request, answer))  # before the client can see it and go on
                conn.sendall(answer)

    def close(self) -> None:
        self._stop = True
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(str(self.dir / ms.SOCKET_NAME))
        self._thread.join(timeout=30)
        assert not self._thread.is_alive()
        self._listener.close()


def _read_request(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        assert chunk, f"the client closed before a complete head: {data!r}"
        data += chunk
    head = data.split(b"\r\n\r\n", 1)[0]
    length = next(
        int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
    )
    while len(data) - len(head) - 4 < length:
        chunk = conn.recv(65536)
        assert chunk, f"the client closed before the whole body: {data!r}"
        data += chunk
    return data


@contextlib.contextmanager
def recorder(directory: Path, target: str) -> Iterator[Recorder]:
    r = Recorder(directory, target)
    try:
        yield r
    finally:
        r.close()


def run_shim(env: dict[str, str], stdin: bytes) -> tuple[int, Any, str]:
    """(exit status, stdout as JSON or None, stderr) of the real multus-shim."""
    p = subprocess.run([str(MULTUS_SHIM)], input=stdin, env=env, capture_output=True, timeout=120, check=False)
    out = p.stdout.decode()
    return p.returncode, json.loads(out) if out.strip() else None, p.stderr.decode(errors="replace")


def wait_pending(path: str, timeout: float = 30) -> None:
    """Until a connection waits in the backlog of the listening socket at `path` (ss shows a listener's pending
    connections as its Recv-Q), or fail."""

    def pending() -> bool:
        out = subprocess.run(["ss", "-Hxl"], capture_output=True, text=True, timeout=30, check=True).stdout
        return any(f[4] == path and int(f[2]) > 0 for f in (line.split() for line in out.splitlines()) if len(f) > 4)

    until(pending, f"no connection waiting on {path} within {timeout}s", timeout, 0.02)


@needs_binary
@pytest.mark.parametrize("version", VERSIONS)
def test_real_multus_shim_add_check_del(shim_node: ProcNode, tmp_path: Path, version: str) -> None:
    cache, leases = shim_node.cache_files(), shim_node.leases()
    ctr = shim_node.lab.container()
    with recorder(tmp_path / "multus", shim_node.sock) as rec:
        stdin = conf(version, rec.dir)
        env = environ("ADD", ctr)
        rc, printed, err = run_shim(env, stdin)
        assert rc == 0, (printed, err)
        # It sent exactly what the wire-level tests send, and printed what they predict from the answer.
        assert rec.requests() == [ms.healthz(), ms.cni(env, stdin)]
        status, body = ms.split_answer(rec.exchanges[1][1])
        assert ms.outcome("ADD", stdin, status, body) == (rc, printed)
        check_attached(shim_node, ctr, version, printed)

        with_prev = json.dumps({**json.loads(stdin), "prevResult": printed}).encode()
        env = environ("CHECK", ctr)
        rc, out, err = run_shim(env, with_prev)
        if version == "0.3.1":
            assert (rc, out["code"], out["msg"]) == (1, 1, "config version does not allow CHECK")
            assert len(rec.exchanges) == 2  # refused without asking the daemon
        else:
            assert (rc, out) == (0, None), err
            assert rec.requests()[2:] == [ms.healthz(), ms.cni(env, with_prev)]

        env = environ("DEL", ctr)
        assert run_shim(env, stdin)[:2] == (0, None)
        assert rec.requests()[-2:] == [ms.healthz(), ms.cni(env, stdin)]
    check_detached(shim_node, ctr, cache, leases)


@needs_binary
def test_real_multus_shim_answers_gc_status_and_version_itself(shim_node: ProcNode, tmp_path: Path) -> None:
    ctr = shim_node.lab.container()
    with recorder(tmp_path / "multus", shim_node.sock) as rec:
        stdin = conf("1.1.0", rec.dir)
        for verb in ("GC", "STATUS"):
            assert run_shim(environ(verb, ctr), stdin)[:2] == (0, None)
        rc, out, _ = run_shim(environ("VERSION", ctr), stdin)
        assert rc == 0 and "1.1.0" in out["supportedVersions"]
        assert rec.exchanges == []  # the daemon is never asked: netcomp's own GC needs netcomp's shim


@needs_binary
def test_real_multus_shim_error_and_restart(shim_node: ProcNode, tmp_path: Path) -> None:
    """Through the docs' setup (the multus.sock symlink): a refused ADD printed as the wire-level test predicts,
    then an ADD started while the daemon is down, finished by the next one."""
    cache, leases = shim_node.cache_files(), shim_node.leases()
    ctr = shim_node.lab.container()
    stdin = conf("0.3.1", socket_dir(shim_node))
    env = environ("ADD", ctr, args="IgnoreUnknown=1;NETCOMP_NETWORKS=nosuchnet")
    rc, printed, _ = run_shim(env, stdin)
    status, body = ms.exchange(str(socket_dir(shim_node) / ms.SOCKET_NAME), ms.cni(env, stdin))
    assert (rc, printed) == ms.outcome("ADD", stdin, status, body)
    assert rc == 1 and '"code": 7' in printed["msg"]
    check_detached(shim_node, ctr, cache, leases)

    shim_node.kill()
    (tmp_path / "stdin").write_bytes(stdin)
    with open(tmp_path / "stdin", "rb") as f:
        p = subprocess.Popen([str(MULTUS_SHIM)], stdin=f, stdout=subprocess.PIPE, env=environ("ADD", ctr))
    try:
        wait_pending(shim_node.sock)  # its readiness check waits in the backlog
        shim_node.start()
        out, _ = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0
    check_attached(shim_node, ctr, "0.3.1", json.loads(out))
    assert run_shim(environ("DEL", ctr), stdin)[:2] == (0, None)
    check_detached(shim_node, ctr, cache, leases)


# ------------------------------------------------------------------------------ a Multus node's pods


def run_verb(client: str, daemon_socket_dir: Path, env: dict[str, str], stdin: bytes) -> tuple[int, Any]:
    """One CNI verb through the real multus-shim (`binary`) or the wire-level client and multusshim's account of
    what multus-shim prints (`wire`): (exit status, what is printed)."""
    if client == "binary":
        return run_shim(env, stdin)[:2]
    sock = str(daemon_socket_dir / ms.SOCKET_NAME)
    assert ms.exchange(sock, ms.healthz())[0] == 200
    status, body = ms.exchange(sock, ms.cni(env, stdin))
    return ms.outcome(env["CNI_COMMAND"], stdin, status, body)


@pytest.mark.parametrize("client", ["wire", pytest.param("binary", marks=needs_binary)])
def test_a_multus_node_keeps_its_pods_and_definitions(
    api: ApiServer, core: Any, custom: Any, tmp_path: Path, client: str
) -> None:
    """The move the issue names: Multus's shim and conf file kept, its NetworkAttachmentDefinition and the pod's
    annotation as they were, the daemon swapped. Kubelet's CNI_ARGS name the pod; nothing netcomp-specific is
    sent."""
    from kubernetes import watch
    from kubernetes.client.exceptions import ApiException

    name, pod = f"mshim-{client}", f"mshim-{client}"
    with kube_lab(tmp_path, api.node_kubeconfig, networkAttachmentDefinitions=True) as dl:
        conf_doc = {
            "cniVersion": "0.3.1",
            "name": name,
            "type": "bridge",
            "bridge": "ncmsh0",
            "ipam": {"type": "host-local", "subnet": "10.96.0.0/24", "dataDir": f"{dl.base}/ipam"},
        }
        custom.create_namespaced_custom_object(*NAD, "default", NADS, nad("default", name, conf_doc))
        core.create_namespaced_pod("default", pod_asking(pod, f"default/{name}@net1"))
        try:

            def compiled() -> bool:  # `<name>`, or `<namespace>.<name>` where definitions keep their namespace
                return any(n.rsplit(".", 1)[-1] == name for n in dl.daemon.state.networks())

            wait_for(dl, compiled, "the NetworkAttachmentDefinition compiled")
            d = tmp_path / "multus"
            d.mkdir(mode=0o700)
            (d / ms.SOCKET_NAME).symlink_to(dl.sock)
            ctr = dl.lab.container()
            args = f"IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={pod};K8S_POD_INFRA_CONTAINER_ID=ctr-{ctr}"
            stdin = conf("0.3.1", d)

            rc, printed = run_verb(client, d, environ("ADD", ctr, args), stdin)
            assert rc == 0, printed
            assert sorted(dl.lab.links(ctr)) == ["eth0", "lo", "net1"]
            assert dl.lab.addrs(ctr, "net1")[0].startswith("10.96.0.")
            assert printed["cniVersion"] == "0.3.1" and printed["ips"][0]["address"] == dl.lab.addrs(ctr, "eth0")[0]
            got = None
            for event in watch.Watch().stream(
                core.list_namespaced_pod, "default", field_selector=f"metadata.name={pod}", timeout_seconds=60
            ):
                got = (event["object"].metadata.annotations or {}).get(STATUS)
                if got:
                    break
            assert got, "network-status was not written"
            status = json.loads(got)
            assert [(s["interface"], s.get("default", False)) for s in status] == [("eth0", True), ("net1", False)]
            for s in status:
                assert [f"{a}/24" for a in s["ips"]] == dl.lab.addrs(ctr, s["interface"])

            assert run_verb(client, d, environ("DEL", ctr, args), stdin) == (0, None)
            assert dl.lab.links(ctr) == ["lo"] and dl.leases() == [] and dl.cache_files() == []
        finally:
            with contextlib.suppress(ApiException):
                core.delete_namespaced_pod(pod, "default", grace_period_seconds=0)
            with contextlib.suppress(ApiException):
                custom.delete_namespaced_custom_object(*NAD, "default", NADS, name)
