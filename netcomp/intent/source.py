"""YAML documents with a source position for every key and value. PyYAML's composer (libyaml's when present)
gives nodes with marks; we build plain data from them ourselves, to reject with a position what an intent must
never contain: duplicate keys, tabs in indentation, aliases (and so alias bombs), merge keys, non-scalar keys,
unknown tags, absurd nesting, and documents that are not mappings."""

from __future__ import annotations

import functools
import hashlib
import importlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import yaml
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from netcomp.errors import Diagnostic, IntentError, SourceLocation
from netcomp.fsutil import read_bounded, size_text

try:
    _Parser: Any = importlib.import_module("yaml.cyaml").CParser
except (ImportError, AttributeError):  # pragma: no cover - PyYAML built without libyaml
    _Parser = None


_RESOLVER = yaml.resolver.Resolver()


@functools.lru_cache(maxsize=65536)
def _resolve(kind: Any, value: Any, implicit: Any) -> Any:
    return _RESOLVER.resolve(kind, value, implicit)  # type: ignore[no-untyped-call]


def forget_scalars() -> None:
    """Empty the resolver's cache: after a large compile it holds scalars a long-lived process does not need."""
    _resolve.cache_clear()


class _MemoResolver(yaml.resolver.Resolver):
    """PyYAML's resolver tries a list of regexes per plain scalar, in Python, even under libyaml's parser. Intent
    files repeat the same keys and values thousands of times, so the answers are cached (a C-level lru_cache:
    libyaml calls this once per scalar). Only scalar resolution depends on the value; paths are not used."""

    resolve = staticmethod(_resolve)


if _Parser is not None:

    class _CLoader(_Parser, SafeConstructor, _MemoResolver):  # type: ignore[misc]
        def __init__(self, stream: str) -> None:
            _Parser.__init__(self, stream)
            SafeConstructor.__init__(self)
            _MemoResolver.__init__(self)

    _Loader: Any = _CLoader
else:  # pragma: no cover - PyYAML built without libyaml
    _Loader = yaml.SafeLoader
_constructor = SafeConstructor()
_SCALAR_TAGS = {f"tag:yaml.org,2002:{t}" for t in ("null", "bool", "int", "float", "str", "timestamp")}
_STR, _MAP, _SEQ = "tag:yaml.org,2002:str", "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"
_MERGE = "tag:yaml.org,2002:merge"
MAX_DEPTH = 64
MAX_BYTES = 16 * 1024 * 1024

PathKey = tuple[Any, ...]
Pos = tuple[int, int]  # 1-based line, column


@dataclass(slots=True)
class SourceText:
    """A file's text, kept for quoting the offending line in diagnostics. A long-lived owner (the daemon's
    compiler) releases it once the file is compiled: it is read again when a diagnostic needs it, and used only
    if the file still holds the bytes it was compiled from (their digest); else the diagnostic goes without."""

    name: str
    _text: str | None
    _lines: list[str] | None = None
    _digest: bytes | None = None
    _miss: tuple[int, ...] | None = None  # the file's stat (device, inode, size, mtime, ctime) when a read back failed

    @property
    def text(self) -> str:
        """The text; "" when released and the file no longer holds those bytes (see `lost`)."""
        if self._text is None:
            text = self._reread()
            if text is None:
                return ""  # not kept: a later diagnostic tries again
            self._text = text
        return self._text

    @property
    def lost(self) -> bool:
        """Released, and its text cannot be had again: positions in it are unknown."""
        if self._text is None:
            _ = self.text  # read back, and kept, when the file still holds those bytes
        return self._text is None

    def release(self, digest: bytes) -> None:
        """Forget the text; `digest`: sha256 of the file's bytes it was decoded from."""
        self._text, self._lines, self._digest, self._miss = None, None, digest, None

    def _reread(self) -> str | None:
        """The text read back, if the file holds the bytes it was compiled from. A file that did not is read
        again only once it changed (a stat per ask, not a read and a hash per diagnostic)."""
        try:
            st = os.stat(self.name)
            key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            if key == self._miss:
                return None
            raw = read_bounded(self.name, MAX_BYTES)
            if hashlib.sha256(raw).digest() != self._digest:
                self._miss = key
                return None
            return decode(self.name, raw).text
        except (OSError, IntentError):
            return None

    def line(self, n: int) -> str | None:
        if self._lines is None:
            text = self.text
            if self._text is None:
                return None  # lost
            self._lines = text.splitlines()
        return self._lines[n - 1] if 0 < n <= len(self._lines) else None

    def diagnostic(
        self, message: str, pos: Pos | None, severity: str = "error", notes: Sequence[str] = ()
    ) -> Diagnostic:
        line, col = pos if pos else (0, 0)
        return Diagnostic(
            message=message,
            location=SourceLocation(self.name, line, col),
            severity="warning" if severity == "warning" else "error",
            source_line=self.line(line) if line else None,
            notes=tuple(notes),
        )


