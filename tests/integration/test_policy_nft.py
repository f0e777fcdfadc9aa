"""A pod's policy table (netcomp.policy.nft) applied for real in pod namespaces on a shared segment (a bridge, and
macvlans in bridge mode), with real traffic: a TCP connect or a UDP echo passes or is dropped as the rules say,
replies pass by conntrack, IPv6 neighbour discovery keeps working under isolation, a table is replaced whole and
removed, the node's own ruleset is never touched, and a missing or refusing nft is a clear error."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from ipaddress import ip_network
from pathlib import Path
from typing import Any

import pytest

from netcomp.errors import HostError
from netcomp.policy import nft
from netcomp.policy.podrules import Allow, InterfaceRules, PodRules, Ports
from tests.lab.netlab import ip, lab
from tests.lab.podtraffic import DROPPED, PASSES, Pod, bridged, connects, echo, macvlans
from tests.lab.poll import until


def host_ruleset() -> str:
    return subprocess.run([nft.NFT, "list", "ruleset"], capture_output=True, text=True, timeout=30, check=True).stdout


@pytest.fixture
def on_a_bridge() -> Iterator[list[Pod]]:
    """Three pods on one bridge (net1: 10.71.0.n, fd71::n) and a second one (net2: 10.72.0.n, fd72::n); the
    node's ruleset is the same after the test as before."""
    if not os.access(nft.NFT, os.X_OK):
        pytest.fail(f"{nft.NFT} is missing: run `make setup` (it installs nftables)")
    before = host_ruleset()
    with lab() as lb:
        ps = [Pod(lb.container(f"-{n}")) for n in "abc"]
        bridged(lb, ps, "net1", 71)
        bridged(lb, ps, "net2", 72)
        yield ps
    assert host_ruleset() == before


def one(ifname: str = "net1", ingress: Any = None, egress: Any = None) -> PodRules:
    return PodRules((InterfaceRules(ifname, "storage", ingress, egress, ("team-a/p",)),))


def nets(*texts: str) -> tuple[Any, ...]:
    return tuple(ip_network(t) for t in texts)


def listed(pod: Pod) -> dict[str, Any]:
    out = ip("netns", "exec", pod.ns, nft.NFT, "-j", "list", "table", "inet", "netcomp")
    return json.loads(out)  # type: ignore[no-any-return]


def test_deny_all_ingress_drops_connects_in_and_lets_the_pods_own_connections_and_their_replies_through(
    on_a_bridge: list[Pod],
) -> None:
    a, b, _ = on_a_bridge
    assert connects(b, a, a.v4(), 8001, PASSES)  # open before
    nft.apply(a.path, one(ingress=()))
    assert not connects(b, a, a.v4(), 8002, DROPPED)
    assert echo(b, a, a.v4(), 8003, DROPPED) == "request dropped"
    # a's own connection out: the SYN-ACK coming back is a reply (conntrack), the echo's answer too
    assert connects(a, b, b.v4(), 8004, PASSES)
    assert echo(a, b, b.v4(), 8005, PASSES) == "echoed"
    state = nft.read(a.path)
    assert state is not None and state.dropped["in_net1"] >= 2
    assert "in_net1" in state.rules and "out_net1" not in state.rules


def test_the_table_is_in_the_pods_namespace_only(on_a_bridge: list[Pod]) -> None:
    a, b, _ = on_a_bridge
    nft.apply(a.path, one(ingress=()))
    assert [c["chain"]["name"] for c in listed(a)["nftables"] if "chain" in c] == ["input", "in_net1"]
    assert nft.read(b.path) is None
    assert "netcomp" not in host_ruleset()  # the fixture also compares the whole ruleset after


def test_allowed_from_one_peer_not_another_and_from_a_prefix(on_a_bridge: list[Pod]) -> None:
    a, b, c = on_a_bridge
    nft.apply(a.path, one(ingress=(Allow(nets(f"{b.v4()}/32")),)))
    assert connects(b, a, a.v4(), 8010, PASSES)
    assert not connects(c, a, a.v4(), 8011, DROPPED)
    # an ipBlock-like prefix that holds c's address (10.71.0.3) and not b's (10.71.0.2)
    nft.apply(a.path, one(ingress=(Allow(nets("10.71.0.3/32", "10.71.0.0/31")),)))
    assert connects(c, a, a.v4(), 8012, PASSES)
    assert not connects(b, a, a.v4(), 8013, DROPPED)


