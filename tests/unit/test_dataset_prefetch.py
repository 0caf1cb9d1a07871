"""Prefetching iterators release their producer thread when done with, dropped or failed."""

import gc
import threading
import time

import pytest

from hpcdist.data import Dataset
from hpcdist.data.prefetch import THREAD_NAME

WAIT_SECONDS = 5.0


def producers() -> int:
    return sum(1 for t in threading.enumerate() if t.name == THREAD_NAME)


def settle(expected: int) -> int:
    """Count producer threads until there are ``expected`` or the wait runs out."""
    deadline = time.monotonic() + WAIT_SECONDS
    while producers() != expected and time.monotonic() < deadline:
        time.sleep(0.01)
    return producers()


@pytest.fixture(autouse=True)
def no_producers_before():
    assert settle(0) == 0, "producer threads left over from an earlier test"


def test_three_abandoned_iterators_leave_no_thread():
    pulled = []

    def record(x):
        pulled.append(int(x))
        return x

    # An infinite source: each producer fills its queue and blocks on it.
    iterators = [iter(Dataset.range(10**9).map(record).prefetch(2)) for _ in range(3)]
    assert [next(it) for it in iterators] == [0, 0, 0]
    assert settle(3) == 3
    # Each producer pulls the element taken, two queued and one it waits to queue.
    full = 3 * (1 + 2 + 1)
    deadline = time.monotonic() + WAIT_SECONDS
    while len(pulled) < full and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(pulled) == full, sorted(pulled)
    del iterators
    gc.collect()
    assert settle(0) == 0
    # Draining the queue wakes a waiting producer; it must stop without pulling more.
    assert len(pulled) == full, sorted(pulled)


def test_abandoned_nested_prefetch_leaves_no_thread():
    it = iter(Dataset.range(10**9).prefetch(1).map(lambda x: x + 1).prefetch(3))
    assert next(it) == 1
    assert settle(2) == 2
    del it
    gc.collect()
    assert settle(0) == 0


def test_consumed_iterator_leaves_no_thread_and_stays_exhausted():
    it = iter(Dataset.range(5).prefetch(2))
    assert list(it) == [0, 1, 2, 3, 4]
    assert settle(0) == 0
    with pytest.raises(StopIteration):
        next(it)


def test_failed_iterator_leaves_no_thread():
    def boom(x):
        if x == 2:
            raise RuntimeError("bad element 2")
        return x

    it = iter(Dataset.range(10).map(boom).prefetch(4))
    assert [next(it), next(it)] == [0, 1]
    with pytest.raises(RuntimeError, match="bad element 2"):
        next(it)
    assert settle(0) == 0
    with pytest.raises(StopIteration):
        next(it)


def test_dropped_iterator_after_end_is_queued_leaves_no_thread():
    # The source ends while the queue is full and nobody reads it any more.
    it = iter(Dataset.range(3).prefetch(1))
    assert next(it) == 0
    del it
    gc.collect()
    assert settle(0) == 0
