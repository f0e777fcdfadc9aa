"""The daemon's first compile, in a child process: what a cold compile of 10,000 intents allocates on its way
(documents, models, templates' output: over 100 MB at its peak) and the modules it imports (the intent models,
jinja2) never enter the daemon, which keeps only the result: the plan, the temp files the child staged, and the
compiler's memory of what it compiled, pickled, taken over (adopt) the first time the daemon compiles again,
an edit of one intent then costing what it costs after an in-process compile (issue 14).

The child is a fork(2) of the daemon, made only while the daemon runs one thread (its first compile, before
serving or watching: run.py): nothing another thread held at the fork can be held in the child. It writes its
answer to a pipe and ends with os._exit. Anything that goes wrong in it (or a fork that fails, or threads already
running) means the compile is done in process, as before: this only ever saves memory.

The child's side, and the pickling of what it hands over, are handover.py's: only the child imports the compiler.
"""

from __future__ import annotations

import logging
import os
import pickle
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from netcomp.compiler.output import Output, Stager
from netcomp.compiler.plan import Plan

if TYPE_CHECKING:
    from collections.abc import Sequence

    from netcomp.compiler.compiler import Compiler

log = logging.getLogger("netcomp.compiler")


@dataclass
class Handover:
    plan: Plan
    staged: Stager | None  # the temp files the child wrote, for Output.apply to publish
    state: bytes  # the compiler's memory (handover.adopt)


def compile_forked(
    make_compiler: Callable[[], Compiler],
    output: Output,
    files: Sequence[Path],
    *,
    stage: bool,
) -> Handover | None:
    """A full compile of `files` in a child (see the module's docstring); None when it could not be done
    there."""
    if threading.active_count() > 1:
        return None
    r, w = os.pipe2(os.O_CLOEXEC)
    try:
        pid = os.fork()
    except OSError as e:
        os.close(r)
        os.close(w)
        log.warning("cannot fork to compile (%s): compiling in the daemon", e.strerror)
        return None
    if pid == 0:  # pragma: no cover - the child; its work is checked through the parent
        code = 1
        try:
            os.close(r)
            from netcomp.compiler import handover

            data = handover.answer(make_compiler, output, files, stage)
            with open(w, "wb") as f:
                f.write(data)
            code = 0 if data.startswith(b"K") else 1
        finally:
            os._exit(code)
    os.close(w)
    with open(r, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    if data == b"D":
        log.debug("the first compile reads TenantNetworks: compiling in the daemon")
        return None
    if status != 0 or not data.startswith(b"K"):
        why = data[1:].decode(errors="replace") if data else f"it ended with wait status {status} and no answer"
        log.warning("compiling in a child process failed, compiling in the daemon: %s", why)
        return None
    plan, staged, written, state = pickle.loads(data[1:])  # from our own child, through a pipe
    stager = Stager.handed(output, staged, {name: Path(p) for name, p in written.items()}) if stage else None
    return Handover(plan, stager, state)