def test_a_port_and_a_port_range_for_tcp_and_udp(on_a_bridge: list[Pod]) -> None:
    a, b, _ = on_a_bridge
    ports = (Ports("tcp", 8020, 8020), Ports("tcp", 9000, 9010), Ports("udp", 5353, 5353), Ports("udp", 6000, 6005))
    sctp = Ports("sctp", 38412, 38412)  # this kernel has no SCTP sockets: its rule is checked as text only
    nft.apply(a.path, one(ingress=(Allow(None, (*ports, sctp)),)))
    assert "sctp dport 38412 accept" in ip("netns", "exec", a.ns, nft.NFT, "list", "table", "inet", "netcomp")
    assert connects(b, a, a.v4(), 8020, PASSES)
    assert connects(b, a, a.v4(), 9010, PASSES)
    assert not connects(b, a, a.v4(), 9011, DROPPED)
    assert echo(b, a, a.v4(), 5353, PASSES) == "echoed"
    assert echo(b, a, a.v4(), 6003, PASSES) == "echoed"
    assert echo(b, a, a.v4(), 8020, DROPPED) == "request dropped"  # a TCP port, not UDP
    assert echo(b, a, a.v4(), 6006, DROPPED) == "request dropped"


def test_egress_isolated_with_one_destination_allowed(on_a_bridge: list[Pod]) -> None:
    a, b, c = on_a_bridge
    nft.apply(a.path, one(egress=(Allow(nets(f"{b.v4()}/32"), (Ports("tcp", 8030, 8031),)),)))
    assert connects(a, b, b.v4(), 8030, PASSES)
    assert not connects(a, c, c.v4(), 8030, DROPPED)
    assert not connects(a, b, b.v4(), 8032, DROPPED)
    assert connects(b, a, a.v4(), 8033, PASSES)  # ingress is open: the answers go out as replies
    state = nft.read(a.path)
    assert state is not None and set(state.dropped) == {"out_net1"}
    assert state.dropped["out_net1"] >= 2  # a SYN each (more if one was sent again before the connect gave up)


def test_ipv6_and_dual_stack_with_neighbour_discovery_under_isolation(on_a_bridge: list[Pod]) -> None:
    a, b, c = on_a_bridge
    # Both directions isolated on both ends: the neighbour solicitations and adverts that resolve each other's
    # addresses (none is known yet) pass, and so does what the Allows let through.
    for pod, peer in ((a, b), (b, a)):
        allow = Allow(nets(f"{peer.v4()}/32", f"{peer.v6()}/128"))
        nft.apply(pod.path, one(ingress=(allow,), egress=(allow,)))
    assert connects(b, a, a.v6(), 8040, PASSES)
    assert connects(b, a, a.v4(), 8041, PASSES)
    assert echo(a, b, b.v6(), 8042, PASSES) == "echoed"
    assert not connects(c, a, a.v6(), 8043, DROPPED)
    assert "lladdr" in ip("-6", "neigh", "show", "dev", "net1", netns=a.ns)


def test_duplicate_address_detection_works_under_isolation(on_a_bridge: list[Pod]) -> None:
    a, b, _ = on_a_bridge
    nft.apply(a.path, one(ingress=(), egress=()))
    ip("addr", "add", "fd71::77/64", "dev", "net1", "nodad", netns=b.ns)
    ip("addr", "add", "fd71::77/64", "dev", "net1", netns=a.ns)  # a's solicitation out, b's advert in
    until(lambda: "dadfailed" in ip("-6", "addr", "show", "dev", "net1", netns=a.ns), "DAD never saw b's advert")


def test_an_interface_not_isolated_stays_open_while_another_is(on_a_bridge: list[Pod]) -> None:
    a, b, _ = on_a_bridge
    nft.apply(a.path, one("net1", ingress=()))
    assert not connects(b, a, a.v4("net1"), 8050, DROPPED)
    assert connects(b, a, a.v4("net2"), 8051, PASSES)
    assert echo(b, a, a.v6("net2"), 8052, PASSES) == "echoed"


