"""A short chaos run in `make test` (tests/lab/chaos.py; the long one is `make chaos`): at least 10 kills of
the daemon during a storm of ADDs and DELs with faulty delegates and a cache disk filling up, then DEL of
everything: zero leftovers, no violation."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.lab.chaos import run

pytestmark = pytest.mark.root


def test_short_chaos_run_leaves_nothing(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces, a tmpfs mount)")
    report = run(tmp_path, containers=16, kills=12, seed=int(os.environ.get("NETCOMP_CHAOS_SEED", "7")), workers=6)
    doc = report.as_dict()
    print(json.dumps(doc, indent=2))
    assert doc["kills"] >= 12
    assert report.violations == []
    assert doc["leftovers"] == {"interfaces": 0, "hostLinks": 0, "leases": 0, "cacheEntries": 0}, doc
    assert doc["requestsBy"].get("ADD ok", 0) > 0 and doc["requestsBy"].get("DEL ok", 0) > 0
