"""The operator's tools without root or a cluster: `netcomp doctor` and `netcomp explain` against a real daemon in
process (minidaemon.py: one static network whose plugin is a stand-in), and the checks' rules one by one (the
runtime's conf dir, the verbs of the packaged ClusterRole, a plugin's CNI versions, the devices a network names).
tests/integration/test_doctor.py and test_explain.py run both with real plugins, namespaces and an API server."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

from netcomp.compiler.render import host_devices
from netcomp.daemon.server import protocol
from netcomp.daemon.server.client import call
from netcomp.doctor import apiserver, local, node
from netcomp.settings import KubeSettings, Settings
from tests.lab.checkout import ROOT
from tests.lab.command import run
from tests.lab.kubeapi import write_kubeconfig
from tests.lab.minidaemon import mini_daemon

# ------------------------------------------------------------------------------------------------ doctor


def test_doctor_against_a_daemon(tmp_path: Path, sockdir: Path) -> None:
    """One line per check; a plugin that does not answer VERSION (the stand-in exits 1) fails it, exit 1."""
    with mini_daemon(tmp_path, sockdir) as d:
        code, out, err = run("doctor", "-c", str(d.config), "-o", "json")
    assert err == ""
    doc = json.loads(out)
    checks = {c["name"]: c for c in doc["checks"]}
    assert code == 1 and doc["ok"] is False
    assert list(checks) == ["config", "daemon", "networks", "kernel:bridge", "plugin:bridge", "runtime", "apiserver"]
    assert checks["daemon"]["status"] == "ok" and checks["daemon"]["found"].startswith(f"ready on {d.sock}, ")
    assert checks["networks"]["found"] == f"1 compiled in {tmp_path / 'out'}: lab"
    assert checks["kernel:bridge"]["status"] == ("ok" if os.geteuid() == 0 else "warn")
    plugin = checks["plugin:bridge"]
    assert plugin["status"] == "fail" and plugin["found"].startswith(
        f"{tmp_path / 'cni-bin' / 'bridge'} does not answer VERSION"
    )
    assert checks["runtime"]["status"] == "skip" and checks["apiserver"]["status"] == "skip"


def test_doctor_text_and_a_broken_netcomp_yaml(tmp_path: Path, sockdir: Path) -> None:
    """With netcomp.yaml broken the daemon runs on its last good settings: doctor checks those, and says where
    netcomp.yaml is broken."""
    with mini_daemon(tmp_path, sockdir) as d:
        good = d.config.read_text()
        d.config.write_text(good[:-1] + ', "bogus": 1}')
        code, out, _ = run("doctor", "-c", str(d.config), "--state", str(tmp_path / "state.json"))
    lines = out.splitlines()
    assert code == 1
    assert (
        lines[0].startswith(f"FAIL  config         broken: {d.config}:1:") and "checking with its last good" in lines[0]
    )
    assert lines[1].startswith("ok    daemon         ready on ")  # the socket of the last good settings
    assert lines[-1].startswith("7 checks: 2 failed (config, plugin:bridge)")


def _conf(d: Path, name: str, body: Any = None) -> None:
    d.mkdir(exist_ok=True)
    (d / name).write_text(json.dumps(body or {"cniVersion": "1.0.0", "name": name, "plugins": [{"type": "x"}]}))


def test_the_runtime_picks_the_first_file_by_name(tmp_path: Path) -> None:
    from netcomp.daemon.wiring import runtime_config

    conf = tmp_path / "net.d"
    s = Settings(runtimeConfDir=str(conf), writeRuntimeConfig=True, socket="/run/x.sock")
    assert local.runtime(s).found == f"no {conf / '00-netcomp.conflist'}"
    conf.mkdir()
    (conf / "00-netcomp.conflist").write_bytes(runtime_config(s))
    (conf / "99-other.conf").write_text("{}")
    (conf / "000.txt").write_text("{}")  # not a config libcni loads
    (conf / "0.d").mkdir()  # a dir is never one
    assert local.runtime(s).status == "ok"
    _conf(conf, "00-cilium.conflist")
    got = local.runtime(s)
    assert got.status == "fail" and got.found.startswith(f"the runtime picks {conf / '00-cilium.conflist'}, not ")
    (conf / "00-cilium.conflist").unlink()
    other = s.model_copy(update={"socket": "/run/other.sock"})
    assert local.runtime(other).status == "warn"  # first, but not what these settings write
    off = s.model_copy(update={"writeRuntimeConfig": False})
    assert (
        local.runtime(off).found
        == f"netcomp writes no entry (writeRuntimeConfig: false); the runtime picks {conf / '00-netcomp.conflist'}"
    )


def test_the_verbs_these_settings_need_of_the_packaged_cluster_role() -> None:
    rules = apiserver.cluster_role(ROOT / "packaging" / "kubernetes" / "rbac.yaml")
    plain = set(apiserver.needed(rules, KubeSettings()))
    assert ("", "pods", "patch") in plain and ("", "events", "create") in plain
    assert ("netcomp.io", "networks", "watch") in plain
    assert not any(r == "network-attachment-definitions" or g.startswith("danm") for g, r, _ in plain)
    assert ("k8s.cni.cncf.io", "multi-networkpolicies", "watch") in plain and ("", "namespaces", "list") in plain
    off = set(apiserver.needed(rules, KubeSettings(policies=False)))
    assert not any(r in ("multi-networkpolicies", "namespaces") for _, r, _ in off)
    more = set(apiserver.needed(rules, KubeSettings(networks=False, networkAttachmentDefinitions=True, danm=True)))
    assert ("k8s.cni.cncf.io", "network-attachment-definitions", "list") in more
    assert ("danm.k8s.io", "danmnets", "watch") in more and not any(g == "danm.io" for g, _, _ in more)
    assert not any(r == "networks" for _, r, _ in more)
    assert ("discovery.k8s.io", "endpointslices", "create") in plain
    quiet = set(apiserver.needed(rules, KubeSettings(services=False)))
    assert not any(r in ("services", "endpointslices") for _, r, _ in quiet)
    # Every rule of the manifest is one some setting needs: a rule nothing needs would never be checked.
    every = apiserver.needed(rules, KubeSettings(networkAttachmentDefinitions=True, danm=True))
    every += apiserver.needed(rules, KubeSettings(danm=True, danmGroup="danm.io"))
    assert {(g, r) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]} == {
        (g, r) for g, r, _ in every
    }


def test_doctors_api_checks_use_the_daemons_client_without_the_kubernetes_library(tmp_path: Path) -> None:
    """Doctor with a cluster whose API server is down, in a fresh interpreter: the apiserver line is the daemon's
    words for a refused connection (kube/apierrors.py), and the `kubernetes` library is not imported for a
    kubeconfig with a token. Nothing listens on the port (it is bound and never listened on), so the kernel
    refuses the connection; the real API server's faults are tests/integration/test_doctor.py's."""
    import subprocess
    import sys

    import yaml

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        url = f"https://127.0.0.1:{taken.getsockname()[1]}"
        kubeconfig = write_kubeconfig(
            tmp_path / "kubeconfig", {"token": "t"}, {"server": url, "insecure-skip-tls-verify": True}
        )
        conf = tmp_path / "netcomp.yaml"
        dirs = {k: str(tmp_path / k) for k in ("outputDir", "cacheDir", "runtimeConfDir")}
        kube = {"kubeconfig": str(kubeconfig), "timeout": 1}
        conf.write_text(yaml.safe_dump({"socket": str(tmp_path / "sock"), "kubernetes": kube, **dirs}))
        code = f"""
