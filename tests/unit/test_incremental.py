"""The long-lived Compiler redoes only what changed, and gives the same plan a fresh compiler would."""

from __future__ import annotations

from pathlib import Path

from netcomp.compiler.compiler import Compiler
from netcomp.compiler.output import Output
from netcomp.settings import Settings

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
    before = {id(r.artifact) for f in comp._files.values() for r in f.renders}
    _write(tmp_path, 7, vlan=3999)
    second = comp.compile(files, changed=[files[7]])
    after = {id(r.artifact) for f in comp._files.values() for r in f.renders}
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
    conf.write_text('{"cniVersion": "0.4.0", "type": "bridge", "bridge": "b2-longer"}')
    assert b'"b2-longer"' in comp.compile([intent]).artifacts["s.conflist"].data


def test_staged_temp_files_are_published_only_when_they_match(tmp_path: Path, plugin_dir: Path) -> None:
    """The Stager writes artifacts to temp files while compiling; apply() renames those that still match the
    plan and writes the rest afresh; nothing else is left behind."""
    from netcomp.compiler.plan import Artifact, Plan

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


def _frozen_clock_stat(real_stat):  # type: ignore[no-untyped-def]
    """os.stat as on a filesystem whose timestamps did not tick between two writes (coarse clocks do that
    within a few ms): mtime and ctime fixed, size and inode real."""
    import os

    def fake(path, *a, **k):  # type: ignore[no-untyped-def]
        st = real_stat(path, *a, **k)
        fields = list(st)
        fields[7] = fields[8] = fields[9] = 1_700_000_000  # atime, mtime, ctime (seconds)
        return os.stat_result((*fields[:10],), {"st_atime_ns": 0, "st_mtime_ns": 1, "st_ctime_ns": 1})

    return fake


def test_same_size_rewrite_within_one_clock_tick_is_seen(tmp_path: Path, plugin_dir: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import os

    from netcomp.compiler import compiler as workspace

    f = _write(tmp_path, 1, vlan=100)
    monkeypatch.setattr(workspace.os, "stat", _frozen_clock_stat(os.stat))
    monkeypatch.setattr(workspace, "is_racy", lambda st, now: True)  # just written: racily clean
    comp = Compiler(Settings(pluginDirs=[str(plugin_dir)], staticDirs=[]))
    assert b'"id": 100' in comp.compile([f]).artifacts["n1.conflist"].data
    f.write_text(f.read_text().replace("vlan: 100", "vlan: 200"))  # same size, same inode, same (fake) times
    assert b'"id": 200' in comp.compile([f]).artifacts["n1.conflist"].data


def test_plan_cache_checks_content_of_racy_inputs(tmp_path: Path, plugin_dir: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import os

    from netcomp.compiler import plancache

    f = _write(tmp_path, 1, vlan=100)
    settings = Settings(pluginDirs=[str(plugin_dir)], staticDirs=[], templateDir="/nonexistent")
    monkeypatch.setattr(plancache.os, "stat", _frozen_clock_stat(os.stat))
    monkeypatch.setattr(plancache, "is_racy", lambda st, now: True)
    cache = plancache.PlanCache(tmp_path / "plan.cache")
    fp = plancache.fingerprint(settings, [f], offline=True)
    assert fp is not None and str(f) in fp.racy
    cache.save(fp, Compiler(settings).compile([f]))
    assert cache.load(plancache.fingerprint(settings, [f], offline=True)) is not None  # unchanged: reused
    f.write_text(f.read_text().replace("vlan: 100", "vlan: 200"))  # the stat cannot tell
    assert cache.load(plancache.fingerprint(settings, [f], offline=True)) is None  # the content can


def test_findings_on_released_intents_point_at_their_text(tmp_path: Path, plugin_dir: Path) -> None:
    """The compiler keeps only released intents (no model, no YAML data, no text): a rule that fires later on
    one of them, or names it, still gives its file, line, column and source line, exactly as a fresh compile."""
    settings = Settings(pluginDirs=[str(plugin_dir)], staticDirs=[])
    b = _write(tmp_path, 2, vlan=7)
    c = tmp_path / "c.yaml"
    c.write_text(
        "# a comment line first\napiVersion: netcomp.io/v1\nkind: Network\nmetadata:\n  name: n2\n"
        "spec: {type: macvlan, hostDevice: eth9}\n"
    )
    comp = Compiler(settings)
    assert comp.compile([b]).ok
    a = _write(tmp_path, 1, vlan=7)  # a.yaml... n1.yaml sorts first: the clash is reported on n2's file
    files = [a, b, c]
    later = comp.compile(files)
    fresh = Compiler(settings).compile(files)
    assert not later.ok
    assert [d.as_dict() for d in later.diagnostics] == [d.as_dict() for d in fresh.diagnostics]
    lines = {d.source_line for d in later.diagnostics}
    assert any(line and "vlan: 7" in line for line in lines)  # quoted from the released intent's file
    assert any(line and "name: n2" in line for line in lines)


def test_a_released_file_changed_behind_the_compilers_back_loses_only_the_quote(
    tmp_path: Path, plugin_dir: Path
) -> None:
    """A finding on a released intent whose file changed since (and no compile was told) still names the file;
    its line is not quoted from text the intent was not compiled from."""
    settings = Settings(pluginDirs=[str(plugin_dir)], staticDirs=[])
    a, b = _write(tmp_path, 1, vlan=6), _write(tmp_path, 2, vlan=7)
    comp = Compiler(settings)
    assert comp.compile([a, b]).ok
    _write(tmp_path, 1, vlan=7)
    b.write_text("# edited, and no compile was told\n" + b.read_text())
    plan = comp.compile([a, b], changed=[a])
    clash = [d for d in plan.diagnostics if "VLAN 7" in d.message]
    assert clash and clash[0].location is not None and clash[0].location.file == str(b)
    assert clash[0].source_line is None
    assert (clash[0].location.line, clash[0].location.column) == (0, 0)  # not a made-up 1:1
    assert f"{b}:1:1" not in " ".join(d.message for d in plan.diagnostics)


def test_a_released_text_is_read_back_only_when_its_file_changed(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A released text whose file no longer holds its bytes is lost: asked again, the file is not read and hashed
    again until it changes; restored to those bytes, the text is back."""
    import hashlib
    import types

    from netcomp.intent import source

    f = tmp_path / "a.yaml"
    raw = b"name: a\nvlan: 6\n"
    f.write_bytes(raw)
    st = source.SourceText(str(f), raw.decode())
    st.release(hashlib.sha256(raw).digest())
    assert st.line(2) == "vlan: 6"  # read back: the file holds the same bytes
    st.release(hashlib.sha256(raw).digest())
    f.write_bytes(b"name: a\nvlan: 7\n")
    hashed: list[bytes] = []

    def sha256(data: bytes) -> object:
        hashed.append(data)
        return hashlib.sha256(data)

    monkeypatch.setattr(source, "hashlib", types.SimpleNamespace(sha256=sha256))
    assert st.lost and st.line(2) is None
    assert st.lost and st.text == ""
    assert len(hashed) == 1  # once, not per ask
    f.write_bytes(raw)
    import os

    # A restore within the filesystem clock's tick, of the same size, looks unchanged (the quote then stays
    # missing until the file changes again): moved out of the tick here, as any later edit would be.
    os.utime(f, ns=(1, 1))
    assert not st.lost and st.line(2) == "vlan: 6"
    assert len(hashed) == 2
