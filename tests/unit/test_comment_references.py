"""What comments and docstrings point at exists: a rename fails this test, not a reader.

Checked in every comment and docstring of netcomp/, tests/ and bench/:
- a dotted name of netcomp's (`netcomp.host.netns.cookie`; `host.netns.cookie` from a wing's name;
  `planning.diff_edit` from a module's; `Planning.pod_annotations` from a class's) names a module, and what follows
  it names something defined in it (a function, a class, a constant, a method, an attribute an instance is given);
- a file named `*.py`, `*.c` or `*.sh` exists (a path from the repository's root, from netcomp/, from the file's
  own folder, or a name only one file has);
- a private name (`_route`) is defined in the module whose comment names it (a test's: there or in netcomp).
Dotted words that are not Python (a netcomp.yaml key, an intent's field path, a JSON key of the compiled
conflist's `netcomp` block, a domain) are told apart by NOT_PYTHON below."""

from __future__ import annotations

import ast
import importlib
import io
import re
import subprocess
import sys
import tokenize
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from tests.lab.checkout import PACKAGE, ROOT

SOURCES = sorted([*PACKAGE.rglob("*.py"), *(ROOT / "tests").rglob("*.py"), *(ROOT / "bench").rglob("*.py")])

# The first word of a dotted word that is not a Python name though it reads like one.
NOT_PYTHON = {
    "spec": "an intent's field path (spec.vlan, spec.Options.vlan)",
    "metadata": "an object's field path",
    "args": "the runtime's args in a CNI config (args.cni)",
    "kubernetes": "netcomp.yaml's kubernetes block (kubernetes.ipamGC)",
    "pool": "a thread pool (pool.submit)",
}
# What may follow `netcomp.` without being a module: JSON keys of a compiled conflist's netcomp block, the
# config file, the API group, the unit.
NETCOMP_NOT_MODULES = {"io", "yaml", "generated", "hostLink", "pool", "service", "socket", "sock", "conflist"}
FILE_SUFFIXES = {"py", "c", "sh"}
NOT_FILES = {"json", "yaml", "yml", "conflist", "conf", "sock", "service", "socket", "md", "log", "toml", "txt",
             "h", "in", "io", "d", "deb", "so", "crt", "key", "pem", "csv", "j2", "pb", "proto"}  # fmt: skip
DOTTED = re.compile(r"(?<![\w./\-@$%{:=<])([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)")
# Not after "'s " (someone else's file: nmstate's error.py).
FILE = re.compile(r"(?<![\w./-])(?<!'s )((?:[\w.-]+/)*[\w-]+\.(?:py|c|sh))\b")
PRIVATE = re.compile(r"(?<![\w.])(_[A-Za-z]\w*)")
# Files that are not in the repository by design.
NOT_HERE = {"netcomp_shim.py": "the name install-shim gives the Python shim where it installs it"}


def texts(path: Path) -> list[tuple[int, str]]:
    """The comments and docstrings of a Python file, with their line numbers."""
    src = path.read_text()
    out = [(t.start[0], t.string) for t in tokenize.generate_tokens(io.StringIO(src).readline) if t.type == 60]
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                out.append((first.lineno, first.value.value))
    return out


