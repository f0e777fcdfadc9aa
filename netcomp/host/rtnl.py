"""This module lists a network namespace's links, names and aliases, with one rtnetlink dump over a plain socket,
so that the daemon's check after every compile needs neither pyroute2 nor its NetNS helper process. rtnetlink(7):
each message is a struct nlmsghdr, for RTM_NEWLINK a struct ifinfomsg, then attributes padded to 4 bytes."""

from __future__ import annotations

import errno
import os
import socket
import struct
from collections.abc import Iterator

from netcomp.host import nsenter

NETLINK_ROUTE = 0
RTM_NEWLINK, RTM_GETLINK = 16, 18
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_DUMP, NLM_F_DUMP_INTR = 0x1, 0x300, 0x10
DUMP_TRIES = 3  # a dump the kernel marks interrupted (links changed during it) is taken again
IFLA_IFNAME, IFLA_IFALIAS = 3, 20
NLA_TYPE_MASK = 0x3FFF  # without NLA_F_NESTED and NLA_F_NET_BYTEORDER
_NLMSGHDR = struct.Struct("=IHHII")  # length, type, flags, sequence, port
_IFINFOMSG = struct.Struct("=BxHiII")  # family, (pad), type, index, flags, change
_RTATTR = struct.Struct("=HH")  # length, type
BUFFER = 1 << 20  # a dump part is at most 32 KiB today; room to spare


def _align(n: int) -> int:
    return (n + 3) & ~3


def _attrs(data: memoryview, offset: int, end: int) -> Iterator[tuple[int, memoryview]]:
    while offset + _RTATTR.size <= end:
        length, kind = _RTATTR.unpack_from(data, offset)
        if length < _RTATTR.size or offset + length > end:
            raise OSError(f"rtnetlink: malformed attribute at {offset}")
        yield kind & NLA_TYPE_MASK, data[offset + _RTATTR.size : offset + length]
        offset += _align(length)


def _text(value: memoryview) -> str:
    return bytes(value).split(b"\0", 1)[0].decode("utf-8", "replace")


def _dump_once() -> tuple[list[tuple[str, str | None]], bool]:
    """The links, and whether the kernel said the dump was interrupted (it may miss or repeat a link)."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, NETLINK_ROUTE) as s:
        s.bind((0, 0))
        seq = 1
        body = _IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)
        s.send(_NLMSGHDR.pack(_NLMSGHDR.size + len(body), RTM_GETLINK, NLM_F_REQUEST | NLM_F_DUMP, seq, 0) + body)
        out: list[tuple[str, str | None]] = []
        intr = False
        buf = bytearray(BUFFER)
        while True:
            n = s.recv_into(buf)
            data = memoryview(buf)[:n]
            offset = 0
            while offset + _NLMSGHDR.size <= n:
                length, kind, mflags, mseq, _ = _NLMSGHDR.unpack_from(data, offset)
                if length < _NLMSGHDR.size or offset + length > n:
                    raise OSError("rtnetlink: malformed message")
                if mseq == seq:
                    intr = intr or bool(mflags & NLM_F_DUMP_INTR)
                    if kind == NLMSG_DONE:
                        if length >= _NLMSGHDR.size + 4:
                            (code,) = struct.unpack_from("=i", data, offset + _NLMSGHDR.size)
                            if code < 0:  # the dump failed part way
                                raise OSError(-code, os.strerror(-code))
                        return out, intr
                    if kind == NLMSG_ERROR:
                        (code,) = struct.unpack_from("=i", data, offset + _NLMSGHDR.size)
                        if code:
                            raise OSError(-code, os.strerror(-code))
                    elif kind == RTM_NEWLINK:
                        start = offset + _NLMSGHDR.size + _IFINFOMSG.size
                        found = dict(_attrs(data, start, offset + length))
                        if IFLA_IFNAME in found:
                            alias = found.get(IFLA_IFALIAS)
                            out.append((_text(found[IFLA_IFNAME]), _text(alias) if alias is not None else None))
                offset += _align(length)


def _dump() -> list[tuple[str, str | None]]:
    for _ in range(DUMP_TRIES):
        out, intr = _dump_once()
        if not intr:
            return out
    raise OSError(errno.EINTR, f"rtnetlink: the link dump was interrupted {DUMP_TRIES} times (links changing)")


def links(netns: str | None = None) -> list[tuple[str, str | None]]:
    """(name, alias) of every link in the named network namespace (/var/run/netns/NAME), or the daemon's own.
    OSError (HostError in a named namespace) when netlink answers an error; DelegateError when the name is not a
    network namespace."""
    if netns is None:
        return _dump()
    return nsenter.inside(f"/var/run/netns/{netns}", _dump, "list links")