@dataclass(slots=True)
class Document:
    """One YAML document: its data, and where each value and key stands in the source. Positions are found only
    when a diagnostic asks (the file is parsed again and its nodes indexed), so good intents keep no node trees.
    A released document (release()) has dropped its data too: it is built again from the text when asked for."""

    _data: dict[str, Any] | None
    source: SourceText
    index: int
    _values: dict[PathKey, Pos] | None = None
    _keys: dict[PathKey, Pos] | None = None

    @property
    def data(self) -> dict[str, Any]:
        if self._data is None:
            data = self._rebuild()
            if self.source.lost:
                return data  # {}: not kept, the file may hold its bytes again later
            self._data = data
        return self._data

    def release(self) -> None:
        """Drop the data and positions (release the source with its digest too: SourceText.release)."""
        self._data = self._values = self._keys = None

    def _rebuild(self) -> dict[str, Any]:
        try:
            for i, node in enumerate(_compose_all(self.source)):
                if i == self.index:
                    data = _Builder().build(node, 0) if node is not None else None
                    return data if isinstance(data, dict) else {}
        except (IntentError, _Reject, RecursionError):
            pass
        return {}

    @property
    def values(self) -> dict[PathKey, Pos]:
        return self._maps()[0]

    @property
    def keys(self) -> dict[PathKey, Pos]:
        return self._maps()[1]

    def _maps(self) -> tuple[dict[PathKey, Pos], dict[PathKey, Pos]]:
        if self._values is None or self._keys is None:
            values: dict[PathKey, Pos] = {}
            keys: dict[PathKey, Pos] = {}
            for i, node in enumerate(_compose_all(self.source)):
                if i == self.index and node is not None:
                    _index_node(node, (), values, keys)
                    break
            if not values and self.source.lost:
                return {}, {}  # the source is lost: no positions
            self._values, self._keys = values, keys
        return self._values, self._keys

    @property
    def start(self) -> Pos:
        """Where the document starts; (0, 0), no position, when its released source is lost."""
        values = self.values
        if () in values:
            return values[()]
        return (0, 0) if self.source.lost else (1, 1)

    def resolve(self, loc: Sequence[Any]) -> tuple[PathKey, bool]:
        return walk(self.data, loc)

    def pos(self, loc: Sequence[Any], *, key: bool = False) -> Pos:
        """Position of the value at loc (or of its key when key=True); the nearest existing ancestor otherwise."""
        path, complete = self.resolve(loc)
        if not complete and path in self.keys:
            # Something under this node is missing or wrong-shaped: point at the key that owns it.
            return self.keys[path]
        if key and path in self.keys:
            return self.keys[path]
        return self.values.get(path) or self.keys.get(path) or self.start

    def location(self, loc: Sequence[Any], *, key: bool = False) -> SourceLocation:
        line, col = self.pos(loc, key=key)
        return SourceLocation(self.source.name, line, col)

    def diagnostic(
        self,
        message: str,
        loc: Sequence[Any],
        *,
        key: bool = False,
        severity: str = "error",
        notes: Sequence[str] = (),
    ) -> Diagnostic:
        return self.source.diagnostic(message, self.pos(loc, key=key), severity, notes)


def walk(data: Any, loc: Sequence[Any]) -> tuple[PathKey, bool]:
    """Walk `loc` through `data`; components that are not there (a pydantic union tag, a missing key) are
    skipped. Returns the deepest path found and whether loc's last component was found."""
    node = data
    path: list[Any] = []
    found_last = True
    for part in loc:
        found_last = (isinstance(node, dict) and part in node) or (
            isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        )
        if found_last:
            node = node[part]
            path.append(part)
    return tuple(path), found_last


