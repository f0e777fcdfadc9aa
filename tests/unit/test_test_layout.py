"""Where the tests keep what they share: helpers in tests/lab/ (modules named for what they hold), fixtures in a
conftest.py, each fixture name defined once. A test module (test_*.py) imports from no other test module and from
no conftest.py: a helper one module needs and another borrows goes to tests/lab/, a fixture two modules use to the
conftest.py above both. Without a rule a test module grows into another's library, and a copied fixture drifts
from its original under the same name. A test waits through tests/lab/poll.py (or on an event: a watch, a socket's
timeout), never in a loop of its own that sleeps.

Fixtures are compared by name across the whole tree, conftest files included: a fixture of a module that overrides
one of a conftest (or a deeper conftest overriding a shallower one) is a second meaning of one name, and none is
allowed; a fixture that is not the same thing gets a name of its own, and one that is the same thing is not
written again under another."""

from __future__ import annotations

import ast
from collections import defaultdict

from tests.lab.checkout import ROOT

TESTS = ROOT / "tests"
SOURCES = sorted([*TESTS.rglob("*.py"), *(ROOT / "bench").rglob("*.py")])


def _is_test_module(name: str) -> bool:
    """Whether a dotted module name is a test module or a conftest of the tests (tests.unit.test_cli)."""
    last = name.rsplit(".", 1)[-1]
    return name.startswith("tests.") and (last.startswith("test_") or last == "conftest")


def imported(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, module) of every import in the file, at any depth; `from tests.unit import test_x` is module
    tests.unit.test_x."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
            out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return out


def fixtures(tree: ast.Module) -> list[tuple[int, str, str]]:
    """(line, name, body) of every function decorated as a pytest fixture (@pytest.fixture, @pytest.fixture(...),
    @fixture); the body as its syntax tree reads, its docstring left out."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for dec in node.decorator_list:
                target = dec.func if isinstance(dec, ast.Call) else dec
                name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
                if name == "fixture":
                    body = node.body[1:] if ast.get_docstring(node) is not None else node.body
                    out.append((node.lineno, node.name, ast.dump(ast.Module(body, []))))
    return out


def sleeping_loops(tree: ast.Module) -> list[int]:
    """The lines of every `while` loop that calls time.sleep (or a bare sleep) in its body: a poll by hand."""
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.While)
        and any(isinstance(n, ast.Call) and ast.unparse(n.func) in ("time.sleep", "sleep") for n in ast.walk(node))
    ]


def test_no_module_imports_a_test_module_or_a_conftest() -> None:
    found = []
    for path in SOURCES:
        for line, module in imported(ast.parse(path.read_text())):
            if _is_test_module(module):
                found.append(f"{path.relative_to(ROOT)}:{line}: imports {module}")
    assert found == [], "move what is shared to tests/lab/ (a helper) or a conftest.py (a fixture):\n" + "\n".join(
        found
    )


def test_every_fixture_name_is_defined_once() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for path in SOURCES:
        for line, name, _ in fixtures(ast.parse(path.read_text())):
            where[name].append(f"{path.relative_to(ROOT)}:{line}")
    twice = {name: places for name, places in where.items() if len(places) > 1}
    assert twice == {}, "one fixture, one name: share it from a conftest.py, or name each for what it is"


def test_no_fixture_is_another_under_a_new_name() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for path in SOURCES:
        for line, name, body in fixtures(ast.parse(path.read_text())):
            where[body].append(f"{path.relative_to(ROOT)}:{line} {name}")
    copies = [places for places in where.values() if len(places) > 1]
    assert copies == [], "one fixture, one definition: use the one a conftest.py shares"


def test_no_test_polls_by_hand() -> None:
    """poll.py is the one poll; chaos.py's loops pace the faults they inject and wait for nothing."""
    own = {TESTS / "lab" / "poll.py", TESTS / "lab" / "chaos.py"}
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sorted(TESTS.rglob("*.py"))
        if path not in own
        for line in sleeping_loops(ast.parse(path.read_text()))
    ]
    assert found == [], "wait with tests.lab.poll.until or within, not a loop that sleeps:\n" + "\n".join(found)


def test_the_checks_see_what_they_look_for() -> None:
    """The scanners themselves, on modules that break the rules."""
    tree = ast.parse(
        "import pytest\nfrom tests.integration.test_kube import kube_lab\nfrom tests.unit import test_cli\n"
        "import tests.system.conftest\nfrom tests.lab.poll import until\n"
        "def f():\n    from tests.integration.test_multus import pod\n"
        "@pytest.fixture(scope='module')\ndef api(): ...\n@pytest.fixture\ndef node(): ...\ndef helper(): ...\n"
    )
    assert sorted({m for _, m in imported(tree) if _is_test_module(m)}) == [
        "tests.integration.test_kube",
        "tests.integration.test_multus",
        "tests.system.conftest",
        "tests.unit.test_cli",
    ]
    assert [name for _, name, _ in fixtures(tree)] == ["api", "node"]
    twins = '@pytest.fixture\ndef a():\n    """A."""\n    return 1\n@pytest.fixture\ndef b():\n    return 1\n'
    assert len({body for _, _, body in fixtures(ast.parse(twins))}) == 1
    loops = "import time\nwhile not done():\n    time.sleep(0.1)\nwhile True:\n    break\nfor i in x:\n    sleep(1)\n"
    assert sleeping_loops(ast.parse(loops)) == [2]
