"""The daemon's /metrics page is byte for byte what prometheus_client wrote for the same events (netcomp writes
the text format itself: importing prometheus_client would cost the idle daemon memory: docs/benchmarks.md)."""

from __future__ import annotations

import random
import time
from typing import Any

import pytest

from netcomp import metrics as ours
from netcomp.metrics import Metrics, go_float

prom = pytest.importorskip("prometheus_client")


def _reference() -> tuple[Any, dict[str, Any]]:
    """The families of Metrics, made with prometheus_client (as netcomp did before)."""
    r = prom.CollectorRegistry()
    made: dict[str, Any] = {}
    for name, fam in vars(Metrics()).items():
        if not isinstance(fam, ours._Family):
            continue
        labels = list(fam.labelnames)
        if isinstance(fam, ours.Counter):
            made[name] = prom.Counter(fam.name, fam.documentation, labels, registry=r)
        elif isinstance(fam, ours.Gauge):
            made[name] = prom.Gauge(fam.name, fam.documentation, labels, registry=r)
        else:
            made[name] = prom.Histogram(fam.name, fam.documentation, labels, buckets=ours.BUCKETS, registry=r)
        for values in fam._series if labels else ():
            made[name].labels(*values)  # the series Metrics shows at 0 from the start
    return r, made


@pytest.mark.parametrize("seed", range(5))
def test_same_page_as_prometheus_client(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "time", lambda: 1_795_422_286.841656)  # every series' creation time
    rng = random.Random(seed)
    reg, theirs = _reference()
    mine = Metrics()
    words = ["ADD", "DEL", "ok", "error", 'we"ird\\na\nme', "macvlan", "é"]
    for _ in range(300):
        name = rng.choice(list(theirs))
        fam = getattr(mine, name)
        values = tuple(rng.choice(words) for _ in fam.labelnames)
        if isinstance(fam, ours.Histogram):
            op, amount = "observe", rng.choice([0.0, 0.004, 0.005, 0.02, 0.7, 1.0, 61.0, rng.random() * 100])
        elif isinstance(fam, ours.Gauge):
            op, amount = rng.choice(["set", "inc", "dec"]), float(rng.randint(0, 2_000_000))
        else:
            op, amount = "inc", float(rng.choice([0, 1, 3, 1e7]))
        for obj in (fam, theirs[name]):
            getattr(obj.labels(*values) if values else obj, op)(amount)
    assert mine.render().decode() == prom.generate_latest(reg).decode()


def test_labels_are_checked() -> None:
    m = Metrics()
    with pytest.raises(ValueError):
        m.requests.labels("ADD")
    with pytest.raises(ValueError):
        m.requests.inc()
    with pytest.raises(ValueError):
        m.in_flight.labels("x")
    assert m.requests.labels("ADD", "ok") is m.requests.labels("ADD", "ok")
    m.requests.labels("ADD", "ok").inc(2)
    assert (m.requests.labels("ADD", "ok").value(), m.requests.labels("DEL", "ok").value()) == (2, 0)


@pytest.mark.parametrize(
    "value", [0.0, 1.0, 0.005, 60.0, 1e7, 1795422286.841656, 123456.5, -3.5, float("inf"), float("-inf"), 1e22]
)
def test_go_float(value: float) -> None:
    from prometheus_client.utils import floatToGoString

    assert go_float(value) == floatToGoString(value)