import io, json, sys
from netcomp.cli.main import main
out = io.StringIO()
main(["doctor", "-c", {str(conf)!r}, "-o", "json"], out, sys.stderr)
checks = {{c["name"]: c for c in json.loads(out.getvalue())["checks"]}}
print(json.dumps([checks["apiserver"], sorted(m for m in sys.modules if m.split(".")[0] == "kubernetes")]))
"""
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    check, library = json.loads(p.stdout)
    assert library == [], p.stderr
    assert check["status"] == "fail"
    assert check["found"] == (
        f"the API server at {url} refused the connection: is it running, and is the kubeconfig's address right?"
    )
    assert check["fix"] == f"check the server address in {kubeconfig} and that this node reaches it"


def _answering(path: Path, versions: list[str]) -> None:
    """A plugin stand-in that answers VERSION as the reference plugins do."""
    answer = json.dumps({"cniVersion": "1.0.0", "supportedVersions": versions})
    path.write_text(f"#!/bin/sh\ncat >/dev/null\necho '{answer}'\n")
    path.chmod(0o755)


def test_a_plugin_speaks_the_cni_version_of_each_network_that_runs_it(tmp_path: Path) -> None:
    _answering(tmp_path / "macvlan", ["0.3.1", "0.4.0", "1.0.0"])
    s = Settings(pluginDirs=[str(tmp_path)])

    def net(name: str, version: str) -> node.NodeNetwork:
        return node.NodeNetwork(name, {"cniVersion": version, "name": name, "plugins": [{"type": "macvlan"}]})

    ok = node.plugins([net("a", "1.0.0"), net("b", "0.4.0")], s)
    assert [(c.name, c.status) for c in ok] == [("plugin:macvlan", "ok")]
    assert ok[0].found == f"{tmp_path / 'macvlan'}, speaks CNI 0.3.1 to 1.0.0 (networks a, b)"
    bad = node.plugins([net("a", "1.0.0"), net("new", "1.1.0")], s)[0]
    assert bad.status == "fail"
    assert bad.found == f"{tmp_path / 'macvlan'} speaks CNI 0.3.1, 0.4.0, 1.0.0, not 1.1.0 (the cniVersion of new)"
    gone = node.plugins([net("a", "1.0.0")], Settings(pluginDirs=[str(tmp_path / "none")]))[0]
    assert gone.status == "fail" and gone.found.startswith("not found (or not executable) in ")


def test_what_a_network_needs_of_the_kernel_and_the_devices_it_names() -> None:
    link = {"kind": "vlan", "name": "eth1.120", "link": "eth1", "id": 120}
    tagged = {"plugins": [{"type": "macvlan", "master": "eth1.120"}], "netcomp": {"hostLink": link}}
    assert host_devices(tagged) == {"eth1"}  # the VLAN link is netcomp's to make
    assert node.NodeNetwork("t", tagged).kernel() == {"macvlan", "8021q"}
    moved = {"plugins": [{"type": "host-device", "device": "ens5f1"}, {"type": "tuning"}]}
    assert host_devices(moved) == {"ens5f1"} and node.NodeNetwork("m", moved).kernel() == set()
    bridged = {"plugins": [{"type": "bridge", "bridge": "br0"}, {"type": "ipvlan", "master": "bond0"}]}
    assert host_devices(bridged) == {"bond0"} and node.NodeNetwork("b", bridged).kernel() == {"bridge", "ipvlan"}


def test_doctor_and_explain_have_man_style_help() -> None:
    for command, sections in (("doctor", ("checks", "exit status:", "examples:")), ("explain", ("exit status:",))):
        code, out, _ = run(command, "--help")
        assert code == 0 and all(s in out for s in sections), out


# ------------------------------------------------------------------------------------------------ explain


def test_explain_a_runtimes_request_and_what_it_cannot(tmp_path: Path, sockdir: Path) -> None:
    with mini_daemon(tmp_path, sockdir) as d:
        code, out, _ = run("explain", "-c", str(d.config), "--cni-args", "IgnoreUnknown=1", "-o", "json")
        assert code == 0
        doc = json.loads(out)
        assert [(n["interface"], n["network"], n["why"]) for n in doc["networks"]] == [
            ("eth0", "lab", "the node's defaultNetwork (lab, netcomp.yaml)")
        ]
        assert doc["networks"][0]["addresses"]["from"] == "no IPAM: no address (layer 2 only)"
        code, out, _ = run("explain", "-c", str(d.config), "--cni-args", "NETCOMP_NETWORKS=nosuch")
        assert code == 1 and "REFUSED (CNI error 7): network 'nosuch' is not compiled on this node" in out
        code, out, _ = run("explain", "-c", str(d.config), "--container", "nosuch", "-o", "json")
        assert code == 1 and json.loads(out)["refusal"]["msg"].startswith("container nosuch has no record")
        code, out, _ = run("explain", "-c", str(d.config), "--pod", "default/web")
        assert code == 0 and out.splitlines()[0] == "pod default/web: not attached on this node"
        code, _, err = run("explain", "-c", str(d.config), "--pod", "web")
        assert code == 64 and "NAMESPACE/NAME" in err
        for body, msg in (
            (b"[", "request is not JSON"),
            ({}, "give exactly one of pod, container and cniArgs"),
            ({"pod": "web"}, "pod must be namespace/name, not 'web'"),
            ({"container": "a b"}, "invalid container id 'a b'"),
        ):
            status, answer = _post(d.sock, protocol.EXPLAIN_PATH, body)
            assert status == 400 and answer["msg"].startswith(msg), (body, answer)
        assert call(d.sock, "GET", protocol.EXPLAIN_PATH)[0] == 405
        # What the ADD would refuse of a runtime's request is a refusal, in the ADD's words (code 4).
        status, answer = call(d.sock, "POST", protocol.EXPLAIN_PATH, {"cniArgs": "", "ifname": "x" * 16})
        assert status == 200 and answer["refusal"]["code"] == 4
        assert answer["refusal"]["msg"] == f"invalid interface name {'x' * 16!r}"


def _post(sock: str, path: str, body: Any) -> tuple[int, Any]:
    """POST a body as it is (bytes), or as JSON."""
    if not isinstance(body, bytes):
        return call(sock, "POST", path, body)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(sock)
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, answer = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(answer)


# ------------------------------------------------------------------------------------------------ SR-IOV, devices


VF = (
    "apiVersion: netcomp.io/v1\nkind: Network\nmetadata: {{name: {name}}}\nspec: {{type: sriov, resourceName: {res}}}\n"
)


def test_sriov_resources_and_the_devices_explain_hands_out(tmp_path: Path, sockdir: Path) -> None:
    """A device plugin's resource: doctor wants the kubelet's PodResources socket and the resource registered;
    explain hands the pod the device the kubelet's checkpoint says it holds (no PodResources answers here: the
    ADD's fallback), or refuses in the ADD's words. A pool of sriovPools: its VFs in sysfs."""
    from tests.lab.deviceplugin import make_sysfs

    checkpoint = tmp_path / "kubelet_internal_checkpoint"
    entries = [
        {"PodUID": "u1", "ContainerName": "c", "ResourceName": "intel.com/vf", "DeviceIDs": {"0": ["0000:3b:02.1"]}}
    ]
    checkpoint.write_text(
        json.dumps({"Data": {"PodDeviceEntries": entries, "RegisteredDevices": {"intel.com/vf": []}}})
    )
    sysfs = tmp_path / "sys"
    make_sysfs(sysfs, "ens1f0", "0000:3b:00.0", {0: ("0000:3b:02.0", "iavf"), 1: ("0000:3b:02.2", "vfio-pci")}, {})
    kubelet = {"podResourcesSocket": str(sockdir / "pr.sock"), "checkpoint": str(checkpoint)}
    pools = {"own.io/vf": {"pfNames": ["ens1f0"], "drivers": ["iavf"]}, "none.io/vf": {"pfNames": ["ens9"]}}
    with mini_daemon(tmp_path, sockdir, kubelet=kubelet, sriovPools=pools, sysfsRoot=str(sysfs)) as d:
        for name, res in (("vf", "intel.com/vf"), ("own", "own.io/vf"), ("none", "none.io/vf"), ("gone", "gone.io/x")):
            (tmp_path / "networks.d" / f"20-{name}.yaml").write_text(VF.format(name=name, res=res))
        d.daemon.reload()
        _, out, _ = run("doctor", "-c", str(d.config), "-o", "json")
        checks = {c["name"]: c for c in json.loads(out)["checks"]}
        assert checks["sriov:own.io/vf"]["found"] == "sriovPools: 1 VFs on ens1f0 (networks own)"
        assert checks["sriov:none.io/vf"]["found"] == "sriovPools: no VFs on ens9 (networks none)"
        assert checks["sriov:intel.com/vf"]["found"].startswith("a device plugin's resource, and the kubelet's ")
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(str(sockdir / "pr.sock"))  # the kubelet's socket is there (it is not asked)
            _, out, _ = run("doctor", "-c", str(d.config), "-o", "json")
        checks = {c["name"]: c for c in json.loads(out)["checks"]}
        assert checks["sriov:intel.com/vf"]["status"] == "ok"
        gone = checks["sriov:gone.io/x"]
        assert gone["status"] == "fail" and gone["found"].startswith("no device plugin registered gone.io/x")
        args = "K8S_POD_NAMESPACE=a;K8S_POD_NAME=p;K8S_POD_UID=u1;NETCOMP_NETWORKS=vf"
        code, out, _ = run("explain", "-c", str(d.config), "--cni-args", args, "-o", "json")
        doc = json.loads(out)
        assert code == 0 and doc["pod"] == "a/p", doc
        assert doc["networks"][1]["device"] == {"resource": "intel.com/vf", "id": "0000:3b:02.1"}
        code, out, _ = run("explain", "-c", str(d.config), "--cni-args", args.replace("u1", "u2"), "-o", "json")
        refusal = json.loads(out)["refusal"]
        assert code == 1 and refusal["code"] == 11
        assert refusal["msg"].startswith("pod a/p: cannot learn the devices the kubelet gave it: ")


def test_doctor_names_a_degraded_daemons_errors_at_their_positions(tmp_path: Path, sockdir: Path) -> None:
    with mini_daemon(tmp_path, sockdir) as d:
        broken = tmp_path / "networks.d" / "30-bad.yaml"
        broken.write_text("apiVersion: netcomp.io/v1\nkind: Network\nmetadata: {name: bad}\nspec: {type: macvlan}\n")
        d.daemon.reload()
        code, out, _ = run("doctor", "-c", str(d.config))
    line = next(x for x in out.splitlines() if " daemon " in x)
    assert code == 1
    assert line.startswith("FAIL  daemon         DEGRADED, generation 2, 1 networks, 1 errors: ")
    assert f"{broken}:4:1: spec: missing required key 'hostDevice'; fix: fix the intents at those positions" in line


def test_doctor_checks_nft_only_on_a_node_that_follows_a_cluster(tmp_path: Path) -> None:
    assert node.nftables(Settings()) == []
    on_cluster = Settings(kubernetes=KubeSettings())
    (found,) = node.nftables(on_cluster, path=str(tmp_path / "nft"))
    assert found.status == "fail" and found.found.startswith(f"nft not found at {tmp_path / 'nft'}: install")
    assert "apt-get install nftables" in found.fix
    fake = tmp_path / "nft"
    fake.write_text("#!/bin/sh\necho 'nftables v9.9.9 (Test)'\n")
    fake.chmod(0o755)
    (found,) = node.nftables(on_cluster, path=str(fake))
    assert (found.status, found.found) == ("ok", f"nftables v9.9.9 (Test) at {fake}")
    fake.write_text("#!/bin/sh\necho 'Error: broken' >&2\nexit 1\n")
    (found,) = node.nftables(on_cluster, path=str(fake))
    assert found.status == "fail" and found.found.startswith(f"{fake} --version: Error: broken")
