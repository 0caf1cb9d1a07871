"""Deadlines and stall warnings of scheduled functions, and the workers lost to them.

The coordinator's dispatcher asks `Liveness.overdue` about the functions running on workers at
every turn. After ``HPCDIST_STALL_WARNING_SECONDS`` a function is named in a warning, once;
after ``HPCDIST_TIMEOUT_SECONDS`` it fails with `DeadlineExceededError` and its worker is
**lost**: a stopped process, or one stuck in a function that never returns, cannot be
interrupted over MPI, so the coordinator schedules nothing on it again.

A lost worker whose function returns late sends its reply like any other; it is then back in its
serve loop and will take part in ending the job. When the program ends, the coordinator waits
up to the deadline once more for the lost workers that have not replied; if one still has not,
ending the job collectively would hang, so the job is aborted with a message naming it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from hpcdist.errors import DeadlineExceededError, UnavailableError
from hpcdist.log import get_logger

__all__ = ["Liveness", "Running"]


class Running:
    """A function running on a worker: what it is, since when, whether it was warned about.

    Args:
        name: The function's name, for messages.
    """

    __slots__ = ("name", "since", "warned")

    def __init__(self, name: str) -> None:
        self.name = name
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

    def returned(self, rank: int) -> None:
        """The lost worker ``rank`` replied after all: it serves again (but gets no work)."""
        self.late.add(rank)
        get_logger().warning(
            "%s returned from %s after its deadline; it gets no more functions",
            self.who(rank),
            self.lost[rank],
        )

    def unavailable(self, what: str) -> UnavailableError:
        """The error of ``what`` when no worker is left."""
        lost = ", ".join(f"{self.who(r)} in {name}" for r, name in self.lost.items())
        return UnavailableError(
            f"{what}: every worker was lost to a deadline ({lost}); expected at least one "
            "live worker"
        )

    def wait_for_stuck(self, poll: Callable[[], tuple[int, Any] | None]) -> list[int]:
        """At the end of the job: wait up to the deadline for the stuck workers' replies.

        Args:
            poll: Returns ``(rank, reply)`` of an arrived reply, or None.

        Returns:
            The workers still stuck.
        """
        if not self.stuck():
            return []
        end = time.monotonic() + (self.timeout or 0.0)
        while self.stuck() and time.monotonic() < end:
            got = poll()
            if got is None:
                time.sleep(1e-3)
            elif got[0] in self.lost:
                self.returned(got[0])
        return self.stuck()
