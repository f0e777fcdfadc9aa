"""The long-lived Compiler redoes only what changed, and gives the same plan a fresh compiler would."""

from __future__ import annotations

from pathlib import Path

from netcomp.apply import Output
from netcomp.config import Settings
from netcomp.workspace import Compiler

TEMPLATE = """apiVersion: netcomp.io/v1
kind: Network
metadata: {{name: n{i}}}
spec: {{type: macvlan, hostDevice: eth1, vlan: {vlan}, ipam: {{type: host-local, subnet: 10.{a}.{b}.0/24}}}}
"""


def _write(d: Path, i: int, vlan: int | None = None) -> Path:
    p = d / f"n{i}.yaml"
    p.write_text(TEMPLATE.format(i=i, vlan=vlan or (i % 4000) + 1, a=i // 256, b=i % 256))
    return p


def test_edit_rerenders_only_the_edited_intent(tmp_path: Path, plugin_dir: Path) -> None:
    files = [_write(tmp_path, i) for i in range(50)]
    settings = Settings(pluginDirs=[str(plugin_dir)], staticDirs=[])
    comp = Compiler(settings)
    first = comp.compile(files)
    assert first.ok and len(first.artifacts) == 50
    before = {id(r.artifact) for r in comp._rendered.values()}
    _write(tmp_path, 7, vlan=3999)
    second = comp.compile(files, changed=[files[7]])
    after = {id(r.artifact) for r in comp._rendered.values()}
    assert len(after - before) == 1  # exactly one artifact was rendered again
    assert b'"id": 3999' in second.artifacts["n7.conflist"].data
    fresh = Compiler(settings).compile(files)
    assert {k: a.data for k, a in fresh.artifacts.items()} == {k: a.data for k, a in second.artifacts.items()}


def test_stat_detects_edits_without_hints(tmp_path: Path, plugin_dir: Path) -> None:
    files = [_write(tmp_path, i) for i in range(3)]
    comp = Compiler(Settings(pluginDirs=[str(plugin_dir)], staticDirs=[]))
    comp.compile(files)
    files[1].write_text(files[1].read_text().replace("vlan: 2", "vlan: 4000"))
    plan = comp.compile(files)
    assert b'"id": 4000' in plan.artifacts["n1.conflist"].data


def test_broken_edit_reports_failed_source_and_network(tmp_path: Path, plugin_dir: Path) -> None:
    files = [_write(tmp_path, i) for i in range(3)]
    comp = Compiler(Settings(pluginDirs=[str(plugin_dir)], staticDirs=[]))
    out = Output(tmp_path / "out")
    out.apply(comp.compile(files))
    files[0].write_text("apiVersion: [\n")
    plan = comp.compile(files)
    assert not plan.ok and str(files[0]) in plan.failed_sources
    # A daemon keeps the last good output of what failed:
    changes = out.apply(plan, keep={"n0.conflist"})
    assert changes == [] and (tmp_path / "out" / "n0.conflist").exists()


def test_static_file_edit_is_picked_up(tmp_path: Path, plugin_dir: Path) -> None:
    static = tmp_path / "static"
    static.mkdir()
    conf = static / "s.conf"
    conf.write_text('{"cniVersion": "0.4.0", "type": "bridge", "bridge": "b1"}')
    intent = tmp_path / "i.yaml"
    intent.write_text(
        "apiVersion: netcomp.io/v1\nkind: Network\nmetadata: {name: s}\nspec: {type: static, networkID: s}\n"
    )
    comp = Compiler(Settings(pluginDirs=[str(plugin_dir)], staticDirs=[str(static)]))
    assert b'"b1"' in comp.compile([intent]).artifacts["s.conflist"].data
    assert comp.static_paths == {str(conf)}
    conf.write_text('{"cniVersion": "0.4.0", "type": "bridge", "bridge": "b2-longer"}')
    assert b'"b2-longer"' in comp.compile([intent]).artifacts["s.conflist"].data


def test_staged_temp_files_are_published_only_when_they_match(tmp_path: Path, plugin_dir: Path) -> None:
    """The Stager writes artifacts to temp files while compiling; apply() renames those that still match the
    plan and writes the rest afresh; nothing else is left behind."""
    from netcomp.compile import Artifact, Plan

    files = [_write(tmp_path, i) for i in range(40)]
    out = Output(tmp_path / "out")
    staged = out.stager()
    plan = Compiler(Settings(pluginDirs=[str(plugin_dir)], staticDirs=[])).compile(files, on_artifact=staged.offer)
    assert len(staged.staged) == 40
    # One artifact changed after it was staged: the stale temp must not be published.
    a = plan.artifacts["n3.conflist"]
    plan.artifacts["n3.conflist"] = Artifact(a.network, a.filename, a.data.replace(b"eth1", b"eth9"), a.source)
    out.apply(plan, staged=staged)
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert names == sorted(f"n{i}.conflist" for i in range(40))
    assert b"eth9" in (tmp_path / "out" / "n3.conflist").read_bytes()
    assert Output(tmp_path / "out").changes(plan) == []
    empty = Output(tmp_path / "out2")
    staged = empty.stager()
    for art in list(plan.artifacts.values())[:20]:
        staged.offer(art)
    staged.discard()
    assert list((tmp_path / "out2").iterdir()) == []
    assert Plan().ok
