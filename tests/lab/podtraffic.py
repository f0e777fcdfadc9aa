"""Pods on a shared segment, and traffic between them, for the policy tests: pod namespaces joined by a bridge in
the lab's "host" namespace (netlab.py) or by macvlans in bridge mode on the lab's veth, each with an IPv4 and an
IPv6 address per network; a TCP connect and a UDP echo from one pod to another, through sockets opened inside
the pods' namespaces (a socket stays in the namespace it was made in; the test's threads never leave theirs).

A packet a pod's table drops is seen as silence: the connect or the echo runs out of its (short) time. A packet
let through answers at once; its wait is long, so a busy machine cannot fail it."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from ipaddress import ip_address

from netcomp.host.nsenter import inside
from tests.lab.netlab import Lab, ip

PASSES, DROPPED = 10.0, 1.0  # seconds a connect or echo waits when it should pass / when it should be dropped


@dataclass
class Pod:
    ns: str
    addrs: dict[str, tuple[str, str]] = field(default_factory=dict)  # ifname -> (IPv4, IPv6)

    @property
    def path(self) -> str:
        return f"/var/run/netns/{self.ns}"

    def v4(self, ifname: str = "net1") -> str:
        return self.addrs[ifname][0]

    def v6(self, ifname: str = "net1") -> str:
        return self.addrs[ifname][1]


def bridged(lb: Lab, pods: list[Pod], ifname: str, subnet: int) -> None:
    """Each pod joins a bridge of the lab's with interface `ifname`, address 10.<subnet>.0.<n>/24 and
    fd<subnet>::<n>/64 (n from 1)."""
    br = f"br{subnet}"
    ip("link", "add", br, "type", "bridge", netns=lb.host)
    ip("link", "set", br, "up", netns=lb.host)
    for n, pod in enumerate(pods, 1):
        end = f"v{subnet}-{n}"
        ip("link", "add", end, "type", "veth", "peer", "name", ifname, "netns", pod.ns, netns=lb.host)
        ip("link", "set", end, "master", br, "up", netns=lb.host)
        _address(pod, ifname, subnet, n)


def macvlans(lb: Lab, pods: list[Pod], ifname: str, subnet: int) -> None:
    """Each pod gets a macvlan in bridge mode on the lab's veth (up, so its macvlans reach each other)."""
    for n, pod in enumerate(pods, 1):
        link = f"mv{subnet}-{n}"
        ip("link", "add", link, "link", lb.master, "type", "macvlan", "mode", "bridge", netns=lb.host)
        ip("link", "set", link, "netns", pod.ns, netns=lb.host)
        ip("link", "set", link, "name", ifname, netns=pod.ns)
        _address(pod, ifname, subnet, n)


def _address(pod: Pod, ifname: str, subnet: int, n: int) -> None:
    v4, v6 = f"10.{subnet}.0.{n}", f"fd{subnet}::{n}"
    ip("addr", "add", f"{v4}/24", "dev", ifname, netns=pod.ns)
    ip("addr", "add", f"{v6}/64", "dev", ifname, "nodad", netns=pod.ns)  # usable at once; ND still resolves
    for dev in ("lo", ifname):
        ip("link", "set", dev, "up", netns=pod.ns)
    pod.addrs[ifname] = (v4, v6)


def _socket(pod: Pod, addr: str, kind: socket.SocketKind, timeout: float) -> socket.socket:
    family = socket.AF_INET6 if ip_address(addr).version == 6 else socket.AF_INET
    s = inside(pod.path, lambda: socket.socket(family, kind), "open a socket")
    s.settimeout(timeout)
    return s


def connects(src: Pod, dst: Pod, addr: str, port: int, timeout: float) -> bool:
    """Whether a TCP connect from src reaches dst listening on addr:port within timeout seconds (False: no
    answer at all; a refusal would raise, as it means the packet got through)."""
    server = _socket(dst, addr, socket.SOCK_STREAM, timeout)
    client = _socket(src, addr, socket.SOCK_STREAM, timeout)
    try:
        server.bind((addr, port))
        server.listen()
        try:
            client.connect((addr, port))
        except TimeoutError:
            return False
        return True
    finally:
        client.close()
        server.close()


def echo(src: Pod, dst: Pod, addr: str, port: int, timeout: float) -> str:
    """A UDP datagram from src to dst at addr:port, answered from there: "echoed", "request dropped" or
    "reply dropped"."""
    server = _socket(dst, addr, socket.SOCK_DGRAM, timeout)
    client = _socket(src, addr, socket.SOCK_DGRAM, timeout)
    try:
        server.bind((addr, port))
        try:  # a datagram the sender's own table drops fails its send (EPERM)
            client.sendto(b"ping", (addr, port))
            data, peer = server.recvfrom(64)
        except (TimeoutError, PermissionError):
            return "request dropped"
        try:
            server.sendto(data.upper(), peer)
            client.recv(64)
        except (TimeoutError, PermissionError):
            return "reply dropped"
        return "echoed"
    finally:
        client.close()
        server.close()
