"""The YAML loader: positions, rejections, and the property that nothing but IntentError escapes it."""

from __future__ import annotations

import string

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from netcomp.errors import IntentError
from netcomp.intent.parse import parse_document
from netcomp.intent.source import load_documents


def test_positions_for_keys_and_values() -> None:
    docs = load_documents("f.yaml", b"a: 1\nb:\n  c: [x, y]\n---\nd: e\n")
    assert [d.index for d in docs] == [0, 1]
    d0 = docs[0]
    assert d0.keys[("b", "c")] == (3, 3)
    assert d0.values[("b", "c", 1)] == (3, 10)
    assert d0.pos(("b", "missing")) == (2, 1)  # a missing key points at its parent's key
    assert docs[1].values[("d",)] == (5, 4)


def test_empty_documents_are_skipped() -> None:
    assert load_documents("f.yaml", b"---\n---\n# only a comment\n") == []


def test_yaml_11_booleans_and_ints_are_typed() -> None:
    (doc,) = load_documents("f.yaml", b"a: 0x10\nb: true\nc: '5'\n")
    assert doc.data == {"a": 16, "b": True, "c": "5"}


def test_alias_bomb_is_rejected_fast() -> None:
    bomb = "a: &a [" + ",".join(["x"] * 10) + "]\n"
    for i, name in enumerate("bcdefghij"):
        prev = "abcdefghij"[i]
        bomb += f"{name}: &{name} [" + ",".join([f"*{prev}"] * 10) + "]\n"
    try:
        load_documents("bomb.yaml", bomb.encode())
    except IntentError as e:
        assert "aliases are not allowed" in e.diagnostics[0].message
    else:
        raise AssertionError("alias bomb accepted")


def test_all_errors_of_a_file_are_reported() -> None:
    text = b"- a\n---\nscalar\n---\nok: 1\n"
    try:
        load_documents("f.yaml", text)
    except IntentError as e:
        assert [d.location.line for d in e.diagnostics if d.location] == [1, 3]
    else:
        raise AssertionError("accepted")


yaml_text = st.text(alphabet=string.printable + "\u00e9\u2603", max_size=200)
json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


def _only_intent_errors(raw: bytes) -> None:
    try:
        docs = load_documents("fuzz.yaml", raw)
    except IntentError as e:
        assert e.diagnostics and all(d.location is not None for d in e.diagnostics)
        return
    for doc in docs:
        parse_document(doc)  # returns diagnostics; must not raise


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(yaml_text)
def test_arbitrary_text_raises_only_intent_error(text: str) -> None:
    _only_intent_errors(text.encode())


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_raise_only_intent_error(raw: bytes) -> None:
    _only_intent_errors(raw)


@settings(max_examples=300, deadline=None)
@given(json_like)
def test_arbitrary_yaml_structures_raise_only_intent_error(data: object) -> None:
    _only_intent_errors(yaml.safe_dump({"apiVersion": "netcomp.io/v1", "kind": "Network", "spec": data}).encode())
    _only_intent_errors(yaml.safe_dump(data).encode())
    for kind in ("DanmNet", "TenantNetwork"):
        doc = {
            "apiVersion": "danm.k8s.io/v1",
            "kind": kind,
            "metadata": {"name": "x"},
            "spec": {"NetworkID": "n", "Options": data},
        }
        _only_intent_errors(yaml.safe_dump(doc).encode())
    nad = {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": "x"},
        "spec": {"config": data},
    }
    _only_intent_errors(yaml.safe_dump(nad).encode())
