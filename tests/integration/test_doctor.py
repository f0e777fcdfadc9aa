"""`netcomp doctor` on a node: the daemon as a process in a lab's "host" netns (procdaemon.py), following a real
kube-apiserver (kubeapi.py) with the packaged ClusterRole's rights, its plugins the real ones (symlinked into a dir
of the test's, so that one can go missing), and doctor run in that netns as an operator runs it on a node. A
healthy node passes every check (exit 0); each fault an operator meets is the right failing line and exit 1: a
plugin gone, a kernel feature this kernel lacks (ipvlan, 8021q), a cniVersion the plugins do not speak, an RBAC verb
taken away on the API server, the API server down, a token it refuses, a CA that did not sign its certificate,
another file before netcomp's in the runtime's conf dir."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.lab.checkout import NETCOMP
from tests.lab.intents import intent
from tests.lab.kubeapi import NODE_TOKEN, ApiServer, distrust, free_port
from tests.lab.netlab import IP, PLUGIN_DIR, Lab
from tests.lab.poll import until
from tests.lab.procdaemon import ProcNode, kube_proc_node

pytestmark = pytest.mark.root
NODE = "node-d"
# The lab's networks this node serves: mgmt (bridge), storage and backup (macvlan), tunnel (macvlan over a VXLAN).
NOT_SERVED = ("40-broken.yaml", "50-signal.yaml", "70-tagged.yaml")


@pytest.fixture(scope="module")
def doctor_node(api: ApiServer, admin: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcNode]:
    """node-d (its Node object made), the daemon as a process following the cluster, its plugins the real ones
    symlinked into a dir of its own."""
    from kubernetes import client

    client.CoreV1Api(admin).create_node({"metadata": {"name": NODE}})
    base = tmp_path_factory.mktemp("doctor")

    def setup(base: Path, lb: Lab) -> None:
        for name in NOT_SERVED:
            (base / "networks.d" / name).unlink()
        plugins = base / "cni-bin"
        plugins.mkdir()
        for p in Path(PLUGIN_DIR).iterdir():
            (plugins / p.name).symlink_to(p)

    extra = {"pluginDirs": [str(base / "cni-bin")], "writeRuntimeConfig": True}
    with kube_proc_node(api, base, NODE, extra=extra, setup=setup) as node:
        yield node


def doctor(node: ProcNode, config: Path | None = None) -> tuple[int, dict[str, dict[str, str]], str]:
    """`netcomp doctor -o json` in the node's netns, as on a node, with the node's netcomp.yaml or `config`;
    (exit status, checks by name, the text form)."""
    argv = [IP, "netns", "exec", node.lab.host, NETCOMP, "doctor", "--config", str(config or node.config)]
    argv += ["--state", str(node.base / "state.json")]
    p = subprocess.run([*argv, "-o", "json"], capture_output=True, text=True, timeout=120, check=False)
    assert p.stderr == "", p.stderr
    doc = json.loads(p.stdout)
    assert doc["ok"] == (p.returncode == 0)
    text = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert text.returncode == p.returncode
    return p.returncode, {c["name"]: c for c in doc["checks"]}, text.stdout


def failing(checks: dict[str, dict[str, str]]) -> list[str]:
    return [name for name, c in checks.items() if c["status"] == "fail"]


def test_a_healthy_node_passes(doctor_node: ProcNode) -> None:
    rc, checks, text = doctor(doctor_node)
    assert rc == 0, text
    assert failing(checks) == []
    assert list(checks) == [
        "config",
        "daemon",
        "networks",
        "kernel:bridge",
        "kernel:macvlan",
        "kernel:vxlan",
        "device:ncm0",
        "hostlink:vx4242",
        "plugin:bridge",
        "plugin:host-local",
        "plugin:macvlan",
        "nftables",
        "runtime",
        "apiserver",
        "rbac",
        "node",
    ]
    assert all(c["status"] == "ok" for c in checks.values()), text
    assert checks["networks"]["found"].startswith("4 compiled in ")
    assert checks["kernel:macvlan"]["found"] == "the kernel makes macvlan links (networks backup, storage, tunnel)"
    assert checks["hostlink:vx4242"]["found"].startswith("not there yet: the first ADD makes it (vxlan over ncm0")
    assert "speaks CNI 0.1.0 to 1.0.0" in checks["plugin:macvlan"]["found"]
    assert checks["node"]["found"] == f"Node {NODE!r} exists"
    assert checks["nftables"]["found"].startswith("nftables v") and checks["nftables"]["found"].endswith("/nft")
    assert text.splitlines()[-1] == "16 checks: all passed"


def test_a_missing_plugin(doctor_node: ProcNode) -> None:
    link = doctor_node.base / "cni-bin" / "macvlan"
    link.unlink()
    try:
        rc, checks, text = doctor(doctor_node)
    finally:
        link.symlink_to(Path(PLUGIN_DIR) / "macvlan")
    assert rc == 1, text
    assert failing(checks) == ["plugin:macvlan"]
    c = checks["plugin:macvlan"]
    assert (
        c["found"]
        == f"not found (or not executable) in {doctor_node.base / 'cni-bin'} (networks backup, storage, tunnel run it)"
    )
    assert "containernetworking-plugins" in c["fix"]
    assert "FAIL  plugin:macvlan" in text and text.splitlines()[-1] == "16 checks: 1 failed (plugin:macvlan)"


@contextlib.contextmanager
def serving(node: ProcNode, **files: str) -> Iterator[None]:
    """More networks (intent files) served while the block runs: the daemon reloaded (SIGHUP, READY=1 after)."""
    paths = [node.base / "networks.d" / name for name in files]
    for path, text in zip(paths, files.values(), strict=True):
        path.write_text(text)
    node.reload()
    try:
        yield
    finally:
        for path in paths:
            path.unlink()
        node.reload()


def test_kernel_features_this_kernel_lacks(doctor_node: ProcNode) -> None:
    """ipvlan and 8021q (a VLAN master): this kernel makes neither, which the plugins find only at the first ADD."""
    ipam = f"ipam: {{type: host-local, dataDir: {doctor_node.base}/ipam, subnet: 10.9"
    signal = intent("signal", f"{{type: ipvlan, hostDevice: ncm0, mode: l2, {ipam}5.0.0/24}}}}")
    tagged = intent("tagged", f"{{type: macvlan, hostDevice: ncm0, vlan: 120, {ipam}7.0.0/24}}}}")
    with serving(doctor_node, **{"80-signal.yaml": signal, "81-tagged.yaml": tagged}):
        rc, checks, text = doctor(doctor_node)
    assert rc == 1, text
    assert failing(checks) == ["kernel:8021q", "kernel:ipvlan"]
    ipvlan = checks["kernel:ipvlan"]
    assert ipvlan["found"] == "the kernel cannot make ipvlan links: Operation not supported (networks signal need them)"
    assert ipvlan["fix"] == "load the module (`modprobe ipvlan`) or run a kernel built with CONFIG_IPVLAN"
    assert checks["kernel:8021q"]["found"].endswith("(networks tagged need them)")
    assert checks["hostlink:ncm0.120"]["status"] == "ok"  # it is the kernel that cannot make it
    # Nothing was left in the node's netns by the test of the kernel.
    out = subprocess.run(
        [IP, "-n", doctor_node.lab.host, "-o", "link"], capture_output=True, text=True, check=True
    ).stdout
    assert sorted(line.split(":")[1].strip().split("@")[0] for line in out.splitlines()) == ["lo", "ncm0", "ncm0p"]


def test_a_cni_version_the_plugins_do_not_speak(doctor_node: ProcNode) -> None:
    modern = {
        "cniVersion": "1.1.0",
        "name": "modern",
        "plugins": [{"type": "bridge", "bridge": "ncmod0", "ipam": {"type": "host-local", "subnet": "10.96.0.0/24"}}],
    }
    static = doctor_node.base / "static.d" / "modern.conflist"
    static.write_text(json.dumps(modern))
    try:
        with serving(doctor_node, **{"85-modern.yaml": intent("modern", "{type: static, networkID: modern}")}):
            rc, checks, text = doctor(doctor_node)
    finally:
        static.unlink()
    assert rc == 1, text
    assert failing(checks) == ["plugin:bridge", "plugin:host-local"]
    bridge = checks["plugin:bridge"]
    assert bridge["found"] == (
        f"{doctor_node.base / 'cni-bin' / 'bridge'} speaks CNI 0.1.0, 0.2.0, 0.3.0, 0.3.1, 0.4.0, 1.0.0, not 1.1.0 "
        "(the cniVersion of modern)"
    )


def test_an_rbac_verb_taken_away_on_the_api_server(doctor_node: ProcNode, admin: Any) -> None:
    from kubernetes import client

    rbac = client.RbacAuthorizationV1Api(admin)
    raw = rbac.read_cluster_role("netcomp-node", _preload_content=False)
    before = json.loads(raw.data)["rules"]
    less = [
        {**r, "verbs": [v for v in r["verbs"] if v != "patch"]} if r["resources"] == ["pods"] else r for r in before
    ]
    rbac.patch_cluster_role("netcomp-node", {"rules": less})
    try:
        _until_allowed(admin, "patch", "pods", False)
        rc, checks, text = doctor(doctor_node)
    finally:
        rbac.patch_cluster_role("netcomp-node", {"rules": before})
        _until_allowed(admin, "patch", "pods", True)
    assert rc == 1, text
    assert failing(checks) == ["rbac"]
    found = checks["rbac"]["found"]
    assert found.startswith(f"not granted to the identity in {doctor_node.base / 'lab.kubeconfig'}: patch pods (1 of ")
    assert "rbac.yaml" in checks["rbac"]["fix"]


def _until_allowed(admin: Any, verb: str, resource: str, allowed: bool) -> None:
    """Until the API server's authorizer (fed by its own watch of the roles) says so for the daemon's user: a
    SubjectAccessReview, asked with a deadline (an external process catching up)."""
    from kubernetes import client

    auth = client.AuthorizationV1Api(admin)
    body = {"spec": {"user": "netcomp-node", "resourceAttributes": {"verb": verb, "resource": resource}}}
    until(
        lambda: auth.create_subject_access_review(body).status.allowed == allowed,
        f"the API server did not take the role's change ({verb} {resource})",
        30,
        0.05,
    )


@pytest.mark.parametrize("fault", ["down", "token", "untrusted"])
def test_api_server_faults_said_as_the_daemon_says_them(
    doctor_node: ProcNode, api: ApiServer, tmp_path: Path, fault: str
) -> None:
    """Nothing listening at the kubeconfig's address (connection refused), a token the server does not know (401),
    a CA that did not sign the server's certificate: the apiserver line says it in the daemon's words (its CNI
    errors say the same, test_kube.py), with the fix for that fault; the checks that need the server are skipped."""
    lab = yaml.safe_load((doctor_node.base / "lab.kubeconfig").read_text())
    url = lab["clusters"][0]["cluster"]["server"]
    if fault == "down":
        url = f"https://127.0.0.1:{free_port()}"  # free here; in the node's netns only the forwarder listens
    cfg = api.kubeconfig(tmp_path / "k.kubeconfig", "no-such-token" if fault == "token" else NODE_TOKEN, server=url)
    if fault == "untrusted":
        distrust(cfg, tmp_path)
    conf = tmp_path / "netcomp.yaml"
    conf.write_text(yaml.safe_dump({**doctor_node.settings, "kubernetes": {"kubeconfig": str(cfg), "timeout": 10}}))
    rc, checks, text = doctor(doctor_node, conf)
    assert rc == 1, text
    assert failing(checks) == ["apiserver"]
    skipped = [(checks[name]["status"], checks[name]["found"]) for name in ("rbac", "node")]
    assert skipped == [("skip", "the API server does not answer")] * 2
    found, fix = checks["apiserver"]["found"], checks["apiserver"]["fix"]
    if fault == "down":
        assert found == (
            f"the API server at {url} refused the connection: is it running, and is the kubeconfig's address right?"
        )
        assert fix == f"check the server address in {cfg} and that this node reaches it"
    elif fault == "token":
        assert found == (
            f"{url} answers GET /version with 401 Unauthorized: the API server does not accept the credentials of "
            f"kubeconfig {cfg}"
        )
        assert fix == f"give {cfg} a token or client certificate the API server accepts"
    else:
        assert found.startswith(f"TLS: the certificate of the API server at {url} is not trusted (")
        assert found.endswith("): check the kubeconfig's certificate-authority(-data)")
        assert fix.startswith(f"give {cfg} the CA that signed the API server's certificate")
    line = next(line for line in text.splitlines() if line.startswith("FAIL  apiserver "))
    assert line.split(None, 2)[2] == f"{found}; fix: {fix}"


def test_another_file_before_netcomps_in_the_runtimes_conf_dir(doctor_node: ProcNode) -> None:
    other = doctor_node.base / "net.d" / "00-another.conflist"
    other.write_text(json.dumps({"cniVersion": "1.0.0", "name": "another", "plugins": [{"type": "bridge"}]}))
    try:
        rc, checks, text = doctor(doctor_node)
    finally:
        other.unlink()
    assert rc == 1, text
    assert failing(checks) == ["runtime"]
    assert checks["runtime"]["found"] == (
        f"the runtime picks {other}, not {doctor_node.base / 'net.d' / '00-netcomp.conflist'}: 00-another.conflist "
        "sorts first (containerd and CRI-O take the first file by name)"
    )
    assert checks["runtime"]["fix"].startswith("remove 00-another.conflist from ")


def test_a_daemon_that_does_not_answer(doctor_node: ProcNode) -> None:
    """Doctor runs without the daemon: its line says so; the checks that need no daemon still run."""
    doctor_node.stop()
    try:
        rc, checks, text = doctor(doctor_node)
    finally:
        doctor_node.start()
    assert rc == 1, text
    assert failing(checks) == ["daemon"]
    # The socket stays (systemd's socket unit holds it, here the test): a connection waits for a daemon.
    assert checks["daemon"]["found"] == f"no answer on {doctor_node.sock} within 10 s (starting, or hung)"
    assert checks["plugin:macvlan"]["status"] == "ok"


@pytest.mark.parametrize("body", ['{"Data": []}', '{"Data": "x"}', '{"Data": ' + "[" * 40 + "]" * 40 + "}"])
def test_a_checkpoint_that_is_not_the_kubelets(doctor_node: ProcNode, tmp_path: Path, body: str) -> None:
    """A network of a device plugin's resource, and the kubelet's checkpoint not its JSON: the resource's line
    fails saying what is wrong with it (exit 1, as for any failing check), and every other check is shown."""
    res = "netcomp.io/dpvf"
    (doctor_node.base / "static.d" / "dp.conflist").write_text(
        json.dumps({"cniVersion": "1.0.0", "name": "dp", "plugins": [{"type": "host-device"}]})
    )
    ckpt, sock = tmp_path / "kubelet_internal_checkpoint", tmp_path / "pod-resources.sock"
    ckpt.write_text(body)
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(sock))  # a socket is there: the line is about the checkpoint
    conf = tmp_path / "netcomp.yaml"
    kubelet = {"podResourcesSocket": str(sock), "checkpoint": str(ckpt), "timeout": 2}
    conf.write_text(yaml.safe_dump({**doctor_node.settings, "kubelet": kubelet}))
    try:
        spec = f"{{type: static, networkID: dp, resourceName: {res}}}"
        with serving(doctor_node, **{"86-dp.yaml": intent("dp", spec)}):
            rc, checks, text = doctor(doctor_node, conf)
    finally:
        (doctor_node.base / "static.d" / "dp.conflist").unlink()
    assert rc == 1, text
    assert failing(checks) == [f"sriov:{res}"], text
    found = checks[f"sriov:{res}"]["found"]
    assert found.startswith(f"a device plugin's resource, and the kubelet checkpoint {ckpt} is not the kubelet's: ")
    assert found.endswith("(networks dp)") and "restart the device plugins" in checks[f"sriov:{res}"]["fix"]
    assert checks["runtime"]["status"] == "ok" and checks["node"]["status"] == "ok"
