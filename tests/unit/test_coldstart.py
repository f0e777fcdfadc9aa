"""The daemon's first compile runs in a child process (compiler/coldstart.py) and hands the plan, the temp files
it staged and the compiler's memory to the daemon: the same plan and output as a compile in process, an edit
afterwards recompiling only what it touched; a child that fails means a compile in process.

Each scenario runs in a fresh interpreter: a fork is made only by a process running one thread."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.lab.checkout import ROOT

SCENARIO = textwrap.dedent(
    """
    import sys, threading
    from pathlib import Path
    from netcomp.compiler import handover
    from netcomp.compiler.compiler import Compiler
    from netcomp.compiler.output import Output
    from netcomp.compiler.pipeline import Pipeline
    from netcomp.settings import Settings

    base, plugins, mode = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    intents = base / "intents"
    files = sorted(intents.iterdir())
    settings = Settings(intentDirs=[str(intents)], pluginDirs=[plugins], staticDirs=[str(base / "static")],
                        outputDir=str(base / "out"), templateDir=str(base / "none"))
    if mode == "fail":
        handover.answer = lambda *a: b"Eno: a failure made for the test"
    if mode == "hang":
        import time
        from netcomp.compiler import coldstart
        coldstart.CHILD_TIMEOUT = 1.0
        handover.answer = lambda *a: time.sleep(3600)
    p = Pipeline(settings, offline=True, fork=True)
    plan = p.compile(stage=True)
    forked = p._compiler is None and p._handed is not None
    print("forked", forked, "threads", threading.active_count())
    if mode == "badstate":  # what an upgrade of the package under a running daemon could do to the hand-over
        p._handed = (b"not a pickle", p._handed[1])
    p.write(plan)
    fresh = Compiler(settings).compile(files)
    assert {k: a.data for k, a in plan.artifacts.items()} == {k: a.data for k, a in fresh.artifacts.items()}
    assert [d.as_dict() for d in plan.diagnostics] == [d.as_dict() for d in fresh.diagnostics]
    out = base / "out"
    assert sorted(f.name for f in out.iterdir() if not f.name.startswith(".")) == sorted(plan.artifacts)
    assert not [f for f in out.iterdir() if f.name.endswith(".netcomp-tmp")]
    for name, art in plan.artifacts.items():
        assert (out / name).read_bytes() == art.data
    # An edit: the compiler takes over the child's memory and recompiles the one file.
    edited = files[3]
    edited.write_text(edited.read_text().replace("vlan: 4", "vlan: 3999"))
    plan2 = p.compile(changed=[edited], stage=True)
    p.write(plan2)
    fresh2 = Compiler(settings).compile(files)
    assert {k: a.data for k, a in plan2.artifacts.items()} == {k: a.data for k, a in fresh2.artifacts.items()}
    assert [d.as_dict() for d in plan2.diagnostics] == [d.as_dict() for d in fresh2.diagnostics]
    assert b'"id": 3999' in (out / "n3.conflist").read_bytes()
    shared = sum(1 for k, a in plan2.artifacts.items() if a is plan.artifacts.get(k))
    print("shared", shared, "of", len(plan2.artifacts))
    """
)


def _setup(tmp_path: Path) -> None:
    intents, static = tmp_path / "intents", tmp_path / "static"
    intents.mkdir()
    static.mkdir()
    (static / "s.conf").write_text('{"cniVersion": "0.4.0", "type": "bridge", "bridge": "b1"}')
    for i in range(12):
        (intents / f"n{i:02d}.yaml").write_text(
            f"apiVersion: netcomp.io/v1\nkind: Network\nmetadata: {{name: n{i}}}\n"
            f"spec: {{type: macvlan, hostDevice: eth1, vlan: {i + 1}, ipam: {{type: host-local, "
            f"subnet: 10.0.{i}.0/24}}}}\n"
        )
    (intents / "z-static.yaml").write_text(
        "apiVersion: netcomp.io/v1\nkind: Network\nmetadata: {name: s}\nspec: {type: static, networkID: s}\n"
    )
    # Two intents that clash (a finding on each side) and one that is broken.
    (intents / "z-clash.yaml").write_text(
        "apiVersion: netcomp.io/v1\nkind: Network\nmetadata: {name: n0}\nspec: {type: macvlan, hostDevice: eth2}\n"
    )
    (intents / "z-broken.yaml").write_text("apiVersion: netcomp.io/v1\nkind: Network\nmetadata: {name: [\n")


def _run(tmp_path: Path, plugin_dir: Path, mode: str) -> str:
    script = tmp_path / "scenario.py"
    script.write_text(SCENARIO)
    p = subprocess.run(
        [sys.executable, str(script), str(tmp_path), str(plugin_dir), mode],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout + p.stderr


def test_a_cold_compile_in_a_child_is_the_same_compile(tmp_path: Path, plugin_dir: Path) -> None:
    _setup(tmp_path)
    out = _run(tmp_path, plugin_dir, "ok")
    assert "forked True threads 1" in out
    assert "shared 11 of 12" in out  # n0 is defined twice; the edited one is new, the others the child's


TENANT_SCENARIO = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from netcomp.compiler.pipeline import Pipeline
    from netcomp.settings import Settings

    base, plugins = Path(sys.argv[1]), sys.argv[2]
    settings = Settings(intentDirs=[str(base / "intents")], pluginDirs=[plugins], staticDirs=[],
                        outputDir=str(base / "out"), templateDir=str(base / "none"))
    claims = []

    def claim(network, uid, profiles):
        claims.append((network, os.getpid()))
        return profiles[0], 1000

    p = Pipeline(settings, offline=True, fork=True)
    p.claim_ids = claim
    plan = p.compile(stage=True)
    p.write(plan)
    print("forked", p._handed is not None, "claims", claims == [("team-a/internal", os.getpid())])
    print("tenants", plan.tenant_networks, sorted(plan.artifacts))
    """
)


