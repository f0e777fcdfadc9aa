"""Templates: an admin's override of a built-in one is what renders, a broken one is an error naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from netcomp.compiler.compiler import Compiler
from netcomp.compiler.jinja import BUILTIN_DIR
from netcomp.settings import Settings

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
