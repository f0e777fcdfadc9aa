"""The netcomp command as a user meets it: exit codes, messages, diff/check/dry-run, pruning, foreign files."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest

from netcomp.cli.main import main
from netcomp.compiler.compiler import Compiler
from netcomp.settings import Settings
from tests.lab.checkout import EXAMPLES
from tests.lab.command import run
from tests.lab.intents import DEVICE, GOOD


@pytest.fixture
def tree(tmp_path: Path, plugin_dir: Path) -> dict[str, Path]:
    intents = tmp_path / "intents"
    intents.mkdir()
    (intents / "a.yaml").write_text(GOOD.format(name="alpha", subnet="10.1.0.0/24", dev=DEVICE))
    (intents / "b.yaml").write_text(GOOD.format(name="beta", subnet="10.2.0.0/24", dev=DEVICE))
    return {"intents": intents, "out": tmp_path / "out", "plugins": plugin_dir}


def compile_args(t: dict[str, Path], *extra: str) -> list[str]:
    return ["compile", str(t["intents"]), "--out", str(t["out"]), "--plugin-dir", str(t["plugins"]), *extra]


def test_validate_ok_and_error_exit_codes(tree: dict[str, Path]) -> None:
    code, _, err = run("validate", str(tree["intents"]), "--plugin-dir", str(tree["plugins"]))
    assert (code, err.strip()) == (0, "ok: 2 networks")
    (tree["intents"] / "c.yaml").write_text("apiVersion: netcomp.io/v1\nkind: Network\nmetadata: {name: C}\n")
    code, _, err = run("validate", str(tree["intents"]))
    assert code == 65
    assert f"{tree['intents'] / 'c.yaml'}:3:18: error: metadata.name: 'C' is not a DNS-1123 label" in err
    assert "\n  metadata: {name: C}\n                   ^\n" in err
    assert "Traceback" not in err


def test_what_only_a_node_has_is_a_warning_unless_strict(tree: dict[str, Path], tmp_path: Path) -> None:
    """In CI the node's devices, static files and plugins are not there: a warning each (at the author's text),
    exit 0; with --strict an error, exit 65, as the daemon has it on the node. --static-dir and --plugin-dir point
    at copies."""
    intents = tree["intents"]
    (intents / "a.yaml").write_text(GOOD.format(name="alpha", subnet="10.1.0.0/24", dev="nc-absent0"))
    static = "apiVersion: netcomp.io/v1\nkind: Network\nmetadata: {name: legacy}\n"
    static += "spec: {type: static, networkID: old}\n"
    (intents / "c.yaml").write_text(static)
    code, _, err = run("validate", str(intents), "--plugin-dir", str(tree["plugins"]))
    node_only = "compiled away from the node: --strict makes this an error"
    assert code == 0, err
    assert f"{intents / 'a.yaml'}:7:15: warning: host device 'nc-absent0' is not on this machine ({node_only})" in err
    assert f"{intents / 'c.yaml'}:4:33: warning: static networkID 'old': no old.conflist, .conf or .json in " in err
    assert f"(left out: {node_only})" in err
    code, _, err = run("validate", str(intents), "--plugin-dir", str(tmp_path / "none"))
    assert code == 0 and f"warning: CNI plugin 'macvlan' is not installed in {tmp_path / 'none'} (and 1 more" in err
    code, _, err = run("validate", str(intents), "--plugin-dir", str(tmp_path / "none"), "--strict")
    assert code == 65
    assert "error: host device 'nc-absent0' is not on this machine\n" in err
    assert "error: static networkID 'old': no old.conflist" in err and "error: CNI plugin 'macvlan'" in err
    copies = tmp_path / "static-copies"
    copies.mkdir()
    (copies / "old.conflist").write_text(json.dumps({"cniVersion": "1.0.0", "name": "old", "type": "macvlan"}))
    (intents / "a.yaml").write_text(GOOD.format(name="alpha", subnet="10.1.0.0/24", dev=DEVICE))
    argv = ["--plugin-dir", str(tree["plugins"]), "--static-dir", str(copies), "--strict"]
    code, _, err = run("validate", str(intents), *argv)
    assert (code, err.strip()) == (0, "ok: 3 networks")
    code, _, err = run("compile", str(intents), "--out", str(tree["out"]), "--check", *argv)
    assert code == 1 and sorted(p.name for p in tree["out"].glob("*")) == []  # would write; wrote nothing


def test_json_output_lists_every_diagnostic(tree: dict[str, Path]) -> None:
    (tree["intents"] / "c.yaml").write_text("kind: Network\n---\n- 1\n")
    code, out, _ = run("validate", str(tree["intents"]), "-o", "json")
    doc = json.loads(out)
    assert code == 65
    assert [(d["line"], d["column"]) for d in doc["diagnostics"]] == [(3, 1)]
    assert doc["errors"] == 1


def test_compile_writes_then_is_idempotent_then_prunes(tree: dict[str, Path]) -> None:
    code, _, err = run(*compile_args(tree))
    assert code == 0 and "2 networks, 2 changed" in err
    before = {p.name: p.stat().st_mtime_ns for p in tree["out"].glob("*.conflist")}
    assert sorted(before) == ["alpha.conflist", "beta.conflist"]
    code, _, err = run(*compile_args(tree))
    assert code == 0 and "2 networks, 0 changed" in err
    assert {p.name: p.stat().st_mtime_ns for p in tree["out"].glob("*.conflist")} == before  # nothing rewritten
    (tree["intents"] / "b.yaml").unlink()
    code, _, err = run(*compile_args(tree))
    assert "removed" in err and sorted(p.name for p in tree["out"].glob("*.conflist")) == ["alpha.conflist"]


def test_foreign_files_are_never_touched(tree: dict[str, Path]) -> None:
    tree["out"].mkdir()
    foreign = tree["out"] / "other.conflist"
    foreign.write_text('{"cniVersion": "1.0.0", "name": "other", "plugins": [{"type": "bridge"}]}\n')
    (tree["out"] / "notes.txt").write_text("mine\n")
    run(*compile_args(tree))
    assert foreign.read_text().startswith('{"cniVersion"')
    clash = tree["out"] / "alpha.conflist"
    clash.unlink()
    clash.write_text('{"name": "alpha", "plugins": []}\n')  # same name, not ours
    code, _, err = run(*compile_args(tree))
    assert code == 74 and "was not written by netcomp" in err
    assert clash.read_text() == '{"name": "alpha", "plugins": []}\n'


def test_error_writes_nothing_and_keeps_old_output(tree: dict[str, Path]) -> None:
    run(*compile_args(tree))
    snapshot = {p.name: p.read_bytes() for p in tree["out"].iterdir()}
    (tree["intents"] / "a.yaml").write_text(GOOD.format(name="alpha", subnet="10.1.0.0/33", dev=DEVICE))
    gamma = GOOD.format(name="gamma", subnet="10.3.0.0/24", dev=DEVICE)
    (tree["intents"] / "c.yaml").write_text(gamma)  # would be staged
    code, _, err = run(*compile_args(tree))
    assert code == 65 and "nothing written" in err
    assert {p.name: p.read_bytes() for p in tree["out"].iterdir()} == snapshot  # no temp file left either


def test_diff_check_and_dry_run_write_nothing(tree: dict[str, Path]) -> None:
    code, out, _ = run(*compile_args(tree, "--check"))
    assert code == 1 and not tree["out"].exists()
    assert "would add" in out
    code, out, _ = run(*compile_args(tree, "--diff"))
    assert code == 0 and "+++ " in out and '+  "name": "alpha",' in out and not tree["out"].exists()
    code, out, _ = run(*compile_args(tree, "--dry-run"))
    assert code == 0 and out.count("would add") == 2 and not tree["out"].exists()
    run(*compile_args(tree))
    assert run(*compile_args(tree, "--check"))[0] == 0


def test_usage_and_missing_input(tree: dict[str, Path]) -> None:
    assert run("compile", "--bogus")[0] == 64
    code, _, err = run("validate", str(tree["intents"] / "nope.yaml"))
    assert code == 66 and "no such file" in err


def test_layers_shadow_by_file_name(tmp_path: Path, plugin_dir: Path) -> None:
    lib, etc = tmp_path / "lib", tmp_path / "etc"
    lib.mkdir()
    etc.mkdir()
    (lib / "n.yaml").write_text(GOOD.format(name="from-lib", subnet="10.1.0.0/24", dev=DEVICE))
    (lib / "m.yaml").write_text(GOOD.format(name="only-lib", subnet="10.3.0.0/24", dev=DEVICE))
    (etc / "n.yaml").write_text(GOOD.format(name="from-etc", subnet="10.2.0.0/24", dev=DEVICE))
    code, out, _ = run("validate", str(lib), str(etc), "--plugin-dir", str(plugin_dir), "-o", "json")
    assert code == 0 and json.loads(out)["networks"] == ["from-etc", "only-lib"]


def test_config_file_and_root(tmp_path: Path, plugin_dir: Path) -> None:
    root = tmp_path / "root"
    (root / "etc/netcomp/networks.d").mkdir(parents=True)
    (root / "etc/netcomp/networks.d/a.yaml").write_text(GOOD.format(name="alpha", subnet="10.1.0.0/24", dev=DEVICE))
    shutil.copytree(plugin_dir, root / "usr/lib/cni")
    (root / "etc/netcomp/netcomp.yaml").write_text("cniVersion: 0.4.0\n")
    code, _, err = run("compile", "--root", str(root))
    assert code == 0, err
    data = json.loads((root / "run/netcomp/networks/alpha.conflist").read_text())
    assert data["cniVersion"] == "0.4.0"
    (root / "etc/netcomp/netcomp.yaml").write_text("cniVersion: 0.4.0\noutputdir: /x\n")
    code, _, err = run("compile", "--root", str(root))
    assert code == 65 and "netcomp.yaml:2:1: error: unknown key 'outputdir'" in err


def test_schema_command() -> None:
    code, out, _ = run("schema")
    assert code == 0 and json.loads(out)["title"] == "netcomp Network intent"


def test_examples_validate_without_errors(plugin_dir: Path) -> None:
    code, _, err = run(
        "validate",
        str(EXAMPLES / "networks.d"),
        "--static-dir",
        str(EXAMPLES / "static.d"),
        "--plugin-dir",
        str(plugin_dir),
    )
    assert code == 0, err


def test_plan_cache_skips_compiling_unchanged_inputs(tree: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    from netcomp.compiler.compiler import Compiler

    assert run(*compile_args(tree))[0] == 0
    assert (tree["out"] / ".netcomp-plan.cache").stat().st_mode & 0o777 == 0o600

    def boom(*a: object, **k: object) -> None:
        raise AssertionError("compiled although nothing changed")

    with monkeypatch.context() as m:
        m.setattr(Compiler, "compile", boom)
        code, _, err = run(*compile_args(tree))
        assert code == 0 and "2 networks, 0 changed" in err
        # A hand-edited output file is put right even when the plan comes from the cache.
        (tree["out"] / "alpha.conflist").write_text('{"netcomp": {"generated": true}}')
        code, _, err = run(*compile_args(tree))
        assert code == 0 and "updated" in err and '"alpha"' in (tree["out"] / "alpha.conflist").read_text()
    # Any edit of an input compiles again.
    (tree["intents"] / "a.yaml").write_text(GOOD.format(name="alpha", subnet="10.9.0.0/24", dev=DEVICE))
    code, _, err = run(*compile_args(tree))
    assert code == 0 and "10.9.0.0/24" in (tree["out"] / "alpha.conflist").read_text()
    # A damaged cache is ignored, not trusted.
    (tree["out"] / ".netcomp-plan.cache").write_text("{not json")
    code, _, err = run(*compile_args(tree))
    assert code == 0 and "2 networks, 0 changed" in err


def test_missing_plugin_is_an_error_on_a_node(tmp_path: Path) -> None:
    """A plugin not installed: a warning away from the node, an error on it (the network fails, nothing written)."""
    f = tmp_path / "a.yaml"
    f.write_text(
        "apiVersion: netcomp.io/v1\nkind: Network\nmetadata: {name: a}\nspec: {type: macvlan, hostDevice: eth1}\n"
    )
    empty = tmp_path / "bin"
    empty.mkdir()
    settings = Settings(pluginDirs=[str(empty)], staticDirs=[])
    offline = Compiler(settings, offline=True).compile([f])
    assert offline.ok and [d.severity for d in offline.diagnostics] == ["warning"]
    node = Compiler(settings, offline=False).compile([f])
    assert not node.ok and node.failed_networks == {"a"} and node.artifacts == {}
    assert "CNI plugin 'macvlan' is not installed" in node.errors[0].message


def test_internal_error_has_no_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    from netcomp.cli import compile as commands

    def broken(*a: object) -> int:
        raise KeyError("oops")

    monkeypatch.setattr(commands, "run", broken)
    err = io.StringIO()
    assert main(["validate", "."], io.StringIO(), err) == 70
    assert "internal error: KeyError" in err.getvalue() and "Traceback" not in err.getvalue()
