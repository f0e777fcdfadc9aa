"""What netcomp answers a runtime that follows the CNI spec and libcni to the letter, without a daemon: the verbs a
config's version lacks refused as libcni's skel refuses them, the runtime's network kept in the record for GC, and
the runtime's entry declaring the capabilities whose runtimeConfig it hands on."""

from __future__ import annotations

import json

import pytest

from netcomp.cni.codes import E_INCOMPATIBLE
from netcomp.cni.invoke import Runner, RuntimeConf
from netcomp.daemon.wiring import runtime_config
from netcomp.delegate.check_gc_status import valid_attachments
from netcomp.delegate.request import parse_request
from netcomp.errors import DelegateError
from netcomp.records.record import Record
from netcomp.settings import Settings

ENV = {"CNI_CONTAINERID": "c1", "CNI_IFNAME": "eth0", "CNI_NETNS": "/var/run/netns/x"}


@pytest.mark.parametrize(
    ("verb", "version", "allowed"),
    [
        ("CHECK", "0.3.0", False),
        ("CHECK", "0.3.1", False),
        ("CHECK", "0.4.0", True),
        ("STATUS", "1.0.0", False),
        ("STATUS", "1.1.0", True),
        ("GC", "0.4.0", False),
        ("GC", "1.1.0", True),
        ("ADD", "0.3.0", True),
        ("DEL", "0.3.0", True),
    ],
)
def test_a_verb_newer_than_the_config_is_code_1(verb: str, version: str, allowed: bool) -> None:
    env, conf = {**ENV, "CNI_COMMAND": verb}, {"cniVersion": version, "name": "netcomp"}
    if allowed:
        assert parse_request(env, conf).command == verb
        return
    with pytest.raises(DelegateError) as e:
        parse_request(env, conf)
    assert e.value.code == E_INCOMPATIBLE and e.value.msg == f"config version {version} does not allow {verb}"


def test_the_record_keeps_the_runtime_network() -> None:
    req = parse_request({**ENV, "CNI_COMMAND": "ADD"}, {"cniVersion": "1.0.0", "name": "podnet"})
    assert req.network == "podnet"
    assert parse_request({**ENV, "CNI_COMMAND": "ADD"}, {"cniVersion": "1.0.0", "name": 7}).network == ""
    entry = Record("c1", "/var/run/netns/x", "eth0", "1.0.0", runtime_network="podnet")
    assert Record.from_json(entry.to_json()).runtime_network == "podnet"
    assert Record.from_json(Record("c1", "", "eth0", "1.0.0").to_json()).runtime_network == ""


def test_the_runtime_entry_declares_the_capabilities_it_hands_on() -> None:
    """libcni puts runtimeConfig in a plugin's config only for the capabilities the plugin declares: without
    them, a pod's hostPort, bandwidth, ips or mac from containerd, CRI-O or podman would never reach the
    delegates that declare them."""
    conf = json.loads(runtime_config(Settings(socket="/run/x.sock")))
    caps = conf["plugins"][0]["capabilities"]
    for key in ("portMappings", "bandwidth", "ips", "mac", "ipRanges", "dns", "infinibandGUID", "deviceID"):
        assert caps[key] is True, key


def test_runtime_config_reaches_only_the_plugins_declaring_it() -> None:
    """As libcni's injectRuntimeConfig: a plugin gets `runtimeConfig` with the keys it declares true, and no
    `runtimeConfig` at all when it declares none the runtime gave."""
    conflist = {"cniVersion": "1.0.0", "name": "n", "plugins": []}
    rt = RuntimeConf(
        "c1", "/x", "eth0", capability_args={"mac": "02:00:00:00:00:01", "portMappings": [{"hostPort": 80}]}
    )
    bridge = Runner.plugin_config(conflist, {"type": "bridge"}, None, rt)
    tuning = Runner.plugin_config(
        conflist, {"type": "tuning", "capabilities": {"mac": True, "bandwidth": True}}, None, rt
    )
    off = Runner.plugin_config(conflist, {"type": "portmap", "capabilities": {"portMappings": False}}, None, rt)
    assert "runtimeConfig" not in bridge and "runtimeConfig" not in off
    assert tuning["runtimeConfig"] == {"mac": "02:00:00:00:00:01"}


def test_gc_reads_the_list_under_either_name() -> None:
    """`cni.dev/valid-attachments`, or `cni.dev/attachments` as CNI 1.1.0's text first named it (libcni sends
    both, the same list); the first when both are there."""
    one, two = [{"containerID": "c1", "ifname": "eth0"}], [{"containerID": "c2", "ifname": "eth0"}]
    env = {"CNI_COMMAND": "GC"}
    for conf, want in (
        ({"cni.dev/attachments": one}, {("c1", "eth0")}),
        ({"cni.dev/valid-attachments": two, "cni.dev/attachments": one}, {("c2", "eth0")}),
    ):
        assert valid_attachments(parse_request(env, {"cniVersion": "1.1.0", **conf})) == want
    with pytest.raises(DelegateError) as e:
        valid_attachments(parse_request(env, {"cniVersion": "1.1.0", "cni.dev/valid-attachments": None}))
    assert e.value.code == 7
