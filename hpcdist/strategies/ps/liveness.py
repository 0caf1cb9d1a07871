"""Deadlines and stall warnings of scheduled functions, and the workers lost to them.

The coordinator's dispatcher asks `Liveness.overdue` about the functions running on workers at
every turn. After ``HPCDIST_STALL_WARNING_SECONDS`` a function is named in a warning, once;
after ``HPCDIST_TIMEOUT_SECONDS`` it fails with `DeadlineExceededError` and its worker is
**lost**: a stopped process, or one stuck in a function that never returns, cannot be
interrupted over MPI, so the coordinator schedules nothing on it again.

A lost worker whose function returns late sends its reply like any other; once it answered every
function of its last batch (`unanswered` counts them) it is back in its serve loop and will take
part in ending the job. When the program ends (`end_job`), the coordinator waits up to the
deadline once more for the lost workers that have not replied; if one still has not, ending the
job collectively would hang, so the job is aborted with a message naming it.
"""

from __future__ import annotations

import collections
import pickle
import time
from collections.abc import Callable
from typing import Any

from hpcdist.abort import ABORT_EXIT_CODE, abort_job
from hpcdist.errors import DeadlineExceededError, UnavailableError
from hpcdist.logger import get_logger
from hpcdist.utils.waiting import Waiter

__all__ = ["Liveness", "Running"]


class Running:
    """The closures sent to one worker and not answered yet (oldest first); the first runs.

    ``name``, ``since`` and ``warned`` are about the first: what it is, since when it runs (the
    send, or the reply that answered the one before), whether it was warned about.

    Args:
        closures: The closures sent (each has ``function.name``).
    """

    __slots__ = ("closures", "name", "since", "warned")

    def __init__(self, closures: list[Any]) -> None:
        self.closures = collections.deque(closures)
        self.started()

    def started(self) -> None:
        """The first closure runs from now on."""
        self.name = self.closures[0].function.name
        self.since = time.monotonic()
        self.warned = False


class Liveness:
    """Watches the functions running on the workers; remembers the workers lost to deadlines.

    Args:
        workers: Ranks of the workers, by worker index.
        timeout: Seconds a function may run before it fails (None: no deadline).
        stall_warning: Seconds before a running function is named in a warning (None: never).
    """

    def __init__(self, workers: list[int], timeout: float | None, stall_warning: float | None):
        self.workers = list(workers)
        self.timeout = timeout
        self.stall_warning = stall_warning
        self.lost: dict[int, str] = {}  # rank -> the function it was lost in
        self.late: set[int] = set()  # lost workers whose function returned after all
        self.unanswered: dict[int, int] = {}  # lost rank -> results of its batch still due

    def who(self, rank: int) -> str:
        """``"worker i (rank r)"``."""
        return f"worker {self.workers.index(rank)} (rank {rank})"

    def live(self) -> list[int]:
        """The workers that may still be given functions."""
        return [w for w in self.workers if w not in self.lost]

    def stuck(self) -> list[int]:
        """Lost workers whose function has not returned."""
        return [w for w in self.lost if w not in self.late]

    def overdue(self, running: dict[int, Running]) -> list[tuple[int, DeadlineExceededError]]:
        """Warn about stalled functions; the ``(worker, error)`` of those past the deadline.

        The caller fails those functions with their error and stops using their workers (the
        workers are recorded as lost here).
        """
        if not running or (self.timeout is None and self.stall_warning is None):
            return []
        now = time.monotonic()
        expired = []
        for rank, run in running.items():
            elapsed = now - run.since
            if self.stall_warning is not None and not run.warned and elapsed > self.stall_warning:
                run.warned = True
                deadline = (
                    f"it fails at the deadline of {self.timeout:g} s (HPCDIST_TIMEOUT_SECONDS)"
                    if self.timeout is not None
                    else "no deadline is set (HPCDIST_TIMEOUT_SECONDS), the coordinator waits"
                )
                get_logger().warning(
                    "scheduled function %s has been running for %.1f s on %s; %s",
                    run.name,
                    elapsed,
                    self.who(rank),
                    deadline,
                )
            if self.timeout is not None and elapsed > self.timeout:
                self.lost[rank] = run.name
                remaining = len(self.live())
                expired.append(
                    (
                        rank,
                        DeadlineExceededError(
                            f"scheduled function {run.name} did not return within "
                            f"{self.timeout:g} s (HPCDIST_TIMEOUT_SECONDS) on {self.who(rank)}: "
                            f"the worker is stalled or stopped and is not used again "
                            f"({remaining} worker(s) left)",
                            (rank,),
                        ),
                    )
                )
        return expired

    def answered(self, rank: int, count: int) -> bool:
        """A reply of the lost worker ``rank`` with ``count`` results arrived.

        Returns:
            Whether that was the last of its batch (it is then back in its serve loop).
        """
        left = self.unanswered.get(rank, 1) - count
        if left > 0:
            self.unanswered[rank] = left
            return False
        self.unanswered.pop(rank, None)
        self.returned(rank)
        return True

    def returned(self, rank: int) -> None:
        """The lost worker ``rank`` replied after all: it serves again (but gets no work)."""
        self.late.add(rank)
        get_logger().warning(
            "%s returned from %s after its deadline; it gets no more functions",
            self.who(rank),
            self.lost[rank],
        )

    def forget(self, rank: int) -> None:
        """Worker ``rank`` died (a fault-tolerant job): a replacement starts with no record."""
        self.lost.pop(rank, None)
        self.late.discard(rank)
        self.unanswered.pop(rank, None)

    def unavailable(self, what: str) -> UnavailableError:
        """The error of ``what`` when no worker is left."""
        lost = ", ".join(f"{self.who(r)} in {name}" for r, name in self.lost.items())
        return UnavailableError(
            f"{what}: every worker was lost to a deadline ({lost}); expected at least one "
            "live worker"
        )

    def end_job(self, poll: Callable[[], tuple[int, bytes] | None], rank: int) -> None:
        """At the end of the job: wait up to the deadline for the stuck workers' replies.

        A worker still stuck then cannot take part in ending the job collectively: the job is
        aborted (``MPI_Abort``) with a message naming it instead of hanging.

        Args:
            poll: Returns ``(rank, pickled reply)`` of an arrived reply, or None.
            rank: This (the coordinator's) rank, for the message.
        """
        if not self.stuck():
            return

        def replied() -> bool:  # take an arrived reply; whether every stuck worker is back
            got = poll()
            if got is not None and got[0] in self.lost:
                results, given_back = pickle.loads(got[1])
                self.answered(got[0], len(results) + given_back)
            return not self.stuck()

        if not Waiter(self.timeout or 0.0).wait(replied):
            who = "; ".join(f"{self.who(r)} is still in {self.lost[r]}" for r in self.stuck())
            message = (
                f"the program ended but {who}, past the deadline of {self.timeout:g} s plus "
                f"{self.timeout:g} s of grace: ending the job needs every rank, so it is "
                "aborted instead of hanging"
            )
            abort_job(f"hpcdist: rank {rank}: {message}; aborting all ranks", ABORT_EXIT_CODE)
