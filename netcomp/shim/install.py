"""The CNI plugin as it is installed, one of two shims doing the same on the wire:

- the compiled shim (netcomp-shim.c beside this file), built with the node's C compiler: a container start pays
  well under a millisecond for it;
- the Python shim (plugin.py), behind a launcher (launcher.in) that imports it from a directory where Python keeps
  its bytecode, so that no container start compiles its source: for a node without a C compiler.

debian/rules builds the compiled shim itself, with the distribution's hardening flags and WARNINGS below (a test
keeps the two lists equal); this module builds and installs either shim anywhere else (`netcomp install-shim`,
tests, the benchmark)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
TEMPLATE = HERE / "launcher.in"
SHIM = HERE / "plugin.py"
SOURCE = HERE / "netcomp-shim.c"
MODULE = "netcomp_shim.py"
INTERPRETER = "/usr/bin/python3"  # the launcher's shebang

# Compiler warnings are errors wherever the compiled shim is built.
WARNINGS = (
    "-Wall",
    "-Wextra",
    "-Werror",
    "-Wpedantic",
    "-Wshadow",
    "-Wconversion",
    "-Wsign-conversion",
    "-Wvla",
    "-Wformat=2",
    "-Wstrict-prototypes",
    "-Wmissing-prototypes",
    "-Wcast-qual",
    "-Wcast-align",
    "-Wwrite-strings",
    "-Wnull-dereference",
    "-Wundef",
    "-Wimplicit-fallthrough",
    "-Wdouble-promotion",
)
STANDARD = ("-std=c11",)
# What dpkg-buildflags' hardening=+all gives the package's build, for a node's own build.
RELEASE = (
    "-O2",
    "-D_FORTIFY_SOURCE=2",
    "-fstack-protector-strong",
    "-fstack-clash-protection",
    "-fPIE",
    "-pie",
    "-Wl,-z,relro",
    "-Wl,-z,now",
)
# The tests' second build: AddressSanitizer and UndefinedBehaviorSanitizer, any report fatal.
SANITIZE = ("-O1", "-g", "-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=all")


def find_cc() -> str | None:
    """The node's C compiler (`cc` on PATH), or None."""
    return shutil.which("cc")


def build(out: Path, cc: str = "cc", flags: Sequence[str] = RELEASE) -> None:
    """Compile the shim to `out` (warnings are errors). Raises subprocess.CalledProcessError with the compiler's
    output in `stderr` (text) when it fails."""
    subprocess.run(
        [cc, *STANDARD, *flags, *WARNINGS, "-o", str(out), str(SOURCE)],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _replace(path: Path, make: Callable[[Path], object]) -> None:
    """Make `path` through a temp name beside it and rename it into place: a runtime may exec the plugin at any
    moment, and must find the old one or the new one, never half of one. The temp name is no plugin type."""
    tmp = path.parent / f".{path.name}.new-{os.getpid()}"
    try:
        make(tmp)
        tmp.chmod(0o755)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def install_compiled(plugin: Path, cc: str) -> None:
    """Build the compiled shim with `cc` and install it as `plugin` (mode 0755)."""
    plugin.parent.mkdir(parents=True, exist_ok=True)
    _replace(plugin, lambda tmp: build(tmp, cc))


def render(shim_dir: Path) -> str:
    text = TEMPLATE.read_text()
    if any(c in str(shim_dir) for c in "\"'\\\n"):
        raise ValueError(f"shim dir {shim_dir} cannot be written into the launcher")
    return text.replace("@SHIMDIR@", str(shim_dir))


def install(plugin: Path, shim_dir: Path, *, compile_now: bool = True) -> None:
    """The Python shim: write it into shim_dir (as netcomp_shim.py) and the launcher to plugin (mode 0755); with
    compile_now, byte-compile it with the launcher's interpreter, as a package's postinst would."""
    launcher = render(shim_dir)
    shim_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(SHIM, shim_dir / MODULE)
    if compile_now:
        subprocess.run(
            [INTERPRETER, "-I", "-m", "compileall", "-q", str(shim_dir)],
            check=True,
            capture_output=True,
            timeout=60,
        )
    plugin.parent.mkdir(parents=True, exist_ok=True)
    _replace(plugin, lambda tmp: tmp.write_text(launcher))
