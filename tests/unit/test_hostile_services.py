"""Services as a hostile tenant writes them, without an API server: selectors that would make a backtracking regex
run for seconds are read in one pass and refused past their bound, DANM's selector JSON nested deeper than any
label map is refused (no RecursionError), a Service of any shape is a refusal and never an exception, and a bad
Service is ignored (said once, counted) while the watch goes on to the next. Fuzzed with hypothesis. The API
server's side is tests/integration/test_hostile_services.py."""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netcomp import foreign
from netcomp.cluster.slices import Refusal, ServiceSpec, read_service
from netcomp.kube import labels
from tests.lab.services import slices_of

# ------------------------------------------------------------------------------------------------ selectors


def steps(fn: Callable[[], object]) -> int:
    """The lines of labels.py that fn() runs: a count of the parser's work that no machine's speed changes."""
    count = 0
    source = labels.__file__

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        if event == "line":
            count += 1
        return local

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        return local if frame.f_code.co_filename == source else None

    sys.settrace(tracer)
    try:
        fn()
    except ValueError:
        pass
    finally:
        sys.settrace(None)
    return count


def test_the_selector_parser_holds_no_regex() -> None:
    """A regex over a tenant's selector is where quadratic backtracking hides (60,000 spaces froze a node for
    12.6 s in C, where no line count sees it): the parser is a scanner, and its module compiles no pattern."""
    patterns = [name for name, v in vars(labels).items() if isinstance(v, re.Pattern)]
    assert patterns == [] and "re" not in vars(labels)


