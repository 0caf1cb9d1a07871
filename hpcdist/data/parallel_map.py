"""`ParallelMap`: ``Dataset.map(fn, num_parallel_calls=k)`` on a pool of ``k`` threads.

The iterating thread reads the input and submits one call of ``fn`` per element to a
`concurrent.futures.ThreadPoolExecutor`, keeping up to ``k`` calls in flight. With
``deterministic`` true (TF's default) results come out in input order; with false, in the
order the calls finish (a slow element does not hold back the ones after it). An exception
raised by ``fn`` is raised by ``next`` at that element (in order) or as soon as its call ends.

Threads run Python code one at a time (the GIL): a pool speeds up functions that spend their
time where the GIL is released, such as numpy's array operations on large arrays, ``zlib``,
file reads and protobuf parsing of a batch (`hpcdist.io.parse_example`), not functions of
pure Python arithmetic on small values.

The pool is owned by the iterator: it shuts down when the input ends, when ``fn`` fails, or
when the iterator is dropped (a `weakref.finalize`; pending calls are cancelled), so no
thread outlives its iterator. Its threads are named `THREAD_NAME`.
"""

from __future__ import annotations

import collections
import concurrent.futures
import os
import weakref
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["THREAD_NAME", "ParallelMap", "pool_size"]

THREAD_NAME = "hpcdist-map"
"""Prefix of every pool thread's name (tests count live pool threads by it)."""

AUTOTUNE = -1


def pool_size(num_parallel_calls: int) -> int:
    """Threads for ``num_parallel_calls`` (`AUTOTUNE`: the machine's cores).

    Raises:
        ValueError: Neither a positive count nor `AUTOTUNE`.
    """
    if num_parallel_calls == AUTOTUNE:
        return max(1, os.cpu_count() or 1)
    if not isinstance(num_parallel_calls, int) or num_parallel_calls < 1:
        raise ValueError(
            "num_parallel_calls must be a positive integer or hd.data.AUTOTUNE (-1), got "
            f"{num_parallel_calls!r}"
        )
    return num_parallel_calls


def _shutdown(pool: concurrent.futures.ThreadPoolExecutor) -> None:
    pool.shutdown(wait=False, cancel_futures=True)


class ParallelMap:
    """Iterator of ``fn(element)`` over ``source``, computed on a thread pool.

    Args:
        source: The input elements.
        fn: Called with one element, in a pool thread.
        threads: Pool size, and the most calls in flight.
        deterministic: Yield in input order (True) or in completion order (False).
    """

    def __init__(
        self, source: Iterator[Any], fn: Callable[[Any], Any], threads: int, deterministic: bool
    ) -> None:
        self._source = source
        self._fn = fn
        self._threads = threads
        self._ordered = deterministic
        self._pool = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix=THREAD_NAME)
        self._close = weakref.finalize(self, _shutdown, self._pool)
        self._pending: collections.deque[concurrent.futures.Future] = collections.deque()
        self._input_done = False

    def __iter__(self) -> ParallelMap:
        return self

    def _fill(self) -> None:
        while not self._input_done and len(self._pending) < self._threads:
            try:
                element = next(self._source)
            except StopIteration:
                self._input_done = True
                return
            self._pending.append(self._pool.submit(self._fn, element))

    def _take(self) -> concurrent.futures.Future:
        if self._ordered:
            return self._pending.popleft()
        done, _ = concurrent.futures.wait(
            self._pending, return_when=concurrent.futures.FIRST_COMPLETED
        )
        first = next(f for f in self._pending if f in done)  # the oldest of those done
        self._pending.remove(first)
        return first

    def __next__(self) -> Any:
        try:
            self._fill()
        except BaseException:
            self._close()
            raise
        if not self._pending:
            self._close()
            raise StopIteration
        future = self._take()
        try:
            return future.result()
        except BaseException:
            self._close()
            self._pending.clear()
            self._input_done = True
            raise
