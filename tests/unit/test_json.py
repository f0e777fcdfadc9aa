"""cni.spec.loads, the JSON reader of every request, plugin result and cache entry: whatever it reads is what the
stdlib reads (orjson is only faster), exactly, integers of any size included; what is not JSON is a ValueError."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netcomp.cni.spec import loads

values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()  # unbounded: orjson would read those over 64 bits as floats
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(values)
def test_reads_what_the_stdlib_reads(value: Any) -> None:
    text = json.dumps(value)
    assert loads(text.encode()) == json.loads(text)
    assert loads(text) == json.loads(text)
    assert repr(loads(text.encode())) == repr(json.loads(text))  # the same types: 10**30 stays an int


@pytest.mark.parametrize(
    "data",
    [b"{nope", b"", b"\xff\xfe", b"[" * 5000 + b"]" * 5000, b"[" * 5000 + b"1" * 25 + b"]" * 5000, b"[NaN"],
)
def test_what_is_not_json_is_a_value_error(data: bytes) -> None:
    with pytest.raises(ValueError):
        loads(data)
