"""Template overrides, plugin checks on a node, internal errors, and the layering of the package."""

from __future__ import annotations

import ast
import io
from pathlib import Path

import pytest

from netcomp.cli import main
from netcomp.config import Settings
from netcomp.render import BUILTIN_DIR
from netcomp.workspace import Compiler

INTENT = "apiVersion: netcomp.io/v1\nkind: Network\nmetadata: {name: a}\nspec: {type: macvlan, hostDevice: eth1}\n"


def _compile(tmp_path: Path, plugin_dir: Path, **kw: object) -> object:
    f = tmp_path / "a.yaml"
    f.write_text(INTENT)
    settings = Settings(pluginDirs=[str(plugin_dir)], staticDirs=[], **kw)  # type: ignore[arg-type]
    return Compiler(settings).compile([f])


def test_admin_template_override(tmp_path: Path, plugin_dir: Path) -> None:
    tdir = tmp_path / "templates"
    tdir.mkdir()
    text = (BUILTIN_DIR / "macvlan.json.j2").read_text()
    (tdir / "macvlan.json.j2").write_text(
        text.replace('"mode": {{ spec.mode | tojson }}', '"mode": {{ spec.mode | tojson }}, "linkInContainer": false')
    )
    plan = _compile(tmp_path, plugin_dir, templateDir=str(tdir))
    assert plan.ok  # type: ignore[attr-defined]
    assert b'"linkInContainer": false' in plan.artifacts["a.conflist"].data  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("{{ nope }}", "template macvlan.json.j2: 'nope' is undefined"),
        ('{"cniVersion": "1.0.0", "name": "a", "plugins": [{"type": "/bin/sh"}]}', "must be a plain plugin name"),
        ('{"name": "other", "plugins": [{"type": "macvlan"}]}', "network name is 'other', not 'a'"),
        ("{not json", "produced invalid JSON"),
        ("{% if %}", "template syntax"),
    ],
)
def test_broken_template_is_an_error_naming_it(tmp_path: Path, plugin_dir: Path, body: str, message: str) -> None:
    tdir = tmp_path / "templates"
    tdir.mkdir()
    (tdir / "macvlan.json.j2").write_text(body)
    plan = _compile(tmp_path, plugin_dir, templateDir=str(tdir))
    assert not plan.ok  # type: ignore[attr-defined]
    assert any(message in d.message for d in plan.errors), plan.errors  # type: ignore[attr-defined]
    assert plan.artifacts == {}  # type: ignore[attr-defined]


def test_missing_plugin_is_an_error_on_a_node(tmp_path: Path) -> None:
    f = tmp_path / "a.yaml"
    f.write_text(INTENT)
    empty = tmp_path / "bin"
    empty.mkdir()
    settings = Settings(pluginDirs=[str(empty)], staticDirs=[])
    offline = Compiler(settings, offline=True).compile([f])
    assert offline.ok and [d.severity for d in offline.diagnostics] == ["warning"]
    node = Compiler(settings, offline=False).compile([f])
    assert not node.ok and node.failed_networks == {"a"} and node.artifacts == {}
    assert "CNI plugin 'macvlan' is not installed" in node.errors[0].message


def test_internal_error_has_no_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    from netcomp import commands

    def broken(*a: object) -> int:
        raise KeyError("oops")

    monkeypatch.setattr(commands, "run", broken)
    err = io.StringIO()
    assert main(["validate", "."], io.StringIO(), err) == 70
    assert "internal error: KeyError" in err.getvalue() and "Traceback" not in err.getvalue()


# Levels from DESIGN: a module may import only from its own level or below.
LEVELS = {
    "netcomp.errors": 0,
    "netcomp.report": 0,
    "netcomp.paths": 0,
    "netcomp.fsutil": 0,
    "netcomp.protocol": 0,
    "netcomp.shim": 0,
    "netcomp.shim.install": 0,
    "netcomp.cni": 1,
    "netcomp.intent": 1,
    "netcomp.render": 1,
    "netcomp.config": 1,
    "netcomp.backends": 2,
    "netcomp.compile": 3,
    "netcomp.apply": 3,
    "netcomp.workspace": 3,
    "netcomp.plancache": 3,
    "netcomp.delegate": 3,
    "netcomp.host": 3,
    "netcomp.schema": 3,
    "netcomp.cli": 4,
    "netcomp.service": 4,
    "netcomp.commands": 4,
    "netcomp.daemon": 4,
}


def _level(module: str) -> int | None:
    parts = module.split(".")
    for n in range(len(parts), 1, -1):
        lvl = LEVELS.get(".".join(parts[:n]))
        if lvl is not None:
            return lvl
    return None


def test_imports_point_down_the_levels() -> None:
    root = Path(__file__).resolve().parents[2] / "netcomp"
    problems = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).with_suffix("")
        module = ".".join(p for p in rel.parts if p != "__init__")
        if module == "netcomp":
            continue
        mine = _level(module)
        assert mine is not None, f"{module} has no level in LEVELS"
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("netcomp"):
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.startswith("netcomp")]
            else:
                continue
            for t in targets:
                lvl = _level(t)
                if lvl is not None and lvl > mine:
                    problems.append(f"{module} (L{mine}) imports {t} (L{lvl})")
    assert problems == []
