"""The Kubernetes pieces that need no API server: the pod kubelet names, the network-status entries, a Network
object as an intent file, and the cluster's intent layer (the pod annotations: test_podnets.py). The API server
itself is in tests/integration/test_kube.py."""

from __future__ import annotations

from pathlib import Path

import yaml

from netcomp.pods.naming import PodRef, pod_ref
from netcomp.pods.netstatus import network_status
from netcomp.records.record import Attachment
from netcomp.settings import KubeSettings, Settings

POD = PodRef("default", "p1")


def test_pod_is_named_by_kubelets_cni_args() -> None:
    assert pod_ref("IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web-0;K8S_POD_UID=u") == PodRef("ns", "web-0")
    assert pod_ref("K8S_POD_NAME=web-0") is None and pod_ref("") is None


def test_network_status_entries() -> None:
    r040 = {
        "cniVersion": "0.4.0",
        "interfaces": [{"name": "veth1", "mac": "aa:aa:aa:aa:aa:01"}, {"name": "eth0", "mac": "02:00:00:00:00:01",
                       "sandbox": "/var/run/netns/x"}],
        "ips": [{"version": "4", "address": "10.1.0.5/24", "interface": 1}, {"address": "10.9.0.1/24", "interface": 0}],
        "dns": {"nameservers": ["10.1.0.1"]},
    }  # fmt: skip
    r100 = {"cniVersion": "1.0.0", "ips": [{"address": "fd00::5/64"}]}
    r100["routes"] = [{"dst": "::/0", "gw": "fd00::1"}, {"dst": "fd01::/64"}]
    nad = {"netcomp": {"namespace": "team-a"}}
    atts = [Attachment("mgmt", "eth0", {}, r040), Attachment("team-a.storage", "stor0", nad, r100)]
    assert network_status(atts, "eth0") == [
        {
            "name": "mgmt",
            "interface": "eth0",
            "ips": ["10.1.0.5"],
            "mac": "02:00:00:00:00:01",
            "default": True,
            "dns": {"nameservers": ["10.1.0.1"]},
        },
        {"name": "team-a/storage", "interface": "stor0", "ips": ["fd00::5"], "gateway": ["fd00::1"]},
    ]


def test_a_network_object_as_an_intent_file() -> None:
    from netcomp.cluster.intents import NETWORKS

    obj = {
        "apiVersion": "netcomp.io/v1",
        "kind": "Network",
        "metadata": {"name": "fabric", "generation": 3, "resourceVersion": "991", "labels": {"a": "b"}},
        "spec": {"type": "macvlan", "hostDevice": "eth1"},
        "status": {"x": 1},
    }
    text = NETWORKS.render(obj).decode()
    assert text.splitlines()[0] == "# The cluster's Network 'fabric' (networks.netcomp.io, generation 3),"
    assert yaml.safe_load(text) == {
        "apiVersion": "netcomp.io/v1",
        "kind": "Network",
        "metadata": {"name": "fabric"},
        "spec": {"type": "macvlan", "hostDevice": "eth1"},
    }
    # A label or status change (a new resourceVersion) does not change the file, so nothing recompiles.
    relabelled = {**obj, "metadata": {**obj["metadata"], "resourceVersion": "992", "labels": {}}}
    assert NETWORKS.render(relabelled) == NETWORKS.render(obj)


def test_the_cluster_is_the_lowest_intent_layer() -> None:
    s = Settings(intentDirs=["/a", "/b"], clusterIntentDir="/c")
    assert s.intent_layers() == ["/a", "/b"]
    assert s.model_copy(update={"kubernetes": KubeSettings()}).intent_layers() == ["/c", "/a", "/b"]
    assert s.model_copy(update={"kubernetes": KubeSettings(networks=False)}).intent_layers() == ["/a", "/b"]


def test_object_files_of_the_two_kinds_never_meet() -> None:
    from netcomp.cluster.intents import NADS, NETWORKS

    assert NETWORKS.file_name({"name": "storage"}) == "storage.yaml"
    assert NETWORKS.file_name({"name": "a.b"}) is None  # not a network name; could look like a NAD's file
    assert NADS.file_name({"name": "macvlan-conf", "namespace": "team-a"}) == "team-a.macvlan-conf.nad.yaml"
    assert NADS.file_name({"name": "x"}) is None and NADS.file_name({"name": "../x", "namespace": "n"}) is None
    assert NETWORKS.owns("storage.yaml") and not NETWORKS.owns("team-a.m.nad.yaml")
    assert NADS.owns("team-a.m.nad.yaml") and not NADS.owns("storage.yaml") and not NADS.owns("x.nad.yml")


