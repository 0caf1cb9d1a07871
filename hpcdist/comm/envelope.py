"""The envelope of every collective: sequence numbers, header checks, poison and failure state.

Each collective takes the next sequence number (`Envelope.begin`), prepares its arguments and
builds a `Header` (`hpcdist.comm.checks`). Before data moves, ranks compare headers: on a single
node inside the shared-memory barrier, across nodes with one small all-reduce (the ``barrier`` of
the backend that checks). Whatever fails on one rank between taking the sequence number and the
check (invalid arguments, a dtype that cannot be reduced, an object that cannot be pickled, any
exception in the preparation) *poisons* that rank's header instead of escaping at once
(`Envelope.guard`), so that every rank raises at that call (that rank its own error, the others
`CollectiveMismatchError` naming it) and the sequence stays the same everywhere. A failure after
the check, while data moves, or a collective that passes its deadline, leaves the communicator
unusable: its peers may still be waiting in the abandoned operation.

Closing (`Envelope.agree_to_close`, at ``Communicator.close`` and at exit) first agrees, under the
deadline, on a communicator of its own that every rank is closing and whether any rank's
communicator failed: the collective frees then run only where every rank takes part.

The `ArrivalBoard` is where each rank publishes the collective it entered and its state; a slow
wait reads it to tell ranks that never arrived from ranks whose data is still moving.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from mpi4py import MPI

from hpcdist.comm.backend import Backend
from hpcdist.comm.checks import POISON, Header
from hpcdist.comm.deadline import CLOSE, CLOSING, GAVE_UP, LEFT, NO_ANSWER, Deadline
from hpcdist.errors import (
    CollectiveMismatchError,
    DeadlineExceededError,
    HpcdistError,
    UnavailableError,
)
from hpcdist.utils.waiting import Waiter

__all__ = ["POISON", "ArrivalBoard", "Envelope", "behind"]

# Where the current collective stands (`Envelope.stage`).
_OPEN = 0  # sequence number taken, header not yet compared: a failure poisons the check
_CHECKING = 1  # comparing headers: what is raised now is raised on every rank
_MOVING = 2  # headers agreed, data moving: a failure breaks the communicator


def behind(values: np.ndarray, seq: int) -> list[int]:
    """The ranks that have not entered collective ``seq``, from the board's entries.

    ``values[r]`` is rank ``r``'s (sequence number, state). For `CLOSE`, the ranks not (yet)
    closing.
    """
    if seq == CLOSE:
        return [r for r, (_, state) in enumerate(values) if state not in (LEFT, CLOSING)]
    return [r for r, (last, _) in enumerate(values) if last < seq]


class ArrivalBoard:
    """Each rank publishes the sequence number of the collective it last entered, and its state.

    Two int64 per rank in an RMA window; publishing is a local store. Only when a collective is
    slow are the other ranks' entries read (``Rget``, bounded in time), to name the ranks that
    have not arrived. The state is 0, or `LEFT` (the rank reached the end of the program),
    `CLOSING` (it is closing the communicator) or `GAVE_UP` (closing passed its deadline).

    Args:
        comm: The library's communicator (collective construction).
    """

    #: Seconds a read of the other ranks' entries may take (`read`).
    GRACE = 2.0

    def __init__(self, comm: MPI.Intracomm) -> None:
        self.comm = comm
        self.size = comm.Get_size()
        self.win = MPI.Win.Allocate(16, 8, comm=comm)
        #: This rank's entry: ``mine[0]`` the sequence number, ``mine[1]`` the state.
        self.mine = np.frombuffer(self.win.tomemory(), dtype=np.int64, count=2)
        self.mine[:] = (-1, 0)
        #: ``mine`` as a memoryview (a Python int stored without a numpy scalar: every call).
        self.words = memoryview(self.mine).cast("B").cast("q")
        comm.Barrier()
        self.win.Lock_all(MPI.MODE_NOCHECK)

    def publish(self, seq: int) -> None:
        """Record that this rank entered collective ``seq``."""
        self.mine[0] = seq

    def set_state(self, state: int) -> None:
        """Record that this rank left the program, is closing, or gave up closing."""
        self.mine[1] = state

    def read(self, grace: float | None = None) -> np.ndarray:
        """Every rank's entry, ``(size, 2)``.

        Ranks that did not answer within ``grace`` seconds (default `GRACE`) read ``(-2, -2)``.
        """
        grace = self.GRACE if grace is None else grace
        self.win.Sync()
        me, size = self.comm.Get_rank(), self.comm.Get_size()
        values = np.full((size, 2), NO_ANSWER, dtype=np.int64)
        requests = {}
        for r in range(size):
            if r != me:
                requests[r] = self.win.Rget([values[r], MPI.INT64_T], r)
        values[me] = self.mine

        def answered() -> bool:
            for r in [r for r, req in requests.items() if req.Test()]:
                del requests[r]
            return not requests

        Waiter(grace).wait(answered)  # False past ``grace``: those ranks read as no answer
        out = values.copy()  # a late answer still lands in ``values``, not in the result
        for r in requests:
            out[r] = NO_ANSWER
        return out

    def report(self, seq: int) -> tuple[list[int], list[int], str]:
        """Who has not entered collective ``seq`` (`CLOSE`: not closing), and what is known.

        Returns:
            The ranks read as not arrived, the ranks whose entry could not be read within
            `GRACE` (stopped, busy outside MPI, or behind a saturated link: whether they arrived
            is not known), and a text such as ``"; rank 1 left the program"`` (or empty).
        """
        values = self.read()
        unread = [r for r, (_, state) in enumerate(values) if state == NO_ANSWER]
        missing = [r for r in behind(values, seq) if r not in unread]
        notes = []
        for r in missing:
            last, state = (int(v) for v in values[r])
            if state == LEFT:
                notes.append(f"rank {r} left the program (it reached its end)")
            elif state == CLOSING:
                notes.append(f"rank {r} is closing the communicator")
            elif state == GAVE_UP:
                notes.append(f"rank {r} gave up closing the communicator (deadline passed)")
            elif seq == CLOSE and last > 0:
                notes.append(f"rank {r} last entered collective #{last}")
        return missing, unread, "".join(f"; {note}" for note in notes)

    def free(self) -> None:
        """Release the window (collective)."""
        if self.win != MPI.WIN_NULL:
            self.win.Unlock_all()
            self.win.Free()


class Envelope:
    """Sequence numbers, cross-rank header checks and the failure state of one communicator.

    Construction is collective (it allocates the arrival board and duplicates ``comm`` for the
    closing agreement).

    Args:
        comm: The library's communicator.
        checker: The backend whose ``barrier`` compares headers (shared memory on one node,
            MPI across nodes).
        check_collectives: Whether headers are compared at all. Without the comparison, a
            failure on one rank is not reported to the others (as in raw MPI), except in the
            object collectives, which always compare.
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
        self.stage = _MOVING
        self._kind = 0
        self.board = ArrivalBoard(comm) if self.size > 1 else None
        # Used only to agree on closing: nothing abandoned on ``comm`` can get in its way.
        self._closer = comm.Dup() if self.size > 1 else MPI.COMM_NULL
        self._leaving = False

    def begin(self, kind: int, timeout: float | None, reuse: Deadline | None = None) -> Deadline:
        """Start a collective: take the next sequence number; return its deadline.

        Everything the collective does until its header check belongs in `guard`, so that a
        failure there is agreed on by every rank.

        Args:
            kind: The collective's code (``KINDS``), for messages and for a poisoned header.
            timeout: The deadline in seconds, None for none.
            reuse: A deadline made for this envelope (its stall warning and board) to reset
                and return instead of a new one: the small-message all-reduce keeps one, so
                that a call allocates nothing. Its caller sets the reset deadline's
                ``header_fn`` (which knows the full header).

        Raises:
            UnavailableError: An earlier collective failed (or the communicator is closed).
        """
        if self.broken is not None:
            raise UnavailableError(
                f"rank {self.rank}: this communicator is unusable after an earlier failure "
                f"({self.broken}); restart the job (restore from the latest checkpoint)"
            )
        self.seq = seq = self.seq + 1
        board = self.board
        if board is not None:
            board.words[0] = seq
        self.stage, self._kind = _OPEN, kind
        if reuse is None:
            deadline = Deadline(timeout, self.stall, None, board, seq)
            deadline.header_fn = lambda: Header(seq, kind)
        else:
            deadline = reuse
            deadline.reset(seq, timeout)
        return deadline

    def fail(self, exc: BaseException) -> None:
        """Record that the communicator can no longer be used (a deadline passed, ...)."""
        self.broken = f"{type(exc).__name__}: {exc}"

    def guard(self, deadline: Deadline, fn: Callable[[], Any]) -> Any:
        """Run the collective begun with ``deadline``; make every failure safe for the others.

        - before the header check: the exception poisons this rank's header, so that every
          rank raises at this call (this rank the exception itself);
        - during the check: what is raised is raised on every rank (a mismatch, or this rank's
          own error after its poisoned check);
        - after it, while data moves, and for a passed deadline at any point: the communicator
          is marked unusable, since its peers may be waiting in this collective.
        """
        try:
            return fn()
        except DeadlineExceededError as exc:
            self.fail(exc)
            raise
        except Exception as exc:
            if self.stage == _OPEN:
                try:
                    self.check(Header(deadline.seq, self._kind), deadline, exc, always=True)
                except DeadlineExceededError as late:
                    self.fail(late)
                    raise
            elif self.stage == _MOVING and self.size > 1 and not isinstance(exc, HpcdistError):
                # (hpcdist's own errors past the check are raised on every rank: NCCL start-up)
                self.fail(exc)
            raise

    def fused(self, header: Header, deadline: Deadline) -> Header:
        """Mark that the backend compares ``header`` itself (in its first barrier)."""
        self.stage = _CHECKING
        deadline.header = header
        return header

    def check(
        self,
        header: Header,
        deadline: Deadline,
        local_error: Exception | None = None,
        always: bool = False,
    ) -> None:
        """Verify the header across ranks; a local error poisons it so every rank raises.

        Args:
            header: This rank's header.
            deadline: Bounds the wait.
            local_error: This rank's error, or None.
            always: Compare even when the checks are turned off (object collectives).

        Raises:
            CollectiveMismatchError: Headers differ, or another rank's arguments are invalid.
            Exception: ``local_error``, on this rank.
        """
        self.stage = _CHECKING
        if local_error is not None:
            header = header.replace_extra(POISON)
        else:
            deadline.header = header
            if self.size == 1 or not (self.checks or always):
                self.stage = _MOVING
                return
        try:
            if self.size > 1:
                self.checker.barrier(header, deadline)
        except CollectiveMismatchError:
            if local_error is not None:  # the mismatch is its own: raise it, with its cause
                raise local_error from local_error.__cause__
            raise
        if local_error is not None:
            raise local_error
        self.stage = _MOVING

    def reject(self, error: str | None, why: str | None = None) -> None:
        """Raise this rank's argument error, if any (inside `guard`: it poisons the check).

        `UnavailableError` when the error is ``why`` (NCCL was asked for and cannot load), else
        `TypeError`.
        """
        if error:
            kind = UnavailableError if error == why else TypeError
            raise kind(f"rank {self.rank}: {error}")

    # -- closing ------------------------------------------------------------------------------

    def leave(self) -> None:
        """Publish that this rank has reached the end of the program (local)."""
        self._leaving = True
        if self.board is not None:
            self.board.set_state(LEFT)

    def agree_to_close(self, timeout: float | None) -> bool:
        """Wait until every rank closes; return whether every rank can free collectively.

        Runs on a communicator of its own, so that an operation abandoned on the library's
        communicator (after a deadline) cannot get in its way; a rank whose communicator failed
        takes part too, and then no rank frees anything collectively.

        Raises:
            DeadlineExceededError: Some ranks did not close within ``timeout`` (named, with
                what is known of them); the communicator is then unusable.
        """
        if self.size == 1:
            return True
        if self.board is not None:
            self.board.set_state(LEFT if self._leaving else CLOSING)
        failed = np.array([self.broken is not None], dtype=np.int32)
        anyone = np.zeros(1, dtype=np.int32)
        deadline = Deadline(timeout, self.stall, None, self.board, CLOSE)
        try:
            deadline.wait(self._closer.Iallreduce(failed, anyone, op=MPI.MAX).Test)
            # A rank that gave up waiting above has left its contribution behind, so the others
            # may complete without it: this second round makes them wait for it (bounded) instead
            # of entering collective frees that it will never join.
            deadline.wait(self._closer.Ibarrier().Test)
        except DeadlineExceededError as exc:
            self.fail(exc)
            if self.board is not None:
                self.board.set_state(GAVE_UP)
            raise
        return not anyone[0]

    def close(self) -> None:
        """Free the arrival board and the closing communicator; refuse further work.

        Collective, after `agree_to_close` said that every rank can free.
        """
        if self.board is not None:
            self.board.free()
        if self._closer != MPI.COMM_NULL:
            self._closer.Free()
        self.broken = "closed"
