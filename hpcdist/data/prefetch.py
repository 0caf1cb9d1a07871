"""`Prefetcher`: an iterator that a background thread keeps ahead of its consumer.

The producer thread holds only the source iterator, the bounded queue and a stop event,
never the `Prefetcher` itself, so a consumer that drops the iterator lets it be collected.
A `weakref.finalize` on the consumer side then sets the stop event and drains the queue:
a producer blocked on a full queue wakes up at once, sees the event and exits, and the
source is released with it. The thread is a daemon, so a producer stuck inside the
source's own ``next`` (a generator that never returns) cannot keep the interpreter alive.
"""

from __future__ import annotations

import queue
import threading
import weakref
from collections.abc import Iterator
from typing import Any

__all__ = ["THREAD_NAME", "Prefetcher"]

THREAD_NAME = "hpcdist-prefetch"
"""Name of every producer thread (tests count live producers by it)."""

_END = object()
_POLL_SECONDS = 0.1  # a blocked put re-checks the stop event this often, drained or not


def _offer(slots: queue.Queue, stop: threading.Event, item: tuple[Any, Any]) -> bool:
    """Put ``item`` into ``slots`` unless ``stop`` is set; False when the producer must stop.

    Also False when ``stop`` was set while the put waited, so that a stopped producer never
    pulls one more element from its source.
    """
    while not stop.is_set():
        try:
            slots.put(item, timeout=_POLL_SECONDS)
        except queue.Full:
            continue
        return not stop.is_set()
    return False


def _produce(source: Iterator[Any], slots: queue.Queue, stop: threading.Event) -> None:
    """Thread body: move ``source``'s elements into ``slots`` until exhausted or stopped.

    The end, or the exception the source raised, is queued last for the consumer to
    re-raise in its own thread.
    """
    try:
        for element in source:
            if not _offer(slots, stop, (element, None)):
                return
        _offer(slots, stop, (_END, None))
    except BaseException as exc:  # re-raised in the consumer's thread
        _offer(slots, stop, (_END, exc))


def _release(slots: queue.Queue, stop: threading.Event) -> None:
    """Stop the producer and wake it if it waits on a full queue."""
    stop.set()
    while True:
        try:
            slots.get_nowait()
        except queue.Empty:
            return


class Prefetcher:
    """Iterator that fills a bounded queue from a background thread.

    Args:
        source: The iterator to run ahead of the consumer.
        size: Capacity of the queue (at least 1).
    """

    def __init__(self, source: Iterator[Any], size: int) -> None:
        slots: queue.Queue = queue.Queue(maxsize=max(1, size))
        stop = threading.Event()
        self._slots = slots
        self._done = False
        thread = threading.Thread(
            target=_produce, args=(source, slots, stop), name=THREAD_NAME, daemon=True
        )
        self._release = weakref.finalize(self, _release, slots, stop)
        thread.start()

    def __iter__(self) -> Prefetcher:
        return self

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        element, error = self._slots.get()
        if element is _END:
            self._done = True
            self._release()
            if error is not None:
                try:
                    raise error
                finally:  # no cycle through this frame: the iterator is freed with the error
                    del error
            raise StopIteration
        return element
