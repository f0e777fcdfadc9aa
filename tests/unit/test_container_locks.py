"""One container's requests served one at a time (delegate/locks.py's KeyedLocks), other containers not blocked,
and a lock freed once nobody holds or waits for it."""

from __future__ import annotations

import threading

from netcomp.delegate.locks import KeyedLocks


def test_locks_serialize_one_container_and_are_freed() -> None:
    locks = KeyedLocks()
    with locks.hold("c1"):
        lock_c1 = locks._locks["c1"][0]
        assert lock_c1.locked()  # a second request for c1 would wait on it
        with locks.hold("c2"):  # another container is not blocked
            assert locks._locks["c2"][0] is not lock_c1 and len(locks) == 2
        assert len(locks) == 1  # c2's lock is gone once nobody holds it
    assert len(locks) == 0 and not lock_c1.locked()


def test_one_container_is_served_one_request_at_a_time() -> None:
    """Many threads on one key: the critical section is never entered twice at once."""
    locks = KeyedLocks()
    inside = 0
    most = 0
    guard = threading.Lock()
    start = threading.Barrier(8)

    def worker() -> None:
        nonlocal inside, most
        start.wait()
        for _ in range(200):
            with locks.hold("c1"):
                with guard:
                    inside += 1
                    most = max(most, inside)
                with guard:
                    inside -= 1

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most == 1 and len(locks) == 0
