"""The envelope of every collective: sequence numbers, header checks, poison and failure state.

Each collective takes the next sequence number and builds a `Header` (`hpcdist.comm.checks`).
Before data moves, ranks compare headers: on a single node inside the shared-memory barrier,
across nodes with one small all-reduce (the ``barrier`` of the backend that checks). A rank
whose arguments are invalid *poisons* its header instead of raising at once, so that every rank
raises (that rank its own error, the others `CollectiveMismatchError` naming it) instead of some
ranks waiting forever. A collective that passes its deadline leaves the communicator unusable:
the abandoned operation may still complete.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mpi4py import MPI

from hpcdist.comm.backend import Backend
from hpcdist.comm.checks import ArrivalBoard, Deadline, Header
from hpcdist.errors import CollectiveMismatchError, DeadlineExceededError, UnavailableError

__all__ = ["POISON", "Envelope"]

#: The ``extra`` word of a poisoned header (never a root or a pack layout).
POISON = -0x5BAD


class Envelope:
    """Sequence numbers, cross-rank header checks and the failure state of one communicator.

    Construction is collective (it allocates the arrival board).

    Args:
        comm: The library's communicator.
        checker: The backend whose ``barrier`` compares headers (shared memory on one node,
            MPI across nodes).
        check_collectives: Whether headers are compared at all (invalid arguments are always
            agreed on).
        stall_warning: Seconds before a wait warns about missing ranks; None never.
    """

    def __init__(
        self,
        comm: MPI.Intracomm,
        checker: Backend,
        check_collectives: bool,
        stall_warning: float | None,
    ) -> None:
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.checker = checker
        self.checks = check_collectives
        self.stall = stall_warning
        self.seq = 0
        #: Why the communicator is unusable, or None.
        self.broken: str | None = None
        self.board = ArrivalBoard(comm) if self.size > 1 else None

    def begin(
        self, header_fn: Callable[[int], Header], timeout: float | None
    ) -> tuple[Header, Deadline]:
        """Start a collective: the next sequence number, its header and its deadline.

        Raises:
            UnavailableError: An earlier collective failed (or the communicator is closed).
        """
        if self.broken is not None:
            raise UnavailableError(
                f"rank {self.rank}: this communicator is unusable after an earlier failure "
                f"({self.broken}); restart the job (restore from the latest checkpoint)"
            )
        self.seq += 1
        header = header_fn(self.seq)
        board = self.board
        if board is not None:
            board.mine[0] = self.seq
        return header, Deadline(timeout, self.stall, header, board)

    def fail(self, exc: BaseException) -> None:
        """Record that a deadline passed: the communicator refuses further work."""
        self.broken = f"{type(exc).__name__}: {exc}"

    def guard(self, fn: Callable[[], Any]) -> Any:
        """Run the data-moving part of a collective; a passed deadline breaks the communicator."""
        try:
            return fn()
        except DeadlineExceededError as exc:
            self.fail(exc)
            raise

    def check(
        self, header: Header, deadline: Deadline, local_error: Exception | None = None
    ) -> None:
        """Verify the header across ranks; a local error poisons it so every rank raises.

        Raises:
            CollectiveMismatchError: Headers differ, or another rank's arguments are invalid.
            Exception: ``local_error``, on this rank.
        """
        if local_error is not None:
            header = header.replace_extra(POISON)
        elif not self.checks or self.size == 1:
            return
        try:
            if self.size > 1:
                self.checker.barrier(header, deadline)
        except CollectiveMismatchError as exc:
            if local_error is not None:
                raise local_error from None
            bad = [r for r, d in enumerate(exc.descriptions) if f"({POISON})" in d]
            if bad:
                raise CollectiveMismatchError(
                    f"collective {header.describe()} failed: invalid arguments on rank(s) "
                    f"{','.join(map(str, bad))} (see the error on those ranks)",
                    exc.descriptions,
                ) from None
            raise
        if local_error is not None:
            raise local_error

    def rank_error(self, error: str | None, why: str | None = None) -> Exception | None:
        """This rank's argument error, if any (it poisons the header check).

        `UnavailableError` when the error is ``why`` (NCCL was asked for and cannot load), else
        `TypeError`.
        """
        if not error:
            return None
        kind = UnavailableError if error == why else TypeError
        return kind(f"rank {self.rank}: {error}")

    def close(self) -> None:
        """Free the arrival board (collective); the envelope refuses further work."""
        if self.board is not None:
            self.board.free()
        self.broken = "closed"
