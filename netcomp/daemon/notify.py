"""The systemd notify protocol (sd_notify(3)) through sdnotify, a no-op without NOTIFY_SOCKET. NOTIFY_SOCKET is
removed from the environment once connected, so no child process (a delegate plugin) can speak for the daemon;
the watchdog is fed from the serving loop (Daemon._tick) once READY=1 is sent."""

from __future__ import annotations

import os
import time

import sdnotify


class Notifier:
    def __init__(self) -> None:
        self._n = sdnotify.SystemdNotifier() if os.environ.get("NOTIFY_SOCKET") else None
        os.environ.pop("NOTIFY_SOCKET", None)
        usec, pid = os.environ.pop("WATCHDOG_USEC", ""), os.environ.pop("WATCHDOG_PID", "")
        self.watchdog_sec = int(usec) / 1e6 if usec.isdigit() and pid in ("", str(os.getpid())) else 0.0
        self._last_ping = 0.0
        self._status = ""
        self._ready = False  # the watchdog is fed once READY=1 was sent

    def send(self, *lines: str, wait: float = 1.0) -> bool:
        """Send the lines as one message. A full queue (systemd slow to read it) is waited on for at most `wait`
        seconds, then the message is dropped: the serving loop sends STATUS and WATCHDOG with no wait at all, and
        must never block on PID 1 (a later tick sends them again)."""
        sock = self._n.socket if self._n is not None else None
        if sock is None:
            return False
        try:
            sock.settimeout(wait if wait > 0 else 0.0)
            sock.send("\n".join(lines).encode())
        except OSError:  # a full queue past its wait (TimeoutError, BlockingIOError), or systemd gone: dropped
            return False
        return True

    def ready(self, status: str) -> None:
        self._status = status
        self.send("READY=1", f"STATUS={status}")
        self._ready = True

    def status(self, line: str) -> None:
        if line != self._status and self.send(f"STATUS={line}", wait=0):
            self._status = line  # a dropped one is sent again with the next

    def reloading(self) -> None:
        # systemd >= 253 (Type=notify-reload) wants MONOTONIC_USEC with RELOADING=1; older ones ignore it.
        self.send("RELOADING=1", f"MONOTONIC_USEC={time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000}")

    def stopping(self) -> None:
        self.send("STOPPING=1", "STATUS=stopping: draining requests in flight")

    def tick(self) -> None:
        """Feed the watchdog at half its interval (call from the serving loop)."""
        if not self.watchdog_sec or not self._ready:
            return
        now = time.monotonic()
        if now - self._last_ping >= self.watchdog_sec / 2:
            self._last_ping = now
            self.send("WATCHDOG=1", wait=0)
