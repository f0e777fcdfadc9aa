"""Stopping a process a test started: waited for, killed when it does not end in time."""

from __future__ import annotations

import subprocess


def reap(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """Wait for a process told to stop; kill it if it has not within timeout."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