# The shapes that make backtracking regexes work hardest: long runs of one character class, with and without a
# character at the end that no requirement can hold.
SHAPES: dict[str, Callable[[int], str]] = {
    "spaces": lambda n: "a" + " " * n + "b",
    "spaces then bang": lambda n: " " * n + "!",
    "a long key": lambda n: "a" * n + "=b",
    "bangs": lambda n: "!" * n,
    "equals": lambda n: "a" + "=" * n,
    "commas in a set": lambda n: "a in (" + "," * n + ")",
    "parentheses": lambda n: "a in " + "(" * (n // 2) + ")" * (n // 2),
    "many requirements": lambda n: ",".join(["a=b"] * (n // 4)),
    "spaced set": lambda n: "a in (" + " b ," * (n // 4) + "c)",
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_parser_is_linear_in_its_input(shape: str) -> None:
    make = SHAPES[shape]
    small, large = steps(lambda: labels.parse(make(2000))), steps(lambda: labels.parse(make(4000)))
    assert large <= 2.2 * small + 50, (shape, small, large)
    assert large <= 20 * 4000, (shape, large)  # a few lines per character, whatever the shape


def test_a_selector_past_its_bound_is_refused_before_it_is_read() -> None:
    text = "app=web" + " " * 60_000 + "!"
    assert steps(lambda: labels.parse(text)) < 20
    with pytest.raises(ValueError, match=f"60008 characters: a selector is at most {labels.MAX_LENGTH}"):
        labels.parse(text)
    with pytest.raises(ValueError, match="a selector holds at most 64"):
        labels.parse(",".join(f"k{i}" for i in range(65)))
    with pytest.raises(ValueError, match="holds at most 64"):
        labels.from_map({f"k{i}": "v" for i in range(65)})


def test_a_refusal_quotes_a_bounded_part_of_the_selector() -> None:
    with pytest.raises(ValueError) as e:
        labels.parse("x" * 8000 + "=y")
    assert len(str(e.value)) < 200 and "a label key is at most 317 characters" in str(e.value)


@settings(max_examples=400, deadline=2000)
@given(st.text(alphabet=" \t\n!=(),<>abcz09./-_éin", max_size=300) | st.text(max_size=300))
def test_any_text_is_a_selector_or_a_clear_refusal(text: str) -> None:
    try:
        sel = labels.parse(text)
    except ValueError as e:
        assert str(e) and "\n" not in str(e).replace("\\n", "")
        return
    for r in sel.requirements:  # what it accepted, labels can hold
        assert r.op in ("in", "notin", "exists", "!exists", "gt", "lt") and r.key
    sel.matches({"a": "b"})


@settings(max_examples=200, deadline=2000)
@given(st.dictionaries(st.text(max_size=80), st.text(max_size=80), max_size=70))
def test_any_label_map_is_a_selector_or_a_clear_refusal(m: dict[str, str]) -> None:
    try:
        labels.from_map(m)
    except ValueError as e:
        assert str(e)


# ------------------------------------------------------------------------------------------------ Services


def service(notes: dict[str, Any], **spec: Any) -> dict[str, Any]:
    meta = {"namespace": "vnf", "name": "lb", "uid": "u1", "annotations": notes, "resourceVersion": "7"}
    return {"metadata": meta, "spec": spec}


@pytest.mark.parametrize("depth", [33, 1_000, 100_000])
def test_danms_selector_nested_deeper_than_labels_is_refused(depth: int) -> None:
    deep = '{"a":' * depth + '"b"' + "}" * depth
    got = read_service(service({"danm.k8s.io/selector": deep, "danm.k8s.io/network": "n"}))
    assert isinstance(got, Refusal), got
    assert got.why.startswith("danm.k8s.io/selector: not JSON") and "nested" in got.why and len(got.why) < 200


def test_a_long_network_name_is_refused_in_a_line() -> None:
    got = read_service(service({"netcomp.io/network": "a" * 100_000, "netcomp.io/selector": "a=b"}))
    assert isinstance(got, Refusal) and "is not a network" in got.why and len(got.why) < 200


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
KEYS = st.sampled_from(
    ["danm.k8s.io/selector", "danm.k8s.io/network", "danm.k8s.io/tenantNetwork", "netcomp.io/network",
     "netcomp.io/selector", "service.alpha.kubernetes.io/tolerate-unready-endpoints", "other"]
)  # fmt: skip
SELECTOR_TEXT = st.text(alphabet=' {}[]":,ab!=()', max_size=200) | st.builds(
    lambda d: __import__("json").dumps(d), JSONISH
)


@settings(max_examples=400, deadline=2000)
@given(
    st.dictionaries(KEYS, SELECTOR_TEXT | JSONISH, max_size=5),
    st.dictionaries(st.sampled_from(["type", "selector", "ports", "clusterIP"]), JSONISH, max_size=4),
    st.sampled_from([None, "x", [], {"labels": "x"}, {"labels": {"a": 1}}]),
)
def test_any_service_is_read_or_refused_never_raises(notes: dict[str, Any], spec: dict[str, Any], meta: Any) -> None:
    doc = service(notes, **spec)
    if meta is not None:
        doc["metadata"] = {**doc["metadata"], **meta} if isinstance(meta, dict) else meta
    got = read_service(doc)
    assert got is None or isinstance(got, (Refusal, ServiceSpec))


# ------------------------------------------------------------------------------------------------ the watch


class FakeCore:
    """list_service_for_all_namespaces as the API server answers it: a list, then a watch of `events`."""

    def __init__(self, items: list[dict[str, Any]], events: list[dict[str, Any]], stop: threading.Event) -> None:
        self.items, self.events, self.stop = items, events, stop

    def list_service_for_all_namespaces(self, **kw: Any) -> Any:
        if kw.get("watch"):
            return self._watch()
        import orjson

        body = orjson.dumps({"metadata": {"resourceVersion": "1"}, "items": self.items})
        return type("R", (), {"data": body})()

    def _watch(self) -> Iterator[dict[str, Any]]:
        yield from self.events
        self.stop.set()


def good(name: str) -> dict[str, Any]:
    doc = service({"netcomp.io/network": "ext", "netcomp.io/selector": "app=lb"}, ports=[{"port": 80}])
    doc["metadata"] = {**doc["metadata"], "name": name}
    return doc


def test_a_bad_service_costs_only_itself(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """The ones that stopped Service following on every node: a RecursionError (DANM's selector), and a ReDoS
    (netcomp's selector); after them, a good Service is still taken, in the list and from the watch."""
    deep = {"danm.k8s.io/selector": "[" * 50_000 + "]" * 50_000, "danm.k8s.io/network": "n"}
    spaces = {"netcomp.io/network": "ext", "netcomp.io/selector": "a" + " " * 60_000 + "b"}
    bad = [
        {
            **service(deep),
            "metadata": {**service(deep)["metadata"], "name": "deep", "managedFields": [{"manager": "mallory"}]},
        },
        {**service(spaces), "metadata": {**service(spaces)["metadata"], "name": "ws"}},
    ]
    stop = threading.Event()
    core = FakeCore([*bad, good("first")], [{"type": "ADDED", "object": d} for d in [*bad, good("second")]], stop)
    ss, metrics = slices_of(core, tmp_path)
    foreign.count_into(metrics.foreign_ignored)
    monkeypatch.setattr(foreign, "_seen", set())
    follower = threading.Thread(target=ss.follows["Services"].follow, args=(stop,), daemon=True)
    try:
        follower.start()
        follower.join(120)  # a deadline only: it ends when the watch has delivered everything
        stop.set()
    finally:
        foreign.count_into(None)
    assert not follower.is_alive(), "Service following is stuck"
    assert sorted(ss.services) == [("vnf", "first"), ("vnf", "second")]
    assert sorted(ss.refused) == [("vnf", "deep"), ("vnf", "ws")]
    assert ss.refused[("vnf", "deep")].startswith("danm.k8s.io/selector: not JSON (nested")
    assert "60002 characters: a selector is at most" in ss.refused[("vnf", "ws")]
    said = [r.getMessage() for r in caplog.records if r.name == "netcomp.foreign"]
    assert len(said) == 2, said  # once each: the list and the watch gave the same versions
    assert any("ignoring Service vnf/deep (written by mallory): gets no EndpointSlices" in s for s in said)
    assert 'netcomp_foreign_ignored_total{kind="Service"} 2' in metrics.render().decode()
    assert ss.status()["lastError"] is None


def test_a_refusal_quotes_a_huge_label_key_or_value_shortly() -> None:
    """A DANM selector whose one label key (or value) is 200,000 characters: the refusal kept for `netcomp status`
    quotes at most 80 characters of it."""
    from netcomp.names import label_key_problem, label_value_problem

    for why in (label_key_problem("a" * 200_000), label_value_problem("-" * 200_000)):
        assert why is not None and len(why) < 300, len(why or "")