def test_tenant_networks_are_compiled_in_the_daemon(tmp_path: Path, plugin_dir: Path) -> None:
    """A TenantNetwork's id is claimed through the daemon's store and its document kept whole: the child hands
    the first compile back to the daemon, which claims once, in its own process."""
    intents = tmp_path / "intents"
    intents.mkdir()
    (intents / "00-tconf.yaml").write_text(
        "apiVersion: danm.k8s.io/v1\nkind: TenantConfig\nmetadata: {name: tconf}\n"
        'hostDevices:\n- {name: ens4, vniType: vlan, vniRange: "1000-1001"}\n'
    )
    (intents / "10-internal.yaml").write_text(
        "apiVersion: danm.k8s.io/v1\nkind: TenantNetwork\nmetadata: {name: internal, namespace: team-a}\n"
        "spec: {NetworkID: internal, NetworkType: ipvlan, Options: {host_device: ens4, cidr: 10.5.0.0/24}}\n"
    )
    script = tmp_path / "scenario.py"
    script.write_text(TENANT_SCENARIO)
    p = subprocess.run(
        [sys.executable, str(script), str(tmp_path), str(plugin_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "forked False claims True" in p.stdout
    assert "tenants {'team-a/internal': ''} ['team-a.internal.conflist']" in p.stdout
    assert "failed" not in p.stderr  # handed back, not a failure
    assert sorted(f.name for f in (tmp_path / "out").iterdir() if not f.name.startswith(".")) == [
        "team-a.internal.conflist"
    ]


def test_a_child_that_hangs_is_killed_and_the_compile_done_in_process(tmp_path: Path, plugin_dir: Path) -> None:
    _setup(tmp_path)
    out = _run(tmp_path, plugin_dir, "hang")
    assert "forked False" in out
    assert "compiling in a child process took over 1 s: killed it, compiling in the daemon" in out


def test_a_hand_over_that_cannot_be_taken_means_a_full_compile(tmp_path: Path, plugin_dir: Path) -> None:
    _setup(tmp_path)
    out = _run(tmp_path, plugin_dir, "badstate")  # the scenario checks the edit's plan against a fresh compile
    assert "forked True" in out
    assert "cannot take over the first compile's memory" in out and "compiling everything" in out


def test_a_child_that_fails_means_a_compile_in_process(tmp_path: Path, plugin_dir: Path) -> None:
    _setup(tmp_path)
    out = _run(tmp_path, plugin_dir, "fail")
    assert "forked False" in out
    assert "compiling in a child process failed, compiling in the daemon: no: a failure made for the test" in out
