"""Golden files: each case under tests/golden/ compiles to exactly the files in its expected/ dir, byte for byte
(no file more, none less). Regenerate with `make golden` and review the diff like code."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from netcomp.compiler.compiler import Compiler, discover
from netcomp.compiler.output import Output
from netcomp.settings import Settings
from tests.lab.checkout import EXAMPLES, ROOT, UPDATE_GOLDEN

GOLDEN = ROOT / "tests" / "golden"
CASES = sorted(p.name for p in GOLDEN.iterdir() if p.is_dir())


def _inputs(case: Path) -> tuple[Path, Path]:
    if case.name == "examples":
        return EXAMPLES / "networks.d", EXAMPLES / "static.d"
    return case / "intents", case / "static"


@pytest.mark.parametrize("name", CASES)
def test_golden(name: str, tmp_path: Path, plugin_dir: Path) -> None:
    case = GOLDEN / name
    intents, static = _inputs(case)
    settings = Settings(staticDirs=[str(static)], pluginDirs=[str(plugin_dir)], templateDir="/nonexistent")
    plan = Compiler(settings).compile(discover([intents]))
    assert plan.errors == []
    out = tmp_path / "out"
    Output(out).apply(plan)
    expected = case / "expected"
    if UPDATE_GOLDEN:
        shutil.rmtree(expected, ignore_errors=True)
        shutil.copytree(out, expected)
        return
    got = {p.name: p.read_bytes() for p in out.iterdir()}
    want = {p.name: p.read_bytes() for p in expected.iterdir()}
    assert sorted(got) == sorted(want)
    for fname, data in want.items():
        assert got[fname] == data, f"{name}/{fname} differs from its golden file"


def test_every_backend_and_format_has_a_golden() -> None:
    import json

    types, formats = set(), set()
    for name in CASES:
        for f in (GOLDEN / name / "expected").iterdir():
            types.add(json.loads(f.read_bytes())["netcomp"]["type"])
    for name in CASES:
        intents, _ = _inputs(GOLDEN / name)
        for f in intents.glob("*.yaml"):
            for line in f.read_text().splitlines():
                if line.startswith("kind:"):
                    formats.add(line.split(":", 1)[1].strip())
    assert types == {"macvlan", "ipvlan", "sriov", "static"}
    assert formats >= {"Network", "DanmNet", "ClusterNetwork", "TenantNetwork", "NetworkAttachmentDefinition"}
