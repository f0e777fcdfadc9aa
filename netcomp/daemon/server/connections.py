"""What the loop (loop.py) and the server (server.py) share, so that neither imports the other for it: a
connection as the loop holds it (Conn), the limits every connection and request is held to (Limits, from
netcomp.yaml), and what the loop asks of its router (Router)."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from typing import Protocol

from netcomp.daemon.server import http1

READING, QUEUED, LINGER, WRITING = "reading", "queued", "linger", "writing"


@dataclass
class Limits:
    allowed_uids: set[int] = field(default_factory=lambda: {0})
    max_in_flight: int = 64
    max_queued: int = 1024
    queue_timeout: float = 30.0
    max_connections: int = 1024
    max_per_peer: int = 64
    header_timeout: float = 5.0
    max_body: int = 1024 * 1024


@dataclass(eq=False, slots=True)
class Conn:
    """A connection while the loop has it: being read, waiting in the server's queue, lingering, or having the
    rest of an answer written as its client reads."""

    sock: socket.socket
    pid: int
    uid: int = -1
    req: http1.Incoming = field(default_factory=http1.Incoming)
    state: str = READING
    deadline: float = 0.0
    left: int = 0  # bytes a lingering connection may still send
    mine: bool = True  # the loop's; False once closed or a worker has it (the worker answers and closes)
    registered: bool = False  # with the selector
    out: memoryview | None = None  # what is left to write (WRITING)


class Router(Protocol):
    """What the loop asks of the one that serves what it reads (the Server), from the loop's thread."""

    def route(self, c: Conn) -> None:
        """A complete request: answered now (Loop.answer_now), held in the router's queue (its connection watched
        and timed by the loop), or released to a worker (Loop.release), which answers and closes it."""

    def after_round(self) -> None:
        """After each round of the loop: what is held started while there is room."""

    def dropped(self, c: Conn) -> None:
        """A held request's connection left the queue: its client hung up, or it waited queueTimeout."""

    def drop_held(self) -> list[Conn]:
        """Every held request, out of the queue: the loop closes them as it stops."""
