"""Label selectors, read and matched as Kubernetes does (apimachinery's pkg/labels/selector.go): the text form
`kubectl -l` and the API's labelSelector take, and the map a Service's spec.selector (or DANM's selector) is. The
text is foreign input: it is read by a scanner that looks at each character once, never by a regex that can
backtrack, and refused past MAX_LENGTH."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from netcomp.names import label_key_problem, label_value_problem, quoted

# Kubernetes bounds the parts (a key's prefix 253, its name and a value 63), not the whole: 8 KiB holds 25
# requirements with the longest keys, more than any Service asks, and keeps a refused one cheap to say why.
MAX_LENGTH = 8192
MAX_REQUIREMENTS = 64
_MAX_KEY = 253 + 1 + 63  # prefix/name
_SPECIAL = frozenset("!=(),<>")
_OPS = {"=": "in", "==": "in", "!=": "notin", "in": "in", "notin": "notin", ">": "gt", "<": "lt"}
_DEPTH = {"(": 1, ")": -1}
_SHAPES = "k=v, k!=v, k in (a,b), k notin (a,b), k, !k, k>n"


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    op: str  # in, notin, exists, !exists, gt, lt
    values: frozenset[str] = frozenset()

    def holds(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.op in ("in", "notin"):
            return (value is not None and value in self.values) == (self.op == "in")
        if self.op in ("exists", "!exists"):
            return (value is not None) == (self.op == "exists")
        try:  # gt, lt: a value that is no integer never matches (apimachinery's Requirement.Matches)
            have, bound = int(value or ""), int(next(iter(self.values)))
        except ValueError:
            return False
        return have > bound if self.op == "gt" else have < bound


@dataclass(frozen=True, slots=True)
class Selector:
    requirements: tuple[Requirement, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.holds(labels) for r in self.requirements)

    @property
    def empty(self) -> bool:
        return not self.requirements


def from_map(labels: Mapping[str, str]) -> Selector:
    """A map selector (every key with its value). ValueError naming a key or value that no label can have."""
    if len(labels) > MAX_REQUIREMENTS:
        raise ValueError(f"{len(labels)} labels: a selector holds at most {MAX_REQUIREMENTS}")
    reqs = []
    for k, v in sorted(labels.items()):
        if problem := label_key_problem(k) or label_value_problem(v):
            raise ValueError(problem)
        reqs.append(Requirement(k, "in", frozenset([v])))
    return Selector(tuple(reqs))


def parse(text: str) -> Selector:
    """The text form; ValueError saying which requirement is not one, and why. Linear in the text's length."""
    if len(text) > MAX_LENGTH:
        raise ValueError(f"{len(text)} characters: a selector is at most {MAX_LENGTH}")
    parts = _split(text) if not text.isspace() and text else []
    if len(parts) > MAX_REQUIREMENTS:
        raise ValueError(f"{len(parts)} requirements: a selector holds at most {MAX_REQUIREMENTS}")
    return Selector(tuple(_requirement(part) for part in parts))