def test_rules_are_replaced_whole_and_removed(on_a_bridge: list[Pod]) -> None:
    a, b, c = on_a_bridge
    nft.apply(a.path, one(ingress=(Allow(nets(f"{b.v4()}/32", "fd71::/64")),), egress=()))
    nft.apply(a.path, one(ingress=(Allow(nets(f"{c.v4()}/32")),)))
    state = nft.read(a.path)
    assert state is not None
    assert state.elements == {"in_net1_0_ip": 1}  # the first rules' IPv6 set and egress chain are gone
    assert set(state.rules) == {"input", "in_net1"}
    assert connects(c, a, a.v4(), 8060, PASSES)
    assert not connects(b, a, a.v4(), 8061, DROPPED)
    nft.apply(a.path, PodRules())
    assert nft.read(a.path) is None
    assert connects(b, a, a.v4(), 8062, PASSES)
    nft.remove(a.path)  # none there: still fine
    assert nft.read(a.path) is None


def test_macvlans_in_bridge_mode() -> None:
    with lab() as lb:
        a, b, c = ps = [Pod(lb.container(f"-{n}")) for n in "abc"]
        macvlans(lb, ps, "net1", 73)
        nft.apply(a.path, one(ingress=(Allow(nets(f"{b.v4()}/32", f"{b.v6()}/128"), (Ports("tcp", 80, 80),)),)))
        assert connects(b, a, a.v4(), 80, PASSES)
        assert connects(b, a, a.v6(), 80, PASSES)
        assert not connects(c, a, a.v4(), 80, DROPPED)
        assert not connects(b, a, a.v6(), 81, DROPPED)
        assert connects(a, c, c.v6(), 82, PASSES)  # a's own, and the replies


def test_nft_missing_is_a_clear_error(on_a_bridge: list[Pod]) -> None:
    with pytest.raises(HostError, match="nft not found at /nonexistent/nft: install the nftables package"):
        nft.apply(on_a_bridge[0].path, one(ingress=()), nft="/nonexistent/nft")


def test_nft_refusing_says_what_nft_said_and_leaves_the_table_as_it_was(on_a_bridge: list[Pod]) -> None:
    a, b, _ = on_a_bridge
    nft.apply(a.path, one(ingress=()))
    said = "Error: String exceeds maximum length of 16"  # an interface name longer than IFNAMSIZ
    with pytest.raises(HostError, match=rf"nft refused the policy table of /var/run/netns/.*: {said}"):
        nft.apply(a.path, one("an-interface-name-too-long-for-linux", ingress=None, egress=()))
    assert not connects(b, a, a.v4(), 8070, DROPPED)  # the rules before are in force, whole
    state = nft.read(a.path)
    assert state is not None and set(state.rules) == {"input", "in_net1"}


def test_a_refusing_nft_runs_in_the_pods_namespace_and_its_stderr_is_bounded(
    on_a_bridge: list[Pod], tmp_path: Path
) -> None:
    fake = tmp_path / "nft"
    seen = tmp_path / "netns"
    fake.write_text(
        f"#!/bin/sh\nreadlink /proc/self/ns/net > {seen}\ncat >/dev/null\n"
        "for i in 1 2 3 4 5 6 7 8; do echo \"Error: line $i $(printf '%0500d' 0)\" >&2; done\nexit 1\n"
    )
    fake.chmod(0o755)
    with pytest.raises(HostError) as e:
        nft.apply(on_a_bridge[0].path, one(ingress=()), nft=str(fake))
    assert seen.read_text().strip() == f"net:[{os.stat(on_a_bridge[0].path).st_ino}]"
    msg = str(e.value)
    assert "Error: line 1" in msg and "Error: line 4" in msg and "line 5" not in msg and len(msg) < 1500


def test_an_nft_that_hangs_is_killed_after_the_timeout(on_a_bridge: list[Pod], tmp_path: Path) -> None:
    fake = tmp_path / "nft"
    fake.write_text("#!/bin/sh\nexec sleep 60\n")
    fake.chmod(0o755)
    with pytest.raises(HostError, match=r"cannot write the policy table of .*: timed out after 0.5s"):
        nft.apply(on_a_bridge[0].path, one(ingress=()), nft=str(fake), timeout=0.5)
