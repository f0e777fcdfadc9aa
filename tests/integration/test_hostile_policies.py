"""What a tenant writes that reaches a pod's policy table (netcomp.policy.nft) applied for real in pod
namespaces, with real traffic: an interface name is the pod's annotation's, and nftables reads some names as more
than a name (a trailing `*` a wildcard, a leading `@` a set); the table matches each interface by its name only,
or is refused with a clear error: never one interface's rules over another's traffic, never nft's own words. The
shapes of policies and annotations a tenant can write: tests/unit/test_hostile_policies.py; bounds through the API
server: tests/integration/test_policies.py."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from netcomp.errors import HostError
from netcomp.policy import nft
from netcomp.policy.podrules import Allow, InterfaceRules, PodRules
from tests.lab.netlab import ip, lab
from tests.lab.podtraffic import DROPPED, PASSES, Pod, bridged, connects

pytestmark = pytest.mark.root


@pytest.fixture
def two_networks() -> Iterator[list[Pod]]:
    """Two pods on two bridges: the first's interface is `net1`, the second's `n*` (a name Linux takes)."""
    if not os.access(nft.NFT, os.X_OK):
        pytest.fail(f"{nft.NFT} is missing: run `make setup` (it installs nftables)")
    with lab() as lb:
        ps = [Pod(lb.container(f"-{n}")) for n in "ab"]
        bridged(lb, ps, "net1", 74)
        bridged(lb, ps, "n*", 75)
        yield ps


def test_an_interface_named_with_a_trailing_star_gets_no_other_interfaces_traffic(two_networks: list[Pod]) -> None:
    """Pod a is shut on net1 (deny-all) and open on `n*` (a policy that lets anyone in). nft read `n*` in the
    dispatch rule as every interface from `n`, and the chain `in_n*` jumped to and counted as a prefix too, so it
    refused the table: such a pod could never be attached. Now each is that name only: net1 stays shut."""
    a, b = two_networks
    rules = PodRules((InterfaceRules("n*", "open", (Allow(None),), None, ("team-a/open",)),
                      InterfaceRules("net1", "shut", (), None, ("team-a/shut",))))  # fmt: skip
    nft.apply(a.path, rules)
    assert connects(b, a, a.addrs["n*"][0], 8101, PASSES)
    assert not connects(b, a, a.v4(), 8102, DROPPED)
    assert 'iifname "n\\*" jump in_n*' in ip("netns", "exec", a.ns, nft.NFT, "list", "table", "inet", "netcomp")


def test_a_name_nft_cannot_match_exactly_is_a_clear_error_and_writes_nothing(two_networks: list[Pod]) -> None:
    a, _ = two_networks
    for name in ("@x", "a\\*"):
        with pytest.raises(HostError, match="cannot be matched by nftables exactly"):
            nft.apply(a.path, PodRules((InterfaceRules(name, "n", (), None, ("team-a/p",)),)))
        assert nft.read(a.path) is None
    nft.apply(a.path, PodRules((InterfaceRules("*", "n", (), None), InterfaceRules('a"\\b', "n", (), None))))
    state = nft.read(a.path)
    assert state is not None and {"in_*", 'in_a"\\b'} <= set(state.rules)