@cache
def modules() -> dict[str, Path]:
    out = {}
    for p in PACKAGE.rglob("*.py"):
        parts = list(p.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = p
    return out


@cache
def by_basename() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for m in modules():
        out.setdefault(m.rsplit(".", 1)[-1], []).append(m)
    return out


@cache
def classes() -> dict[str, list[str]]:
    """Class name -> the modules that define it."""
    out: dict[str, list[str]] = {}
    for m, p in modules().items():
        for node in ast.parse(p.read_text()).body:
            if isinstance(node, ast.ClassDef):
                out.setdefault(node.name, []).append(m)
    return out


@cache
def defined(path: Path) -> frozenset[str]:
    """The names a file defines: functions, classes, what it assigns (self's attributes too), what it imports."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            out.add(node.attr)
        elif isinstance(node, ast.alias):
            out.add(node.asname or node.name.rsplit(".", 1)[-1])
        elif isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, ast.keyword) and node.arg:
            out.add(node.arg)  # a library's keyword argument (the kubernetes client's _request_timeout)
    return frozenset(out)


@cache
def strings(path: Path) -> tuple[str, ...]:
    """The string constants of a file (f-strings' parts too): a name a comment names may be one (`_total`)."""
    nodes = ast.walk(ast.parse(path.read_text()))
    return tuple(n.value for n in nodes if isinstance(n, ast.Constant) and isinstance(n.value, str))


@cache
def defined_in_netcomp() -> frozenset[str]:
    return frozenset().union(*(defined(p) for p in modules().values()))


def private_problem(name: str, where: Path) -> str | None:
    """A private name (`_route`) a netcomp module's comment names is its own; a test's or a benchmark's, its own
    or netcomp's."""
    if name in sys.stdlib_module_names or name in defined(where) or any(name in t for t in strings(where)):
        return None
    if not where.is_relative_to(PACKAGE) and name in defined_in_netcomp():
        return None
    return f"{name} is not defined {'here' if where.is_relative_to(PACKAGE) else 'here nor in netcomp'}"


@cache
def instance_attributes(module: str, cls: str) -> frozenset[str]:
    """What a class's methods assign to self, and its annotated fields."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(modules()[module].read_text())):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for sub in ast.walk(node):
                if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id == "self":
                    out.add(sub.attr)
                elif isinstance(sub, ast.AnnAssign) and isinstance(sub.target, ast.Name):
                    out.add(sub.target.id)
    return frozenset(out)


def has(obj: Any, name: str) -> Any:
    """obj's attribute `name`, or (for a class) its instances' attribute; None when it has neither."""
    if hasattr(obj, name):
        return getattr(obj, name)
    for klass in getattr(obj, "__mro__", ()):
        mod = getattr(klass, "__module__", "")
        if mod in modules() and name in instance_attributes(mod, klass.__name__):
            return object()
    return None


def resolve(module: str, rest: list[str]) -> bool:
    """Whether `rest` names something in `module`; in a module that holds a class named after it (pipeline.py's
    Pipeline), the class's attributes count (`pipeline.compile` for Pipeline.compile)."""
    own = getattr(importlib.import_module(module), module.rsplit(".", 1)[-1].title(), None)
    if rest and own is not None and isinstance(own, type) and has(own, rest[0]) is not None:
        return True
    obj: Any = importlib.import_module(module)
    for i, part in enumerate(rest):
        sub = f"{module}.{'.'.join(rest[: i + 1])}"
        if sub in modules():
            obj = importlib.import_module(sub)
            continue
        got = has(obj, part)
        if got is None:
            return False
        if not isinstance(got, type) and not hasattr(got, "__dict__") and i < len(rest) - 1:
            return True  # a value's own attributes (an enum's, a dict's) are not followed
        obj = got
    return True


def problem(word: str) -> str | None:
    """Why a dotted word that names netcomp's code names nothing, or None (it resolves, or is not netcomp's)."""
    parts = word.split(".")
    if parts[-1] in NOT_FILES or parts[-1] in FILE_SUFFIXES or parts[0] in NOT_PYTHON:
        return None
    if parts[0] == "netcomp":
        if len(parts) > 1 and parts[1] in NETCOMP_NOT_MODULES:
            return None
        start, rest = "netcomp", parts[1:]
    elif f"netcomp.{parts[0]}" in modules() and (PACKAGE / parts[0]).is_dir():
        start, rest = f"netcomp.{parts[0]}", parts[1:]
    elif len(by_basename().get(parts[0], [])) == 1:
        start, rest = by_basename()[parts[0]][0], parts[1:]
    elif len(classes().get(parts[0], [])) == 1:
        start, rest = classes()[parts[0]][0], parts
    else:
        return None  # not a name of netcomp's (the stdlib's, a library's, a variable's)
    return None if resolve(start, rest) else f"{word} names nothing"


def file_problem(ref: str, where: Path) -> str | None:
    if ref in NOT_HERE:
        return None
    candidates = [ROOT / ref, PACKAGE / ref, where.parent / ref]
    if any(c.is_file() for c in candidates):
        return None
    named = [f for f in tracked() if f.endswith("/" + ref) or f == ref]
    return None if named else f"{ref}: no such file"


@cache
def tracked() -> tuple[str, ...]:
    return tuple(subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split())


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_what_comments_and_docstrings_point_at_exists(path: Path) -> None:
    found = []
    for line, text in texts(path):
        for m in DOTTED.finditer(text):
            if text[m.end() : m.end() + 1] in ("/", "-"):
                continue  # a path, a URL, a key such as cni.dev/valid-attachments, a host name
            why = problem(m.group(1))
            if why:
                found.append(f"{line}: {why}")
        for m in FILE.finditer(text):
            why = file_problem(m.group(1), path)
            if why:
                found.append(f"{line}: {why}")
        for m in PRIVATE.finditer(text):
            why = private_problem(m.group(1), path)
            if why:
                found.append(f"{line}: {why}")
    assert found == []


def test_the_check_finds_a_name_that_went() -> None:
    """The check itself: names of a module, a function and a method that are not there are found."""
    assert problem("netcomp.daemon.kubepods.PodWatch") is not None
    assert problem("host.links.ensure") is not None
    assert problem("Server._ticker") is not None
    assert problem("host.netns.cookie") is None
    assert problem("Planning.plan") is None
    assert file_problem("daemon/connections.py", PACKAGE / "x.py") is not None
    assert private_problem("_attach", PACKAGE / "delegate" / "delegator.py") is not None
    assert private_problem("_Refuse", PACKAGE / "daemon" / "server" / "http1.py") is not None
    assert private_problem("_tick", PACKAGE / "daemon" / "daemon.py") is None


INTERNAL = re.compile(r"\b(issues? #?\d+|session \d+)", re.I)


def test_no_comment_cites_an_internal_issue() -> None:
    """Comments cite what a reader can open (a spec's section, an upstream file, docs/): nothing in the repository
    resolves an issue number of our own, and history goes in the commit message."""
    found = [
        f"{path.relative_to(ROOT)}:{line}" for path in SOURCES for line, text in texts(path) if INTERNAL.search(text)
    ]
    assert found == []
