"""Every file netcomp reads is read through one bounded reader (fsutil.read_bounded): what it refuses, and a check
that no module reads a file any other way."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from netcomp.fsutil import read_bounded
from tests.lab.checkout import ROOT


def test_a_regular_file_within_the_limit_is_read(tmp_path: Path) -> None:
    f = tmp_path / "a"
    f.write_bytes(b"x" * 100)
    assert read_bounded(f, 100) == b"x" * 100
    assert read_bounded("/proc/self/status", 1 << 20).startswith(b"Name:")  # procfs: size 0, read to its end


def test_a_file_over_the_limit_is_refused_by_its_size_unread(tmp_path: Path) -> None:
    f = tmp_path / "big"
    with open(f, "wb") as w:
        w.truncate(2 << 30)  # sparse
    with pytest.raises(OSError) as e:
        read_bounded(f, 16 << 20)
    assert e.value.strerror == "larger than 16 MiB, the most netcomp reads of it" and e.value.filename == str(f)
    small = tmp_path / "small"
    small.write_bytes(b"x" * 101)
    with pytest.raises(OSError, match="larger than 100 bytes"):
        read_bounded(small, 100)


def test_devices_and_symlinks_to_them_are_refused(tmp_path: Path) -> None:
    link = tmp_path / "zero"
    link.symlink_to("/dev/zero")
    for p in ("/dev/zero", link):
        with pytest.raises(OSError, match="not a regular file: a character device"):
            read_bounded(p, 1 << 20)
    with pytest.raises(OSError, match="not a regular file: a directory"):
        read_bounded(tmp_path, 1 << 20)


def test_a_symlink_is_refused_where_none_is_expected(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"data")
    link = tmp_path / "link"
    link.symlink_to(f)
    assert read_bounded(link, 100) == b"data"
    with pytest.raises(OSError, match="not a regular file: a symbolic link"):
        read_bounded(link, 100, follow=False)


def test_a_missing_file_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_bounded(tmp_path / "none", 100)


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    """In a child interpreter: a reader that blocked on the FIFO would hang it (the child's timeout only ends a
    test that failed)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    code = (
        "import sys\nfrom netcomp.fsutil import read_bounded\n"
        "try:\n    read_bounded(sys.argv[1], 100)\nexcept OSError as e:\n    print(e.strerror)\n"
    )
    p = subprocess.run([sys.executable, "-c", code, str(fifo)], capture_output=True, text=True, timeout=60)
    assert p.stdout.strip() == "not a regular file: a FIFO", p.stderr


# How a module reads a file other than through the reader: pathlib's readers, the builtin open() (os.open is
# how namespaces, pipes and the writers open what they open), jinja2's own file loader.
_READS = re.compile(r"\.read_bytes\(|\.read_text\(|(?<![\w.])open\(|\bio\.open\(|FileSystemLoader\(")
# The shim imports nothing of netcomp (it runs as `python3 -I -S`); coldstart's open() is the write end of a pipe.
_EXEMPT = {"netcomp/fsutil.py", "netcomp/shim/plugin.py", "netcomp/shim/install.py"}


def test_no_module_reads_a_file_but_through_the_bounded_reader() -> None:
    found = []
    for path in sorted((ROOT / "netcomp").rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        if rel in _EXEMPT:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if _READS.search(code) and not re.search(r"open\([^)]*\"wb?\"", code) and '"""' not in line:
                found.append(f"{rel}:{n}: {line.strip()}")
    assert found == [], "read these through netcomp.fsutil.read_bounded:\n" + "\n".join(found)


def test_a_fifo_or_symlink_at_a_temp_name_fails_a_write_without_blocking(tmp_path: Path) -> None:
    """What netcomp writes goes through a temp name beside the target: a FIFO planted there fails the write
    (ENXIO) instead of blocking it, a symlink (ELOOP) instead of being written through. In a child interpreter,
    for the same reason as above."""
    os.mkfifo(tmp_path / ".a.netcomp-tmp")
    (tmp_path / ".b.netcomp-tmp").symlink_to(tmp_path / "elsewhere")
    code = (
        "import sys\nfrom netcomp.fsutil import atomic_write\n"
        "for name in ('a', 'b'):\n"
        "    try:\n        atomic_write(sys.argv[1] + '/' + name, b'x')\n"
        "    except OSError as e:\n        print(name, e.errno)\n"
    )
    p = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert p.stdout.split("\n")[:2] == ["a 6", "b 40"], p.stdout + p.stderr
    assert not (tmp_path / "elsewhere").exists()
