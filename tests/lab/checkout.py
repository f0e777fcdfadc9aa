"""Where the tests find the checkout's own files (its root, the package, the packaged examples) and its netcomp
command (the entry point installed beside the Python that runs the tests), how they copy the working tree, and
whether golden files are written anew (NETCOMP_UPDATE_GOLDEN=1)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "netcomp"
EXAMPLES = ROOT / "packaging" / "examples"
NETCOMP = str(Path(sys.executable).parent / "netcomp")
UPDATE_GOLDEN = os.environ.get("NETCOMP_UPDATE_GOLDEN") == "1"


def checkout_copy(work: Path) -> Path:
    """The working tree as it is (tests also run before a commit), without caches and build output."""
    junk = shutil.ignore_patterns(".git", ".venv", "__pycache__", ".*_cache", ".hypothesis", "*.egg-info", "build")
    shutil.copytree(ROOT, work / "netcomp", symlinks=True, ignore=junk)
    shutil.rmtree(work / "netcomp" / "debian" / "netcomp", ignore_errors=True)
    return work / "netcomp"
