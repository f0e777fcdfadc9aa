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


def test_a_dir_on_the_way_counts_only_with_the_watched_dir_under_it(tmp_path: Path) -> None:
    import threading

    target = tmp_path / "run" / "netcomp" / "networks.d"
    seen: list[set[str]] = []
    w = Watcher([str(target)], seen.append, quiet=0.05, longest=0.2)
    stop = threading.Event()
    t = threading.Thread(target=w.run, args=(stop,))
    t.start()
    try:
        (tmp_path / "run" / "netcomp").mkdir(parents=True)  # the socket's dir: no intent dir in it
        import time

        time.sleep(1.2)
        assert seen == []
        target.mkdir()
        (target / "a.yaml").write_text("x")
        deadline = time.monotonic() + 5
        while not seen and time.monotonic() < deadline:
            time.sleep(0.05)
        assert seen and any(p.startswith(str(tmp_path / "run")) for p in seen[0])
    finally:
        stop.set()
        t.join()
        w.close()
