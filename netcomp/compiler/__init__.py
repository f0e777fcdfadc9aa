"""Intents to CNI conflists on disk: the incremental Compiler (compiler.py), rendering one intent (render.py)
through a backend (backends/) and its jinja2 template (jinja.py, templates/), the Plan it makes (plan.py), the
output dir (output.py), the plan cache (plancache.py), and the one pipeline the CLI and the daemon both run
(pipeline.py)."""
