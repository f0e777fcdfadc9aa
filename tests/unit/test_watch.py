"""The watcher: a dir that does not exist yet is watched through its nearest ancestor; what happens under that
ancestor on the way to the dir is reported, the ancestor's own metadata is not."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

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
        w.ino.close()


def test_a_dir_on_the_way_counts_only_with_the_watched_dir_under_it(tmp_path: Path) -> None:
    target = tmp_path / "run" / "netcomp" / "networks.d"
    w = Watcher([str(target)], lambda _: None)
    try:
        (tmp_path / "run" / "netcomp").mkdir(parents=True)  # the socket's dir: no intent dir in it
        assert w.batch(w._collect(200)) == []
        target.mkdir()
        (target / "a.yaml").write_text("x")  # made before a watch on target can exist: seen through the dir
        told = w.batch(w._collect(200))
        assert told and told[0] and str(target) in told[0]
    finally:
        w.ino.close()


def test_a_layer_that_is_a_file_is_seen_when_it_appears_with_its_dir(tmp_path: Path) -> None:
    """An intent layer may be one file: made with its dir before the dir is watched, it is still reported."""
    layer = tmp_path / "sub" / "extra.yaml"
    w = Watcher([str(layer)], lambda _: None)
    try:
        layer.parent.mkdir()
        layer.write_text("x")
        told = w.batch(w._collect(200))
        assert told == [{str(layer.parent)}]
        layer.write_text("y")  # the dir is watched now: the file itself
        assert w.batch(w._collect(200)) == [{str(layer)}]
    finally:
        w.ino.close()


def test_an_overflowed_queue_means_everything_is_looked_at(tmp_path: Path) -> None:
    """Events lost to a full inotify queue (nobody read them: a start's first compile) would lose an edit; after
    an overflow on_change is told None (the daemon compiles everything)."""
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    if limit > 200_000:
        pytest.skip(f"fs.inotify.max_queued_events is {limit}: too many files to make")
    d = tmp_path / "networks.d"
    d.mkdir()
    w = Watcher([str(d)], lambda _: None)
    try:
        for i in range(limit // 2 + 100):  # CREATE and CLOSE_WRITE each
            (d / f"n{i}.yaml").touch()
        collected = set()
        while more := w._collect(100):
            collected |= more
        assert w.batch(collected) == [None]
        (d / "n1.yaml").write_text("again")
        assert w.batch(w._collect(200)) == [{str(d / "n1.yaml")}]  # and back to paths
    finally:
        w.ino.close()
