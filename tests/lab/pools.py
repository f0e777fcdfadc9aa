"""Cluster pools of netcomp's IPAM (ipam: {type: cluster}) in the unit tests: a pool as the compiled conflist's
netcomp block gives it, and a store that fails the test that asks it anything."""

from __future__ import annotations

from typing import Any

from netcomp.ipam.pool import Pool


def pool(*ranges: dict[str, object], network: str = "n", block: int | None = None) -> Pool:
    """The pool of `network` over `ranges` (one range set), in blocks of `block` addresses (the default: by the
    pool's size)."""
    doc: dict[str, Any] = {"type": "cluster", "ranges": [list(ranges)]}
    if block is not None:
        doc["blockSize"] = block
    p = Pool.of(network, {"netcomp": {"pool": doc}})
    assert p is not None
    return p


class NoStore:
    """The allocator's store where nothing under test asks it (an address from a block held, the record): any
    call fails the test."""

    kind = "none"

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the store was asked: {name}")
