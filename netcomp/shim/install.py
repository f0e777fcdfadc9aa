"""The CNI plugin as it is installed: a launcher (launcher.in beside this file) that imports the shim from a
directory where Python keeps its bytecode, so that no container start compiles the shim's source.

debian/rules makes the same two files with sed; this module makes them anywhere else (the benchmark, tests,
a node installed without the package)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
TEMPLATE = HERE / "launcher.in"
SHIM = HERE / "plugin.py"
MODULE = "netcomp_shim.py"
INTERPRETER = "/usr/bin/python3"  # the launcher's shebang


def render(shim_dir: Path) -> str:
    text = TEMPLATE.read_text()
    if any(c in str(shim_dir) for c in "\"'\\\n"):
        raise ValueError(f"shim dir {shim_dir} cannot be written into the launcher")
    return text.replace("@SHIMDIR@", str(shim_dir))


def install(plugin: Path, shim_dir: Path, *, compile_now: bool = True) -> None:
    """Write the shim into shim_dir (as netcomp_shim.py) and the launcher to plugin (mode 0755); with
    compile_now, byte-compile it with the launcher's interpreter, as the package's postinst does."""
    shim_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(SHIM, shim_dir / MODULE)
    plugin.parent.mkdir(parents=True, exist_ok=True)
    plugin.write_text(render(shim_dir))
    plugin.chmod(0o755)
    if compile_now:
        subprocess.run(
            [INTERPRETER, "-I", "-m", "compileall", "-q", str(shim_dir)],
            check=True,
            capture_output=True,
            timeout=60,
        )
