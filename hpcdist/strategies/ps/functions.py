"""Scheduled functions in flight: their pickles on the coordinator, their copies on workers.

A function is pickled once, the first time it is scheduled, and gets a **key** that is never
given to another function. A worker unpickles it once and keeps it under that key, so later runs
travel as the key alone. Neither side keeps functions for the job's life:

* `FunctionCache` (coordinator) finds a function's entry by identity while the function object
  lives. It holds the function weakly: when the object is gone the entry is dropped (closures
  already scheduled keep the pickle until they are sent) and its key is reported *dead*.
  Callables that cannot be weakly referenced are held strongly, at most `STRONG_FUNCTIONS` of
  them (least recently scheduled dropped first; scheduling one again pickles it again).
* `WorkerFunctions` (coordinator, one per worker) is the coordinator's exact record of what a
  worker holds. It sends the pickle when the worker lacks the key, and tells the worker which
  keys to forget: dead keys, and the least recently used ones beyond `WORKER_CACHE_BYTES` of
  pickles or `WORKER_CACHE_FUNCTIONS` functions. The worker forgets them after the run that
  carries the list, and the record is updated when that run is sent, so the two always agree: a
  worker never runs a function for a key it was not sent, and a forgotten key is re-sent with
  its pickle when it is needed again.
* **Batches** (`take_batch`): an idle worker gets the first queued closure and, in one message,
  the next ones while each has a known `FunctionEntry.cost` (`note_cost`: a moving average of
  the seconds its runs took on the workers) and the batch stays within `BATCH_SECONDS` of
  estimated work, `MAX_BATCH` closures and the worker's share of the queue. A function never
  run yet, or a slow one, goes alone.
"""

from __future__ import annotations

import collections
import math
import threading
import weakref
from collections.abc import Callable
from typing import Any

import cloudpickle

from hpcdist import timeline

__all__ = [
    "BATCH_SECONDS",
    "MAX_BATCH",
    "STRONG_FUNCTIONS",
    "WORKER_CACHE_BYTES",
    "WORKER_CACHE_FUNCTIONS",
    "FunctionCache",
    "FunctionEntry",
    "WorkerFunctions",
    "describe",
    "finished",
    "note_cost",
    "take_batch",
]

#: Pickled bytes of functions a worker keeps (least recently used forgotten first).
WORKER_CACHE_BYTES = 64 << 20
#: Number of functions a worker keeps.
WORKER_CACHE_FUNCTIONS = 1024
#: Callables without weak references that the coordinator keeps pickled.
STRONG_FUNCTIONS = 64
#: Estimated seconds of work a batch may hold (beyond its first function).
BATCH_SECONDS = 1e-3
#: Most functions in one batch.
MAX_BATCH = 64


def describe(fn: Any) -> str:
    """A short name of a scheduled function, for messages."""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    if name is None and hasattr(fn, "func"):  # functools.partial
        return f"partial({describe(fn.func)})"
    return str(name) if name is not None else type(fn).__name__


class FunctionEntry:
    """One pickled function: its key, its pickle, its name, whether the function still lives.

    ``cost`` is the seconds one run takes on a worker (a moving average of the runs reported so
    far; None before the first): the dispatcher batches only functions known to be short.

    Args:
        key: Identity of the function on the workers (never reused).
        blob: The function, pickled with cloudpickle.
        name: Its name, for messages.
    """

    __slots__ = ("__weakref__", "alive", "blob", "cost", "key", "name", "ref")

    def __init__(self, key: int, blob: bytes, name: str) -> None:
        self.key, self.blob, self.name = key, blob, name
        self.alive = True
        self.cost: float | None = None
        self.ref: Callable[[], Any] | None = None


