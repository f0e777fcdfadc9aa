"""A CNI request on its way in and out: validated with CNI error codes, a plugin's result converted between CNI
versions, and a delegate's environment scrubbed of the daemon's."""

from __future__ import annotations

import pytest

from netcomp.cni import result
from netcomp.delegate.request import parse_request
from netcomp.errors import DelegateError

RES = {
    "cniVersion": "1.0.0",
    "interfaces": [{"name": "eth0"}],
    "ips": [
        {"address": "10.0.0.2/24", "gateway": "10.0.0.1", "interface": 0},
        {"address": "fd00::2/64", "interface": 0},
    ],
}


def test_result_conversion_between_versions() -> None:
    old = result.convert(RES, "0.4.0")
    assert old["cniVersion"] == "0.4.0" and [ip["version"] for ip in old["ips"]] == ["4", "6"]
    back = result.convert(old, "1.1.0")
    assert back["cniVersion"] == "1.1.0" and all("version" not in ip for ip in back["ips"])
    assert "version" not in RES["ips"][0] and RES["cniVersion"] == "1.0.0"  # the input is not changed
    assert all("version" in ip for ip in old["ips"])  # nor the result it was converted from
    assert result.convert({"cniVersion": "1.0.0", "ips": None}, "0.4.0") == {"cniVersion": "0.4.0", "ips": None}
    with pytest.raises(DelegateError) as ei:
        result.convert(RES, "0.2.0")
    assert ei.value.code == 1
    with pytest.raises(DelegateError):
        result.convert({"ip4": {"ip": "10.0.0.2/24"}}, "1.0.0")


def test_requests_are_validated_with_cni_codes() -> None:
    env = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_NETNS": "/var/run/netns/x", "CNI_IFNAME": "eth0"}
    assert parse_request(env, {"cniVersion": "0.3.1"}).cni_version == "0.3.1"
    for changes, code in (
        ({"CNI_CONTAINERID": "-leading"}, 4),
        ({"CNI_NETNS": ""}, 4),
        ({"CNI_COMMAND": "add"}, 4),
        ({"CNI_IFNAME": ""}, 4),
    ):
        with pytest.raises(DelegateError) as ei:
            parse_request({**env, **changes}, {})
        assert ei.value.code == code, changes
    assert parse_request({**env, "CNI_COMMAND": "DEL", "CNI_NETNS": ""}, {}).netns == ""  # DEL needs no netns
    with pytest.raises(DelegateError) as ei:
        parse_request(env, [])
    assert ei.value.code == 6


def test_delegates_get_a_scrubbed_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing of the daemon's environment reaches a plugin: no NOTIFY_SOCKET (a plugin must never speak for
    the daemon to systemd), no credentials, only CNI_* and a fixed PATH."""
    from netcomp.cni.invoke import ExecResult, Runner, RuntimeConf

    monkeypatch.setenv("NOTIFY_SOCKET", "/run/systemd/notify")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    seen: list[dict[str, str]] = []

    def fake_exec(argv, env, stdin, timeout):  # type: ignore[no-untyped-def]
        """Records what a plugin would get (the real plugins' behaviour is tested in tests/integration)."""
        seen.append(dict(env))
        return ExecResult(0, b'{"cniVersion": "1.0.0"}', b"")

    runner = Runner(["/usr/lib/cni", "/bin"], exec_=fake_exec)
    runner.exec_plugin({"type": "sh"}, "ADD", RuntimeConf("c", "/var/run/netns/x", "eth0", "A=1"))
    assert seen == [
        {
            "CNI_COMMAND": "ADD",
            "CNI_PATH": "/usr/lib/cni:/bin",
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "CNI_CONTAINERID": "c",
            "CNI_NETNS": "/var/run/netns/x",
            "CNI_IFNAME": "eth0",
            "CNI_ARGS": "A=1",
        }
    ]