def _split(text: str) -> list[str]:
    """At the commas outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        depth += _DEPTH.get(c, 0)
        if depth < 0:
            raise ValueError(f"unbalanced ')' at character {i + 1}")
        if c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError("unbalanced '('")
    return [*parts, text[start:]]


def _tokens(part: str) -> Iterator[str]:
    """apimachinery's lexer: whitespace separates; `!=`, `==` and the single specials are operators; any other
    run of characters is an identifier. Each character is looked at once."""
    i, n = 0, len(part)
    while i < n:
        c = part[i]
        if c.isspace():
            i += 1
        elif c in _SPECIAL:
            two = part[i : i + 2]
            i += 2 if two in ("!=", "==") else 1
            yield two if two in ("!=", "==") else c
        else:
            start = i
            while i < n and not part[i].isspace() and part[i] not in _SPECIAL:
                i += 1
            yield part[start:i]


def _requirement(part: str) -> Requirement:
    toks = list(_tokens(part))
    shown = quoted(part.strip())  # bounded: a refusal stays one line
    if not toks or (_is_op(toks[0]) and toks[0] != "!"):
        raise ValueError(f"{shown} is not a requirement ({_SHAPES})")
    if toks[0] == "!":
        if len(toks) != 2 or _is_op(toks[1]):
            raise ValueError(f"{shown} is not a requirement: '!' takes one key ({_SHAPES})")
        return _checked(Requirement(toks[1], "!exists"), shown)
    key, rest = toks[0], toks[1:]
    if not rest:
        return _checked(Requirement(key, "exists"), shown)
    op = _OPS.get(rest[0])
    if op is None:
        raise ValueError(f"{shown} is not a requirement ({_SHAPES})")
    if rest[0] in ("in", "notin"):
        return _checked(Requirement(key, op, _set_values(rest[1:], shown)), shown)
    if len(rest) > 2 or any(_is_op(t) for t in rest[1:]):
        raise ValueError(f"{shown} is not a requirement: one value after {rest[0]!r} ({_SHAPES})")
    value = rest[1] if len(rest) == 2 else ""
    if op in ("gt", "lt"):
        if not _integer(value):
            raise ValueError(f"{shown} is not a requirement: {rest[0]!r} takes an integer")
        return _checked(Requirement(key, op, frozenset([value])), shown, values=False)
    return _checked(Requirement(key, op, frozenset([value])), shown)


def _set_values(toks: list[str], shown: str) -> frozenset[str]:
    """The values of `(a, b)`: identifiers between commas, an empty one the empty value (as apimachinery)."""
    if len(toks) < 2 or toks[0] != "(" or toks[-1] != ")":
        raise ValueError(f"{shown} is not a requirement: a set is (a,b) ({_SHAPES})")
    values, want_value = [], True
    for t in toks[1:-1]:
        if t == ",":
            if want_value:
                values.append("")
            want_value = True
        elif want_value and not _is_op(t) and t not in ("(", ")"):
            values.append(t)
            want_value = False
        else:
            raise ValueError(f"{shown} is not a requirement: a set's values are separated by commas")
    if want_value:
        values.append("")
    return frozenset(values)


def _is_op(tok: str) -> bool:
    return tok in _SPECIAL or tok in ("!=", "==")


def _integer(value: str) -> bool:
    digits = value[1:] if value.startswith("-") else value
    return 0 < len(digits) <= 18 and digits.isascii() and digits.isdigit()


def _checked(r: Requirement, shown: str, *, values: bool = True) -> Requirement:
    if len(r.key) > _MAX_KEY:  # said before the key is quoted whole
        raise ValueError(f"{shown} is not a requirement: a label key is at most {_MAX_KEY} characters")
    problem = label_key_problem(r.key) or next(
        (p for v in (r.values if values else ()) if (p := label_value_problem(v))), None
    )
    if problem:
        raise ValueError(f"{shown} is not a requirement: {problem}")
    return r


_EXPRESSION_OPS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!exists"}


def from_label_selector(obj: object) -> Selector:
    """A LabelSelector object (matchLabels and matchExpressions: In, NotIn, Exists, DoesNotExist), as a
    NetworkPolicy's podSelector or namespaceSelector is; {} selects everything. ValueError saying what is not
    one (apimachinery's LabelSelectorAsSelector refuses the same)."""
    if not isinstance(obj, dict):
        raise ValueError("a label selector is an object with matchLabels and matchExpressions")
    labels, exprs = obj.get("matchLabels") or {}, obj.get("matchExpressions") or []
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        raise ValueError("matchLabels is a map of strings")
    if not isinstance(exprs, list) or len(exprs) + len(labels) > MAX_REQUIREMENTS:
        raise ValueError(f"matchExpressions is a list, and a selector holds at most {MAX_REQUIREMENTS} requirements")
    reqs = list(from_map(labels).requirements)
    for i, e in enumerate(exprs):
        op = _EXPRESSION_OPS.get(str(e.get("operator"))) if isinstance(e, dict) else None
        values = e.get("values") or [] if isinstance(e, dict) else []
        if op is None or not isinstance(e.get("key"), str) or not isinstance(values, list):
            raise ValueError(f"matchExpressions[{i}] is not a key with an operator of {', '.join(_EXPRESSION_OPS)}")
        if not all(isinstance(v, str) for v in values) or (op in ("in", "notin")) != bool(values):
            raise ValueError(f"matchExpressions[{i}]: In and NotIn take values (strings), Exists and DoesNotExist none")
        reqs.append(_checked(Requirement(e["key"], op, frozenset(values)), f"matchExpressions[{i}]"))
    return Selector(tuple(reqs))
