"""Which networks a request asks for (NETCOMP_NETWORKS in CNI_ARGS, the runtime's netcomp.io/networks) and the
interface names they get: explicit, then a network's prefix, then net<N>; the kernel's rules; no name twice."""

from __future__ import annotations

import pytest

from netcomp.errors import DelegateError
from netcomp.pods import naming


def test_naming_explicit_then_prefix_then_net() -> None:
    wants = [
        naming.Want("storage"),
        naming.Want("backup"),
        naming.Want("x"),
        naming.Want("y", "data9"),
        naming.Want("z"),
    ]
    prefixes = {"storage": "stor", "backup": "stor", "x": None, "z": None}
    got = naming.name_interfaces("mgmt", "eth0", wants, prefixes)
    assert got == [
        ("mgmt", "eth0"),
        ("storage", "stor0"),
        ("backup", "stor1"),
        ("x", "net0"),
        ("y", "data9"),
        ("z", "net1"),
    ]


def test_generated_names_step_around_explicit_ones() -> None:
    wants = [naming.Want("a", "net0"), naming.Want("b"), naming.Want("c", "stor0"), naming.Want("d")]
    got = naming.name_interfaces(None, "eth0", wants, {"d": "stor"})
    assert got == [("a", "net0"), ("b", "net1"), ("c", "stor0"), ("d", "stor1")]


@pytest.mark.parametrize("bad", ["", ".", "..", "a/b", "a:b", "a b", "x" * 16, "tab\t"])
def test_interface_names_follow_the_rules(bad: str) -> None:
    with pytest.raises(DelegateError) as ei:
        naming.check_ifname(bad)
    assert ei.value.code == 4


def test_duplicate_interface_names_are_refused() -> None:
    with pytest.raises(DelegateError, match="asked for twice"):
        naming.name_interfaces("mgmt", "eth0", [naming.Want("a", "eth0")], {})


def test_cni_args_key_is_taken_out_for_delegates() -> None:
    wants, rest = naming.split_cni_args("IgnoreUnknown=1;NETCOMP_NETWORKS=a,b@x1;K8S_POD_NAME=p")
    assert wants == [naming.Want("a"), naming.Want("b", "x1")]
    assert rest == "IgnoreUnknown=1;K8S_POD_NAME=p"
    assert naming.from_runtime_args({"args": {"cni": {"netcomp.io/networks": ["c", "d@y"]}}}) == [
        naming.Want("c"),
        naming.Want("d", "y"),
    ]
    assert naming.from_runtime_args({"args": {"netcomp.io/networks": "e"}}) == [naming.Want("e")]
    with pytest.raises(DelegateError, match="invalid network name"):
        naming.parse_list("../etc")