class FunctionCache:
    """The coordinator's pickles of scheduled functions, found by the function's identity.

    `entry` is called from the user's threads; `dead_keys` is drained by the dispatcher.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_id: dict[int, FunctionEntry] = {}
        self._strong: collections.OrderedDict[int, FunctionEntry] = collections.OrderedDict()
        self._gone: collections.deque[tuple[int, FunctionEntry]] = collections.deque()
        self.dead_keys: collections.deque[int] = collections.deque()
        self._next_key = 0

    def __len__(self) -> int:
        return len(self._by_id)

    def entry(self, fn: Callable[..., Any]) -> FunctionEntry:
        """The entry of ``fn``, pickling it the first time it is seen (or after it was dropped).

        Raises:
            TypeError: ``fn`` cannot be pickled.
        """
        found = self._by_id.get(id(fn))  # the common case, without the lock
        if found is not None and not self._gone and id(fn) not in self._strong:
            ref = found.ref
            if ref is not None and ref() is fn:
                return found
        with self._lock:
            self._purge()
            found = self._by_id.get(id(fn))
            if found is not None and found.ref is not None and found.ref() is fn:
                if id(fn) in self._strong:
                    self._strong.move_to_end(id(fn))
                return found
            try:
                blob = cloudpickle.dumps(fn)
            except Exception as exc:
                raise TypeError(f"cannot send function {fn!r} to the workers: {exc}") from exc
            entry = FunctionEntry(self._next_key, blob, describe(fn))
            self._next_key += 1
            ident, gone = id(fn), self._gone

            def died(_: Any, entry: FunctionEntry = entry) -> None:
                # May run in any thread, even inside this class: only flag and queue here.
                entry.alive = False
                gone.append((ident, entry))

            try:
                entry.ref = weakref.ref(fn, died)
            except TypeError:  # no weak references: keep it, within STRONG_FUNCTIONS
                entry.ref = lambda fn=fn: fn
                self._strong[ident] = entry
                while len(self._strong) > STRONG_FUNCTIONS:
                    old_id, old = self._strong.popitem(last=False)
                    old.alive, old.ref = False, None
                    gone.append((old_id, old))
            self._by_id[ident] = entry
            return entry

    def drain_dead(self) -> list[int]:
        """Keys of the functions gone since the last call (their workers may forget them)."""
        if not self._gone and not self.dead_keys:
            return []
        with self._lock:
            self._purge()
            keys = list(self.dead_keys)
            self.dead_keys.clear()
        return keys

    def _purge(self) -> None:
        while self._gone:
            ident, entry = self._gone.popleft()
            if self._by_id.get(ident) is entry:
                del self._by_id[ident]
            self.dead_keys.append(entry.key)


class WorkerFunctions:
    """The coordinator's record of the functions one worker holds (dispatcher thread only)."""

    def __init__(self) -> None:
        self._held: collections.OrderedDict[int, int] = collections.OrderedDict()  # key -> bytes
        self._bytes = 0
        self._forget: list[int] = []

    def __contains__(self, key: int) -> bool:
        return key in self._held

    def __len__(self) -> int:
        return len(self._held)

    def drop(self, key: int) -> None:
        """The function of ``key`` is gone: the worker forgets it with its next run."""
        nbytes = self._held.pop(key, None)
        if nbytes is not None:
            self._bytes -= nbytes
            self._forget.append(key)

    def message(self, entry: FunctionEntry) -> tuple[bytes | None, tuple[int, ...]]:
        """What to send with a run of ``entry``: its pickle (None if held) and keys to forget.

        The record is updated as if the worker had already run it and forgotten those keys.
        """
        key = entry.key
        if key in self._held:
            self._held.move_to_end(key)
            blob = None
        else:
            blob = entry.blob
            self._held[key] = len(blob)
            self._bytes += len(blob)
        if not entry.alive:  # its function object is gone: no later run can name it
            self.drop(key)
        while len(self._held) > 1 and (
            self._bytes > WORKER_CACHE_BYTES or len(self._held) > WORKER_CACHE_FUNCTIONS
        ):
            self.drop(next(iter(self._held)))
        forget, self._forget = tuple(self._forget), []
        return blob, forget


def take_batch(queue: collections.deque[Any], worker: int, live: int) -> list[Any]:
    """Remove and return the next batch for ``worker`` from ``queue`` (empty: nothing for it).

    ``queue`` holds closures with ``function.cost`` and ``avoid`` (a worker the closure must
    not run on again when another is live). Other threads may append to ``queue`` meanwhile;
    the caller is the only one removing from it.

    Args:
        queue: The coordinator's queue of closures, oldest first.
        worker: The idle worker's rank.
        live: Number of live workers.
    """
    if not queue:
        return []
    first = queue[0]
    if first.avoid == worker and live > 1:
        for i, closure in enumerate(list(queue)):  # a snapshot: appends may come meanwhile
            if closure.avoid != worker:
                del queue[i]  # indices from the left are stable: only this thread removes
                return [closure]
        return []
    queue.popleft()
    batch = [first]
    total = first.function.cost
    if total is None or not queue:
        return batch
    limit = min(MAX_BATCH, math.ceil((len(queue) + 1) / live))
    while len(batch) < limit and queue:
        closure = queue[0]
        cost = closure.function.cost
        if cost is None or total + cost > BATCH_SECONDS or closure.avoid == worker:
            break
        batch.append(queue.popleft())
        total += cost
    return batch


def note_cost(function: Any, seconds: float) -> None:
    """Fold one run's ``seconds`` into ``function.cost`` (a moving average)."""
    cost = function.cost
    function.cost = seconds if cost is None else cost + 0.25 * (seconds - cost)


def finished(closure: Any, worker: int, outcome: str, seconds: float) -> None:
    """A closure ran ``seconds`` on ``worker``: note its cost and its spans.

    The cost goes to `note_cost`; its time queued and its time on the worker go on the
    timeline when one is recorded.
    """
    note_cost(closure.function, seconds)
    if timeline.active():
        end, name = timeline.now(), closure.function.name
        args = {"worker_rank": worker, "outcome": outcome}
        timeline.record("ps", f"queued {name}", closure.t0, closure.sent, args)
        timeline.record("ps", f"remote {name}", closure.sent, end, args)
