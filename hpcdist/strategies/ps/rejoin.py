"""Workers that die and join during a fault-tolerant job, as the coordinator's queue sees them.

Under ``hpcdist run --workers`` (`hpcdist.strategies.ps.membership`) the dispatch loop learns
that a worker died or joined. `Rejoins` keeps what that needs: which workers are **absent**
(dead, or not joined yet) and how to rebuild every per-worker resource (datasets, iterators)
on a worker that joins. `take_back` moves a dead worker's functions back to the queue;
`requeue` puts closures a worker gave back or that must run again at the front; `fail_all`
fails every closure not finished when the job cannot go on (a ps died); `fail_each` fails and
removes the closures of one deque (cancelled, no worker left to run them).
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable
from typing import Any

from hpcdist.strategies.ps.remote_values import Closure

__all__ = ["Rejoins", "fail_all", "fail_each", "requeue", "take_back"]


class Rejoins:
    """Absent workers and the per-worker resources to rebuild on a worker that joins.

    Args:
        workers: Every worker rank of the job.
        present: The ranks connected now.
    """

    def __init__(self, workers: Iterable[int], present: Iterable[int]) -> None:
        self.absent: set[int] = set(workers) - set(present)
        self._builds: list[Any] = []  # each resource's build function, in creation order

    def record(self, build: Any) -> None:
        """Rebuild resource ``build`` on every worker that joins from now on."""
        self._builds.append(build)

    def joined(self, worker: int, entry: Callable[[Any], Any], wait: Any) -> list[Closure]:
        """``worker`` joined: the closures that rebuild every resource there, in order.

        Args:
            worker: Its rank.
            entry: The coordinator's function cache (``entry(fn)``).
            wait: The coordinator's wait (for the closures' values).
        """
        self.absent.discard(worker)
        return [Closure.make(entry, build, (), {}, worker, wait) for build in self._builds]


def take_back(
    running: Iterable[Any],
    targeted: collections.deque[Any],
    queue: collections.deque[Any],
) -> int:
    """A worker died: its running and targeted closures leave it; how many were targeted.

    Closures for any worker go back to the front of ``queue``, in order (at-least-once: one
    may have run already); the resource builds targeted at it are marked done with no value,
    since a worker that joins builds every resource again.
    """
    count = len(targeted)
    again = [*running, *targeted]
    targeted.clear()
    for closure in reversed(again):
        if closure.worker is None:
            queue.appendleft(closure)
        elif not closure.remote_value.is_ready():
            closure.remote_value.set_value(None)
    return count


def requeue(
    again: list[Any], queue: collections.deque[Any], targeted: collections.deque[Any]
) -> int:
    """Put ``again`` back at the front, in order; how many went to ``targeted``.

    Closures for any worker go on ``queue``, those for one worker on its ``targeted`` deque.
    """
    count = 0
    for closure in reversed(again):
        if closure.worker is None:
            queue.appendleft(closure)
        else:
            targeted.appendleft(closure)
            count += 1
    return count


def fail_all(
    error: BaseException,
    running: dict[int, Any],
    targeted: dict[int, collections.deque[Any]],
    queue: collections.deque[Any],
) -> None:
    """Fail every closure not finished with ``error``, and forget them all.

    ``running`` maps a worker to its batch. Used when the job cannot run anything more.
    """
    closures = [c for batch in running.values() for c in batch.closures]
    closures += [c for deque in targeted.values() for c in deque] + list(queue)
    running.clear()
    queue.clear()
    for deque in targeted.values():
        deque.clear()
    for closure in closures:
        if not closure.remote_value.is_ready():
            closure.remote_value.set_error(error)


def fail_each(closures: collections.deque[Any], error: Callable[[], BaseException]) -> int:
    """Remove every closure of ``closures``, failing each with its own ``error()``; how many."""
    count = len(closures)
    while closures:
        closures.popleft().remote_value.set_error(error())
    return count
