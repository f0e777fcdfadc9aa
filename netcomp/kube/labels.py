"""Label selectors, read and matched as Kubernetes does: the text form `kubectl -l` and the API's labelSelector
parameter take (apimachinery's pkg/labels/selector.go: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`,
`k`, `!k`, `k>1`, `k<1`, joined by commas, all of them to hold), and the map a Service's spec.selector (or DANM's
danm.k8s.io/selector) is: every key present with that value."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from netcomp.names import label_key_problem, label_value_problem

_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_EXISTS = re.compile(rf"\s*(!?)\s*({_KEY})\s*")
_EQUALS = re.compile(rf"\s*({_KEY})\s*(==|=|!=)\s*([^\s,()=!]*)\s*")
_SET = re.compile(rf"\s*({_KEY})\s+(in|notin)\s*\(([^()]*)\)\s*")
_ORDER = re.compile(rf"\s*({_KEY})\s*([<>])\s*(-?[0-9]+)\s*")


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # in, notin, exists, !exists, gt, lt
    values: frozenset[str] = frozenset()

    def holds(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.op == "in":
            return value is not None and value in self.values
        if self.op == "notin":
            return value is None or value not in self.values
        if self.op == "exists":
            return value is not None
        if self.op == "!exists":
            return value is None
        try:  # gt, lt: a value that is no integer never matches (apimachinery's Requirement.Matches)
            have, bound = int(value or ""), int(next(iter(self.values)))
        except ValueError:
            return False
        return have > bound if self.op == "gt" else have < bound


@dataclass(frozen=True)
class Selector:
    requirements: tuple[Requirement, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.holds(labels) for r in self.requirements)

    @property
    def empty(self) -> bool:
        return not self.requirements


def from_map(labels: Mapping[str, str]) -> Selector:
    """A map selector (every key with its value). ValueError naming a key or value that no label can have."""
    reqs = []
    for k, v in sorted(labels.items()):
        problem = label_key_problem(k) or label_value_problem(v)
        if problem:
            raise ValueError(problem)
        reqs.append(Requirement(k, "in", frozenset([v])))
    return Selector(tuple(reqs))


def parse(text: str) -> Selector:
    """The text form; ValueError saying which requirement is not one."""
    reqs = [_requirement(part) for part in _split(text)] if text.strip() else []
    return Selector(tuple(reqs))


def _split(text: str) -> list[str]:
    """At the commas outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        depth += {"(": 1, ")": -1}.get(c, 0)
        if depth < 0:
            raise ValueError(f"unbalanced ')' at character {i + 1}")
        if c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError("unbalanced '('")
    return [*parts, text[start:]]


def _requirement(part: str) -> Requirement:
    if m := _SET.fullmatch(part):
        values = [v.strip() for v in m[3].split(",")]
        return _checked(Requirement(m[1], m[2], frozenset(values)), part)
    if m := _ORDER.fullmatch(part):
        return _checked(Requirement(m[1], "gt" if m[2] == ">" else "lt", frozenset([m[3]])), part, values=False)
    if m := _EQUALS.fullmatch(part):
        return _checked(Requirement(m[1], "notin" if m[2] == "!=" else "in", frozenset([m[3]])), part)
    if m := _EXISTS.fullmatch(part):
        return _checked(Requirement(m[2], "!exists" if m[1] else "exists"), part)
    raise ValueError(f"{part.strip()!r} is not a requirement (k=v, k!=v, k in (a,b), k notin (a,b), k, !k, k>n)")


def _checked(r: Requirement, part: str, *, values: bool = True) -> Requirement:
    problem = label_key_problem(r.key) or next(
        (p for v in (r.values if values else ()) if (p := label_value_problem(v))), None
    )
    if problem:
        raise ValueError(f"{part.strip()!r}: {problem}")
    return r
