"""The corpus of malformed intents: each file in malformed/ ends with `# expect:` lines, the exact diagnostics
(line:col: severity: message) the compiler must give for it, all of them and nothing else.

Regenerate after an intended change of wording with `make golden`, and review the diff like code.

A rule across fields is reported at the key (or value) that breaks it (model.py's BrokenAt): a file per rule here
shows where, and a test keeps every model validator to it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from netcomp.compiler.compiler import Compiler
from netcomp.intent import model
from netcomp.settings import Settings
from tests.lab.checkout import UPDATE_GOLDEN

CORPUS = Path(__file__).parent / "malformed"
STATIC = CORPUS / "static"
EXPECT = re.compile(r"^# expect: (.*)$", re.M)
CASES = sorted(p for p in CORPUS.glob("*.yaml"))


def test_corpus_is_large_enough() -> None:
    assert len(CASES) >= 40


def _diagnose(path: Path, plugin_dir: Path) -> list[str]:
    settings = Settings(staticDirs=[str(STATIC)], pluginDirs=[str(plugin_dir)], templateDir="/nonexistent")
    plan = Compiler(settings, offline=False).compile([path])  # as the daemon compiles, on the node
    out = []
    for d in plan.diagnostics:
        assert d.location is not None, d
        where = f"{d.location.line}:{d.location.column}" if d.location.file == str(path) else d.location.file
        text = f"{where}: {d.severity}: {d.message}"
        out.append(
            text.replace(str(STATIC), "<static>").replace(str(CORPUS), "<corpus>").replace(str(plugin_dir), "<plugins>")
        )
    return out


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_malformed(path: Path, plugin_dir: Path) -> None:
    raw = path.read_bytes()
    text = raw.decode("utf-8", errors="replace")
    expected = EXPECT.findall(text)
    got = _diagnose(path, plugin_dir)
    if UPDATE_GOLDEN:
        body = raw.split(b"\n# expect: ")[0].rstrip(b"\n") + b"\n"
        path.write_bytes(body + "".join(f"# expect: {g}\n" for g in got).encode())
        return
    assert expected, f"{path.name} has no '# expect:' lines"
    assert got == expected
    assert any(": error: " in g for g in got) or path.stem.startswith(("danm-ignored", "nad-resource"))


def _unplaced_raises(source: str) -> list[str]:
    """`raise`s in model validators that do not say where the rule breaks (anything but `raise BrokenAt(...)`):
    their error would land on the whole mapping."""
    out = []
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, ast.FunctionDef) or not any(
            isinstance(d, ast.Call) and getattr(d.func, "id", None) == "model_validator" for d in fn.decorator_list
        ):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Raise) and not (
                isinstance(node.exc, ast.Call) and getattr(node.exc.func, "id", None) == "BrokenAt"
            ):
                out.append(f"{fn.name}:{node.lineno}")
    return out


def test_model_validators_say_where_a_rule_breaks() -> None:
    assert _unplaced_raises(Path(model.__file__).read_text()) == []
    # ... and the check finds one that does not.
    bad = "@model_validator(mode='after')\ndef _r(self):\n    raise ValueError('x')\n"
    assert _unplaced_raises(bad) == ["_r:3"]
