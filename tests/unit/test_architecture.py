"""The layout holds: every module of netcomp/ belongs to a wing with a level, imports point down the levels (or
across one), and there is no import cycle anywhere, inside a level included. Imports inside functions count too:
a cycle hidden by a function-level import is still a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.lab.checkout import PACKAGE, ROOT

# The wings and the few modules at the top, by level: a module imports only from its own level or below.
LEVELS = {
    "netcomp": 0,  # the version
    "netcomp.errors": 0,
    "netcomp.paths": 0,
    "netcomp.fsutil": 0,
    "netcomp.names": 0,
    "netcomp.report": 0,
    "netcomp.libc": 0,  # every call into the C library
    "netcomp.shim": 0,  # the shim imports nothing of netcomp at all (test_shim.py)
    "netcomp.cni": 1,
    "netcomp.metrics": 1,  # the daemon's numbers: its server, its cluster side and its runner's exec count them
    "netcomp.faults": 0,  # the one seam where a test run injects faults (the chaos run)
    "netcomp.foreign": 1,  # foreign input ignored for what it claims: logged once, counted
    "netcomp.intent": 2,
    "netcomp.settings": 3,
    "netcomp.compiler": 4,
    "netcomp.kube": 1,  # the API client: calls, kubeconfig, errors, list-and-watch, label selectors
    "netcomp.host": 5,
    "netcomp.kubelet": 5,  # the kubelet's side of the node: the devices it gave a pod, device-info files
    "netcomp.ipam": 5,
    "netcomp.records": 6,  # the write-ahead record of a container's attachments, and where records live
    "netcomp.pods": 7,  # what a container or pod asks for: names, Multus's and DANM's spellings, network-status
    "netcomp.policy": 7,  # MultiNetworkPolicy: the policies read, the pods they select, a pod's nftables table
    "netcomp.delegate": 8,
    "netcomp.cluster": 9,  # the cluster's objects followed: network objects, pods, the Node, EndpointSlices, pod edits
    "netcomp.daemon": 10,
    "netcomp.doctor": 10,  # beside the daemon: it asks it (daemon/server/client.py) and checks what it needs
    "netcomp.cli": 11,
}
TOP_LIMIT = 10  # modules at the top of netcomp/, besides the wings


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def level(module: str) -> int | None:
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        lvl = LEVELS.get(".".join(parts[:n]))
        if lvl is not None:
            return lvl
    return None


def imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The netcomp modules a file imports, anywhere in it (a `from pkg import name` of a submodule counts as
    that submodule)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("netcomp"):
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                out.add(sub if sub in known else node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("netcomp"))
    return out


def graph() -> dict[str, set[str]]:
    known = modules()
    return {m: {t for t in imports(p, known) if t in known and t != m} for m, p in known.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_every_module_has_a_level() -> None:
    assert [m for m in modules() if level(m) is None] == []


def test_imports_point_down_the_levels() -> None:
    problems = []
    for m, targets in graph().items():
        mine = level(m)
        assert mine is not None
        problems += [f"{m} (L{mine}) imports {t} (L{level(t)})" for t in sorted(targets) if (level(t) or 0) > mine]
    assert problems == []


def test_no_import_cycle_anywhere() -> None:
    assert cycles(graph()) == []


def test_the_cycle_check_finds_a_cycle_inside_a_level() -> None:
    """The check itself: two modules of one wing that import each other (as intent/__init__.py and
    intent/compat.py once did, hidden by a function-level import) are a cycle."""
    g = graph()
    g["netcomp.intent.parse"] = g["netcomp.intent.parse"] | {"netcomp.intent.rules"}
    g["netcomp.intent.rules"] = g["netcomp.intent.rules"] | {"netcomp.intent.parse"}
    assert any({"netcomp.intent.parse", "netcomp.intent.rules"} <= set(c) for c in cycles(g))


def test_the_top_holds_few_modules_besides_the_wings() -> None:
    top = [p.name for p in PACKAGE.iterdir() if p.suffix == ".py" and p.name != "__init__.py"]
    assert len(top) <= TOP_LIMIT, sorted(top)


def test_no_module_is_named_like_a_stdlib_module_or_another_wings() -> None:
    """A module's name says what it holds and is its own: not a stdlib module's (a neighbour's `import select`
    gets the stdlib's while a reader thinks of ours), not another wing's (two modules named `masters` for one
    concept). A module of cli/ is named after its command (`netcomp daemon`: cli/daemon.py), which may be a
    wing's name."""
    import sys
    from collections import defaultdict

    names: dict[str, list[str]] = defaultdict(list)
    found = modules()
    wings = {m.split(".")[1] for m, path in found.items() if path.name == "__init__.py" and m.count(".") == 1}
    for m, path in found.items():
        name = m.rsplit(".", 1)[-1]
        if name in sys.stdlib_module_names:
            names[name].append(f"{m} (a stdlib module's name)")
        wing = m.split(".")[1] if m.count(".") >= 1 else ""
        if name in wings and name != wing and not m.startswith("netcomp.cli.") and path.name != "__init__.py":
            names[name].append(f"{m} (the {name}/ wing's name)")
        if path.name != "__init__.py" and path.name != "__main__.py" and not m.startswith("netcomp.cli."):
            names[name].append(m)
    assert {n: ms for n, ms in names.items() if len(ms) > 1 or any("(" in m for m in ms)} == {}


MODULE_LINES = 600  # a tripwire, not a target: a module this long holds more than one concern; split where they part
FUNCTION_LINES = 80  # a function this long does more than one thing


def test_modules_and_functions_stay_small() -> None:
    """No module of netcomp/ over MODULE_LINES lines, no function of FUNCTION_LINES lines or more (its first line
    to its last, decorators aside): a reader takes in a module whole and a function at a glance."""
    big = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        where = path.relative_to(ROOT)
        if len(text.splitlines()) > MODULE_LINES:
            big.append(f"{where}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n >= FUNCTION_LINES:
                    big.append(f"{where}:{node.lineno}: {node.name} is {n} lines")
    assert big == []


@pytest.mark.parametrize("package", sorted(p for p in PACKAGE.rglob("__init__.py")))
def test_package_faces_import_nothing_of_netcomp(package: Path) -> None:
    """A package's __init__.py imports nothing of netcomp: importing one module of a wing never runs others,
    and no import cycle can hide in a package's face."""
    assert imports(package, modules()) == set(), package


# ---------------------------------------------------------------------------------------------- one home per rule

# The calls that carry a CNI error code, and the position of the code among their arguments.
CODE_CARRIERS = {"DelegateError": 0, "ProtocolError": 0, "error_body": 0, "_error": 0, "_Refuse": 1}


def test_no_cni_error_code_is_a_bare_number() -> None:
    """Every code where an error is raised or answered is a name from netcomp/cni/codes.py."""
    found = []
    for m, path in modules().items():
        if m.startswith("netcomp.shim"):
            continue  # self-contained: its copies are checked against codes.py in test_shim.py
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            fn = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            pos = CODE_CARRIERS.get(fn)
            if pos is None or len(node.args) <= pos:
                continue
            arg = node.args[pos]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, int):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {fn}({arg.value}, ...)")
    assert found == []


@pytest.mark.parametrize(
    ("what", "pattern", "home"),
    [
        ("a CNI error code defined", r"^E_[A-Z_]+ *=|E_[A-Z_]+, E_[A-Z_]+ *=", "netcomp/cni/codes.py"),
        ("IFNAMSIZ defined", r"^IFNAMSIZ *=", "netcomp/names.py"),
        ("the CNI name pattern", r"\[A-Za-z0-9\]\[A-Za-z0-9_\.", "netcomp/names.py"),
        ("the PCI address pattern", r"\{4\}:\[0-9a-fA-F\]\{2\}", "netcomp/names.py"),
        ("the default cniVersion", r"\"1\.0\.0\"", "netcomp/cni/spec.py"),
        ("the API group of claims and blocks", r'^GROUP\b.*"netcomp\.io"', "netcomp/kube/group.py"),
        ("the netcomp.io/network and /node labels", r'"netcomp\.io/(network|node)"', "netcomp/kube/group.py"),
        ("an object's creationTimestamp read", r'"creationTimestamp"(\]|\))', "netcomp/kube/group.py"),
        ("a claim's holder as a document", r'"containerID": c\.container_id', "netcomp/ipam/store.py"),
        ("a claim's holder read back", r"pod\['namespace'\]", "netcomp/ipam/store.py"),
    ],
)
def test_each_rule_has_one_home(what: str, pattern: str, home: str) -> None:
    import re

    rx = re.compile(pattern, re.M)
    where = sorted(
        str(p.relative_to(ROOT))
        for m, p in modules().items()
        if not m.startswith("netcomp.shim") and rx.search(p.read_text())
    )
    # settings.py lists the versions a conflist may be compiled for (a pydantic Literal), the default among them.
    allowed = {home, "netcomp/settings.py"} if what == "the default cniVersion" else {home}
    assert home in where and set(where) <= allowed, (what, where)