class _Reject(Exception):
    def __init__(self, message: str, node: Node | None = None, pos: Pos | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.pos = pos if pos is not None else (_pos(node) if node is not None else None)


def _pos(node: Node) -> Pos:
    m = node.start_mark
    return (m.line + 1, m.column + 1)


def _index_node(node: Node, path: PathKey, values: dict[PathKey, Pos], keys: dict[PathKey, Pos]) -> None:
    """Record the position of every value and key under node (only called for a document that is valid YAML
    for us, so it has no aliases and no complex keys)."""
    values[path] = _pos(node)
    if isinstance(node, SequenceNode):
        for i, item in enumerate(node.value):
            _index_node(item, (*path, i), values, keys)
    elif isinstance(node, MappingNode):
        for knode, vnode in node.value:
            key = _Builder.scalar(knode)
            keys[(*path, key)] = _pos(knode)
            _index_node(vnode, (*path, key), values, keys)


class _Builder:
    """Turns one composed node tree into plain data, rejecting what an intent must not contain."""

    __slots__ = ("seen",)

    def __init__(self) -> None:
        self.seen: set[int] = set()

    def build(self, node: Node, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise _Reject(f"nesting deeper than {MAX_DEPTH} levels", node)
        ident = id(node)
        if ident in self.seen:
            # The composer hands out the same node object for every alias of an anchor.
            raise _Reject("YAML aliases are not allowed in intents (write the value out)", node)
        self.seen.add(ident)
        cls = node.__class__
        if cls is ScalarNode:
            return self.scalar(node)  # type: ignore[arg-type]
        if cls is MappingNode:
            if node.tag != _MAP:
                raise _Reject(f"unsupported YAML tag {_short(node.tag)!r}", node)
            out: dict[Any, Any] = {}
            for knode, vnode in node.value:
                if knode.__class__ is not ScalarNode:
                    raise _Reject("mapping keys must be plain scalars", knode)
                if knode.tag == _MERGE:
                    raise _Reject("YAML merge keys ('<<') are not allowed in intents", knode)
                key = self.scalar(knode)
                if key in out:
                    first = next(k for k, _ in node.value if k.__class__ is ScalarNode and self.scalar(k) == key)
                    raise _Reject(f"duplicate key {key!r} (first defined at line {_pos(first)[0]})", knode)
                out[key] = self.build(vnode, depth + 1)
            return out
        if cls is SequenceNode:
            if node.tag != _SEQ:
                raise _Reject(f"unsupported YAML tag {_short(node.tag)!r}", node)
            return [self.build(item, depth + 1) for item in node.value]
        raise _Reject("unsupported YAML node", node)  # pragma: no cover

    @staticmethod
    def scalar(node: ScalarNode) -> Any:
        tag = node.tag
        if tag == _STR:
            return node.value
        if tag not in _SCALAR_TAGS:
            raise _Reject(f"unsupported YAML tag {_short(tag)!r}", node)
        try:
            return SafeConstructor.yaml_constructors[tag](_constructor, node)
        except (ConstructorError, ValueError, OverflowError) as e:
            raise _Reject(f"invalid {tag.rsplit(':', 1)[-1]} value {node.value!r}: {e}", node) from None


def _short(tag: str) -> str:
    return tag.replace("tag:yaml.org,2002:", "!!")


def _tab_indent(text: str) -> Pos | None:
    """YAML forbids tabs in indentation; libyaml's message for it is cryptic, so we find it first."""
    if "\t" not in text:
        return None
    for n, line in enumerate(text.splitlines(), 1):
        stripped = line.lstrip(" \t")
        indent = line[: len(line) - len(stripped)]
        if "\t" in indent and stripped and not stripped.startswith("#"):
            return (n, indent.index("\t") + 1)
    return None


def _first_alias(text: str, doc_index: int) -> Pos | None:
    """Where the first alias of a document is (the composer only tells us that a node was reused)."""
    n = -1
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, yaml.DocumentStartEvent):
            n += 1
        elif n == doc_index and isinstance(event, yaml.AliasEvent) and event.start_mark is not None:
            return (event.start_mark.line + 1, event.start_mark.column + 1)
    return None


def decode(name: str, raw: bytes) -> SourceText:
    if len(raw) > MAX_BYTES:
        raise IntentError([Diagnostic(f"file is larger than {size_text(MAX_BYTES)}", SourceLocation(name, 0, 0))])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        col = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        raise IntentError([Diagnostic("file is not valid UTF-8", SourceLocation(name, line, col))]) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    return SourceText(name, text)


def load_documents(name: str, raw: bytes) -> list[Document]:
    """Parse every document of a YAML stream. Raises IntentError (with all it can tell) on any problem."""
    src = decode(name, raw)
    tab = _tab_indent(src.text)
    if tab:
        raise IntentError([src.diagnostic("tab character in indentation (YAML allows only spaces)", tab)])
    docs: list[Document] = []
    diags: list[Diagnostic] = []
    for index, node in enumerate(_compose_all(src)):
        if node is None:
            continue
        builder = _Builder()
        try:
            data = builder.build(node, 0)
        except _Reject as r:
            pos = _first_alias(src.text, index) if r.message.startswith("YAML aliases") else r.pos
            diags.append(src.diagnostic(r.message, pos or r.pos))
            continue
        except RecursionError:
            diags.append(src.diagnostic(f"nesting deeper than {MAX_DEPTH} levels", _pos(node)))
            continue
        if data is None:
            continue
        if not isinstance(data, dict):
            kind = "list" if isinstance(data, list) else "scalar"
            diags.append(
                src.diagnostic(
                    f"document {index + 1} is a {kind}; an intent must be a mapping "
                    "with apiVersion, kind, metadata and spec",
                    _pos(node),
                )
            )
            continue
        docs.append(Document(data, src, index))
    if diags:
        raise IntentError(diags)
    return docs


def _compose_all(src: SourceText) -> Iterator[Node | None]:
    loader = _Loader(src.text)
    try:
        while True:
            try:
                if not loader.check_node():
                    return
                node = loader.get_node()
            except yaml.MarkedYAMLError as e:
                mark = e.problem_mark or e.context_mark
                pos = (mark.line + 1, mark.column + 1) if mark else None
                text = e.problem or e.context or "invalid YAML"
                if e.context and e.problem:
                    text = f"{e.problem} ({e.context})"
                raise IntentError([src.diagnostic(f"YAML syntax: {text}", pos)]) from None
            except yaml.YAMLError as e:
                raise IntentError([src.diagnostic(f"YAML syntax: {e}", None)]) from None
            except RecursionError:
                raise IntentError([src.diagnostic(f"nesting deeper than {MAX_DEPTH} levels", None)]) from None
            yield node
    finally:
        loader.dispose()
