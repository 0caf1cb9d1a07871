"""When communicators end: all of them before MPI finalises, newest first, and the world one.

Freeing windows and communicators is collective, so it must not depend on when each rank's
garbage collector runs: live communicators are held by strong references until ``close()`` or
the end of the program, when an ``atexit`` hook closes them in the same order on every rank.

The end of the program is bounded like a collective. The hook first publishes, on every live
communicator, that this rank has left (so that ranks still waiting in a collective name it),
then closes each one: every rank agrees, under the communicator's deadline, that it is closing
(`hpcdist.comm.envelope.Envelope.agree_to_close`) before anything collective is freed. When a
rank does not arrive in time (it left early, it is stuck, it is stopped), the job is aborted
with `EXIT_DEADLINE_CODE`, naming the ranks that did not arrive; without a deadline the stall
warning names them and says how to set one.

A creation that passed its deadline (`hpcdist.comm.creation`) leaves a collective posted on its
parent communicator that can never complete, so ``MPI_Finalize`` could hang: `abandon` records
it, and the hook then aborts the job with `EXIT_DEADLINE_CODE` instead of closing anything.
"""

from __future__ import annotations

import atexit
from collections.abc import Callable
from typing import Protocol, TypeVar

from mpi4py import MPI

from hpcdist import abort, exit_codes
from hpcdist.errors import DeadlineExceededError

__all__ = ["EXIT_DEADLINE_CODE", "abandon", "close_all", "register", "shared", "unregister"]

#: Exit code of a job aborted because some ranks did not reach the end of the program in time.
EXIT_DEADLINE_CODE = exit_codes.EXIT_DEADLINE_CODE


class Closable(Protocol):
    """What the hook needs of a communicator."""

    def leave(self) -> None:
        """Publish that this rank reached the end of the program (local)."""

    def close(self) -> None:
        """Release its resources (collective, bounded by its deadline).

        Raises:
            DeadlineExceededError: Some ranks did not close in time.
        """


T = TypeVar("T", bound=Closable)

# live communicators, oldest first
_live: list[Closable] = []
_shared: dict[Callable[[], Closable], Closable] = {}
# why the job cannot end normally (a creation that passed its deadline), first one first
_abandoned: list[str] = []


def register(comm: Closable) -> None:
    """Remember a communicator so that its windows are freed before MPI finalises."""
    if not _live:
        atexit.register(close_all)
    _live.append(comm)


def unregister(comm: Closable) -> None:
    """Forget a communicator (it is being closed)."""
    _live[:] = [entry for entry in _live if entry is not comm]
    for key, value in list(_shared.items()):
        if value is comm:
            del _shared[key]


def abandon(reason: str) -> None:
    """Record that MPI cannot finalise cleanly (``reason``): the end of the program aborts.

    Called when creating a communicator passed its deadline: the parent keeps a collective
    that some ranks never joined, and ``MPI_Finalize`` could wait for them for ever.
    """
    if not _abandoned:
        atexit.register(close_all)
    _abandoned.append(reason)


def close_all() -> None:
    """Close every live communicator, newest first (same order on every rank).

    A communicator whose deadline passes while its ranks agree to close aborts the job:
    the ranks that did not arrive may never do so, and the launcher would wait for ever. So
    does an abandoned creation (`abandon`), before closing anything.
    """
    if MPI.Is_finalized():
        return
    if _abandoned:
        abort.abort_job(
            f"hpcdist: {_abandoned[0]}. Aborting the job so that it does not hang "
            f"(exit code {EXIT_DEADLINE_CODE})",
            EXIT_DEADLINE_CODE,
        )
    live = list(reversed(_live))
    for comm in live:
        comm.leave()
    try:
        for comm in live:
            comm.close()
    except DeadlineExceededError as exc:
        rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
        abort.abort_job(
            f"hpcdist: rank {rank} of {size} left the program, but the other ranks did not all "
            f"follow: {exc}. Aborting the job so that it does not hang "
            f"(exit code {EXIT_DEADLINE_CODE})",
            EXIT_DEADLINE_CODE,
        )
    _live.clear()
    _shared.clear()


def shared(factory: Callable[[], T]) -> T:
    """The one instance ``factory()`` made for the whole program (made on first call)."""
    instance = _shared.get(factory)
    if instance is None:
        instance = _shared[factory] = factory()
    return instance  # type: ignore[return-value]