def test_an_event_on_a_broken_object_names_its_own_kind() -> None:
    """A FailedCompile event's involvedObject is the object's own kind, so that `kubectl describe` of it shows
    the event: a NetworkAttachmentDefinition is not a Network."""
    from netcomp.cluster.intents import ALL_KINDS

    kinds = {k.plural: k.kind for k in ALL_KINDS}
    assert kinds["networks"] == "Network"
    assert kinds["network-attachment-definitions"] == "NetworkAttachmentDefinition"
    assert kinds["danmnets"] == "DanmNet" and kinds["tenantnetworks"] == "TenantNetwork"


def test_an_attachment_definition_as_an_intent_file() -> None:
    from netcomp.cluster.intents import NADS

    obj = {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {
            "name": "sriov-a",
            "namespace": "team-a",
            "annotations": {"k8s.v1.cni.cncf.io/resourceName": "intel.com/vf", "other": "x"},
        },
        "spec": {"config": '{"cniVersion": "0.3.1", "type": "sriov"}'},
    }
    text = NADS.render(obj).decode()
    assert text.startswith("# The cluster's NetworkAttachmentDefinition team-a/sriov-a (network-attachment-")
    assert yaml.safe_load(text)["metadata"] == {
        "name": "sriov-a",
        "namespace": "team-a",
        "annotations": {"k8s.v1.cni.cncf.io/resourceName": "intel.com/vf"},  # kept so the compiler can warn
    }


def test_an_api_call_refused_by_the_units_ip_firewall_says_what_to_do() -> None:
    from netcomp.kube.apierrors import one_line

    e = PermissionError(1, "Operation not permitted")
    assert one_line(e).endswith("allow the API server with IPAddressAllow= in a drop-in, see docs/kubernetes.md)")
    assert one_line(ConnectionRefusedError(111, "Connection refused")) == (
        "ConnectionRefusedError: [Errno 111] Connection refused"
    )
    # The client's words for a connect() the firewall refused, which the daemon and `netcomp doctor` both say.
    from netcomp.kube.apierrors import Unreachable, words

    said = one_line(Unreachable(words(PermissionError(1, "Operation not permitted"), "https://192.0.2.10:6443", 5)))
    assert said == (
        "connecting to the API server at https://192.0.2.10:6443 is not permitted: the netcomp unit denies IP "
        "traffic (allow the API server with IPAddressAllow= in a drop-in, see docs/kubernetes.md)"
    )


def test_an_object_read_back_from_the_cluster_validates_as_it_is(tmp_path: Path) -> None:
    """`kubectl get networks.netcomp.io NAME -o yaml` adds what the API server keeps; netcomp validate takes it."""
    import io

    from netcomp.cli.main import main

    exported = """apiVersion: netcomp.io/v1
kind: Network
metadata:
  creationTimestamp: "2026-11-22T12:00:00Z"
  generation: 2
  labels: {team: storage}
  managedFields:
  - apiVersion: netcomp.io/v1
    fieldsType: FieldsV1
    manager: kubectl-client-side-apply
    operation: Update
  name: storage
  resourceVersion: "4711"
  uid: 6b1c5b0e-5a7e-4b8e-9a43-2f6f1b9f0c11
spec:
  type: macvlan
  hostDevice: eth1
"""
    (tmp_path / "storage.yaml").write_text(exported)
    out, err = io.StringIO(), io.StringIO()
    assert main(["validate", str(tmp_path / "storage.yaml")], out, err) == 0, err.getvalue()
    (tmp_path / "storage.yaml").write_text(exported.replace("  uid:", "  uuid:"))
    assert main(["validate", str(tmp_path / "storage.yaml")], out, err) == 65
    assert "storage.yaml:14:3: error: metadata: unknown key 'uuid' (did you mean 'uid'?)" in err.getvalue()
