"""fsutil.discard: a file gone for every reader of its directory at once, unlinked after by a thread of its own;
what a crash leaves between the two is swept at the next start. Real files, no mocks."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from netcomp import fsutil
from netcomp.records.files import Records
from netcomp.records.record import Record


def test_a_discarded_file_is_gone_at_once_and_unlinked_after(tmp_path: Path) -> None:
    f = tmp_path / "a.json"
    f.write_bytes(b"{}")
    os.sync()  # its blocks on disk: the unlink that frees them is the slow one
    held = os.open(f, os.O_RDONLY)  # the inode, to see it go
    try:
        assert fsutil.discard(f)
        assert not f.exists() and [p.name for p in tmp_path.glob("*.json")] == []
        assert fsutil.settle(30)
        assert os.listdir(tmp_path) == []
        assert os.fstat(held).st_nlink == 0
    finally:
        os.close(held)
    assert not fsutil.discard(f)  # nothing there: False, nothing done


def test_a_file_discarded_while_a_request_is_served_is_unlinked_once_the_block_ends(tmp_path: Path) -> None:
    """A serving thread wraps a request and its answer in unlinks_after: the file is gone for readers at once,
    but the janitor is given it only at the block's end (its wake-up comes after the answer). Another thread's
    discard is not held by this thread's block, and the block hands its files over even when it raises."""
    f, g = tmp_path / "a.json", tmp_path / "b.json"
    f.write_bytes(b"{}")
    g.write_bytes(b"{}")
    try:
        with fsutil.unlinks_after():
            assert fsutil.discard(f) and not f.exists()
            other = threading.Thread(target=fsutil.discard, args=(g,))
            other.start()
            other.join()
            assert fsutil.settle(30)  # nothing of this block's is pending yet: the other thread's is unlinked
            assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".a.json.")] != []
            assert not [p for p in tmp_path.iterdir() if p.name.startswith(".b.json.")]
            raise KeyError("the request failed")
    except KeyError:
        pass
    assert fsutil.settle(30)
    assert os.listdir(tmp_path) == []
    f.write_bytes(b"{}")
    with fsutil.unlinks_after():
        with fsutil.unlinks_after():
            assert fsutil.discard(f)
        assert fsutil.settle(30) and os.listdir(tmp_path) != []  # the inner block's file waits for the outer's end
    assert fsutil.settle(30) and os.listdir(tmp_path) == []


def test_what_a_crash_left_discarded_is_swept_with_the_temp_files(tmp_path: Path) -> None:
    stale = [tmp_path / f".a.json.123-4{fsutil.GONE_SUFFIX}", tmp_path / f".b.json{fsutil.TMP_SUFFIX}"]
    kept = [tmp_path / "c.json", tmp_path / ".hidden", tmp_path / f"d{fsutil.GONE_SUFFIX}"]
    for p in stale + kept:
        p.write_bytes(b"x")
    fsutil.remove_stale_tmp(tmp_path)
    assert sorted(os.listdir(tmp_path)) == sorted(p.name for p in kept)


def test_a_removed_cache_entry_reads_as_none_at_once(tmp_path: Path) -> None:
    """The entry's removal (DEL's last step) is a rename: load, count and the scans see no entry from then on,
    and a new ADD of the same container writes a new one beside the one being unlinked."""
    cache = Records(tmp_path / "cache")
    e = Record("c1", "/var/run/netns/x", "eth0", "1.0.0", netns_id=(1, 2))
    e.attachments = []
    cache.save(e)
    assert cache.count() == 1
    cache.remove("c1", "eth0")
    assert cache.load("c1", "eth0") is None and cache.count() == 0 and cache.scan() == ([], [])
    cache.save(e)
    assert cache.load("c1", "eth0") is not None
    assert fsutil.settle(30)
    assert cache.count() == 1
    cache.remove("c1", "eth0")
    cache.remove("c1", "eth0")  # again: nothing there, no error
    assert fsutil.settle(30)
    assert os.listdir(tmp_path / "cache") == []


def test_a_cache_moved_by_a_reload_writes_every_entry_in_its_new_dir(tmp_path: Path) -> None:
    """A SIGHUP that changes netcomp.yaml's cacheDir sets Records.directory: saves, loads and removals follow it
    (the str the request path uses was once left pointing at the old dir)."""
    cache = Records(tmp_path / "old")
    e = Record("c1", "/var/run/netns/x", "eth0", "1.0.0", netns_id=(1, 2))
    e.attachments = []
    cache.directory = tmp_path / "new"
    cache.save(e)
    assert os.listdir(tmp_path / "new") == [cache.path("c1", "eth0").name]
    assert not (tmp_path / "old").exists()
    assert cache.path("c1", "eth0").parent == tmp_path / "new" and cache.load("c1", "eth0") is not None
    cache.remove("c1", "eth0")
    assert cache.load("c1", "eth0") is None and cache.count() == 0
