"""One jinja2 environment for every backend template: StrictUndefined, no autoescape, admin overrides first. Every
value goes through `tojson` and render.py parses the output again, so a template never makes ambiguous JSON."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from netcomp.errors import Diagnostic, IntentError, SourceLocation
from netcomp.fsutil import read_bounded

if TYPE_CHECKING:
    import jinja2

BUILTIN_DIR = Path(__file__).resolve().parent / "templates"
MAX_TEMPLATE_BYTES = 1 << 20  # a backend template is a few KiB


@functools.cache
def _loader_class() -> Callable[[Sequence[str]], jinja2.BaseLoader]:
    """jinja2's FileSystemLoader reads a template with open() and read(), whatever the path names: templates are
    read as every file netcomp reads (fsutil.read_bounded). Made when jinja2 is first imported."""
    import jinja2

    class BoundedLoader(jinja2.BaseLoader):
        def __init__(self, search: Sequence[str]) -> None:
            self.search = list(search)

        def get_source(
            self, environment: jinja2.Environment, template: str
        ) -> tuple[str, str | None, Callable[[], bool] | None]:
            pieces = jinja2.loaders.split_template_path(template)  # refuses '..'
            for d in self.search:
                path = os.path.join(d, *pieces)
                try:
                    data = read_bounded(path, MAX_TEMPLATE_BYTES)
                except FileNotFoundError:
                    continue
                return data.decode("utf-8"), path, lambda: False  # templates are reloaded by the daemon, whole
            raise jinja2.TemplateNotFound(template)

    return BoundedLoader


def _tojson(obj: Any) -> str:
    return orjson.dumps(obj).decode()


class Templates:
    """Backend templates, looked up in the override dir first, then the built-in ones. jinja2 is imported when
    templates are made: a daemon whose plan comes from the plan cache renders nothing and never imports it."""

    def __init__(self, override_dir: Path | None = None) -> None:
        import jinja2

        search = [str(d) for d in (override_dir, BUILTIN_DIR) if d is not None]
        self.override_dir = override_dir
        self.env = jinja2.Environment(
            loader=_loader_class()(search),
            undefined=jinja2.StrictUndefined,
            autoescape=False,
            keep_trailing_newline=True,
            auto_reload=False,
        )
        # tojson without HTML escaping (this is JSON for CNI, not a web page), key order kept, at C speed; the
        # compiler parses and re-serializes the output, so layout never matters.
        self.env.filters["tojson"] = _tojson
        self._cache: dict[str, jinja2.Template] = {}

    def get(self, name: str) -> jinja2.Template:
        import jinja2

        tpl = self._cache.get(name)
        if tpl is None:
            try:
                tpl = self.env.get_template(name)
            except jinja2.TemplateSyntaxError as e:
                raise IntentError(
                    [Diagnostic(f"template syntax: {e.message}", SourceLocation(e.filename or name, e.lineno, 1))]
                ) from None
            except (OSError, UnicodeDecodeError) as e:
                why = e.strerror if isinstance(e, OSError) else "not valid UTF-8"
                path = getattr(e, "filename", None) or name
                raise IntentError([Diagnostic(f"template {name}: cannot read: {why}", SourceLocation(path))]) from None
            except jinja2.TemplateNotFound:
                why = f"template {name} not found in {self.override_dir} or the built-in templates"
                raise IntentError([Diagnostic(why, SourceLocation(name))]) from None
            self._cache[name] = tpl
        return tpl

    def render(self, name: str, context: dict[str, Any]) -> str:
        import jinja2

        tpl = self.get(name)
        try:
            return tpl.render(context)
        except jinja2.TemplateError as e:
            raise IntentError([Diagnostic(f"template {name}: {e}", SourceLocation(tpl.filename or name))]) from None
