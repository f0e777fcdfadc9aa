"""What the tests of hostile input share: netcomp.foreign's counter caught (which kinds were ignored, how many),
adversarial JSON for hypothesis, a nesting of any depth, a cluster pool in blocks of 16."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from hypothesis import strategies as st

from netcomp import foreign
from netcomp.ipam.pool import Pool
from tests.lab import pools


class Ignored:
    """foreign.ignore's counter: the kinds it counted, in order, and how many of each."""

    def __init__(self) -> None:
        self.kinds: list[str] = []
        self.by: dict[str, int] = {}

    def labels(self, *values: str) -> _Count:
        return _Count(self, values[0])


class _Count:
    def __init__(self, owner: Ignored, kind: str) -> None:
        self.owner, self.kind = owner, kind

    def inc(self, amount: float = 1) -> None:
        self.owner.kinds.append(self.kind)
        self.owner.by[self.kind] = self.owner.by.get(self.kind, 0) + int(amount)


@contextlib.contextmanager
def counting() -> Iterator[Ignored]:
    """foreign.ignore counted into an Ignored, with nothing remembered as logged already, until the end."""
    counter = Ignored()
    foreign.count_into(counter)
    foreign._seen.clear()
    try:
        yield counter
    finally:
        foreign.count_into(None)


def nested(depth: int) -> Any:
    out: Any = "x"
    for _ in range(depth):
        out = {"pod": out}
    return out


LEAF = st.one_of(
    st.none(), st.booleans(), st.integers(-(1 << 70), 1 << 70), st.floats(allow_nan=True), st.text(max_size=20)
)
JSON = st.recursive(
    LEAF, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=30,
)  # fmt: skip


def pool(subnet: str = "10.0.0.0/24", block: int = 16) -> Pool:
    return pools.pool({"subnet": subnet}, block=block)
