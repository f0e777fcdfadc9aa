"""The watcher: a dir that does not exist yet is watched through its nearest ancestor; what happens under that
ancestor on the way to the dir is reported, the ancestor's own metadata is not."""

from __future__ import annotations

import os
from pathlib import Path

from netcomp.daemon.watch import Watcher


def test_ancestor_metadata_is_not_a_change(tmp_path: Path) -> None:
    target = tmp_path / "run" / "networks.d"
    (tmp_path / "run").mkdir()
    w = Watcher([str(target)], lambda _: None)
    try:
        os.chmod(tmp_path / "run", 0o700)  # what the daemon does to its socket's dir
        assert w._collect(200) == set()
        target.mkdir()
        assert str(target) in w._collect(500)
        w.sync()
        (target / "a.yaml").write_text("x")
        assert str(target / "a.yaml") in w._collect(500)
        os.chmod(target, 0o755)  # the watched dir's own metadata still counts
        assert str(target) in w._collect(500)
    finally:
        w.close()
