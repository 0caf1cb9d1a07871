"""`Deadline`: the wait of a collective, with reports that name the ranks it waits for.

A `Deadline` is a `hpcdist.utils.waiting.Waiter` (spin, then yield, then sleep; a stall warning
once; an error at the deadline) whose messages say what the wait lacks: ranks read as not
arrived (from the `ArrivalBoard` of `hpcdist.comm.envelope`), ranks whose entry could not be
read in time (not known), or, when every rank has arrived, data that has not finished moving
(the bytes outstanding where known). A rank that never arrives so produces
`DeadlineExceededError` naming it, instead of a hang.

The board's states (`LEFT`, `CLOSING`, `GAVE_UP`, `NO_ANSWER`) and the sequence number of the
closing wait (`CLOSE`) are defined here: they are what a deadline's report reads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from mpi4py import MPI

from hpcdist.errors import DeadlineExceededError
from hpcdist.logger import get_logger
from hpcdist.utils.waiting import Waiter

if TYPE_CHECKING:
    from hpcdist.comm.checks import Header
    from hpcdist.comm.envelope import ArrivalBoard

__all__ = [
    "CLOSE",
    "CLOSING",
    "GAVE_UP",
    "LEFT",
    "NO_ANSWER",
    "Deadline",
    "ranks_text",
    "size_text",
]

#: The state a rank publishes on the `ArrivalBoard` once it has reached the end of the program.
LEFT = -3
#: ... once it is closing the communicator (`Communicator.close`).
CLOSING = -4
#: ... once it gave up closing (its deadline passed first): it will never free anything.
GAVE_UP = -6
#: Sequence number of the wait for every rank to close (at ``close`` or at exit).
CLOSE = -5
#: The entry of a rank whose board could not be read in time (stopped, or no progress).
NO_ANSWER = -2


def ranks_text(ranks: Sequence[int]) -> str:
    """``"0,2,3"``: ranks for messages."""
    return ",".join(str(r) for r in ranks)


def size_text(nbytes: int) -> str:
    """``"3.0 MiB"`` from 1 MiB on, else ``"512 bytes"``."""
    return f"{nbytes / (1 << 20):.1f} MiB" if nbytes >= 1 << 20 else f"{nbytes} bytes"


class Deadline(Waiter):
    """The wait of one collective: polls with a deadline, a stall warning and polite spinning.

    The spin/yield/sleep schedule is `Waiter`'s (``SPINS`` polls spin before the first slow
    poll). A communicator reuses one `Deadline` for its small all-reduces (`reset`).

    Args:
        timeout: Seconds before `DeadlineExceededError`; None waits forever.
        stall_warning: Seconds before a warning naming the missing ranks; None never.
        header: The collective (for messages).
        board: Where ranks publish their progress, to name the missing ones; None if unknown.
        seq: Sequence number of the collective, when no header is given (`CLOSE`: the wait for
            every rank to close the communicator).
    """

    __slots__ = ("board", "header", "header_fn", "progress", "seq")

    def __init__(
        self,
        timeout: float | None,
        stall_warning: float | None,
        header: Header | None = None,
        board: ArrivalBoard | None = None,
        seq: int | None = None,
    ) -> None:
        # Waiter's fields, set here without the call: a deadline is built for every collective.
        self.timeout = timeout
        self.stall_warning = stall_warning
        self.on_stall = self.on_timeout = None
        self.spins, self.yield_s, self.max_sleep_s = self.SPINS, self.YIELD_S, self.MAX_SLEEP_S
        self.yield_cpu = True
        self.start = None
        self._warned = False
        self.header = header
        self.board = board
        self.seq = header.seq if seq is None and header is not None else seq
        self.header_fn: Callable[[], Header] | None = None  # builds the header lazily
        #: (bytes moved, bytes in all) of this rank's transfer, where a backend reports it.
        self.progress: tuple[int, int] | None = None

    def reset(
        self, seq: int, timeout: float | None, header_fn: Callable[[], Header] | None = None
    ) -> None:
        """Reuse this deadline for another collective (the clock and the warning start again).

        Args:
            seq: Sequence number of the collective.
            timeout: Its deadline in seconds; None for none.
            header_fn: Builds its header when a message needs it.
        """
        self.start = None
        self._warned = False
        self.seq = seq
        self.timeout = timeout
        self.header = None
        self.header_fn = header_fn
        self.progress = None

    def what(self) -> str:
        """The collective, for messages."""
        if self.seq == CLOSE:
            leaving = self.board is not None and self.board.mine[1] == LEFT
            return "the end of the program" if leaving else "closing the communicator"
        if self.header is None and self.header_fn is not None:
            self.header = self.header_fn()
        if self.header is not None:
            return self.header.describe()
        return f"collective #{self.seq}" if self.seq is not None else "collective"

    def report(self) -> tuple[list[int], list[int], str]:
        """The ranks read as not arrived, those unread, and what is known of the missing ones.

        See ``ArrivalBoard.report`` (`hpcdist.comm.envelope`); nothing is known without a board.
        """
        if self.board is None or self.seq is None:
            return [], [], ""
        return self.board.report(self.seq)

    def moved(self, done: int, total: int) -> None:
        """Record that ``done`` of this rank's ``total`` bytes have moved (for the messages)."""
        self.progress = (done, total)

    def situation(self, missing: list[int], unread: list[int], notes: str, error: bool) -> str:
        """What the wait lacks: ranks that never arrived, or data that has not finished moving.

        Args:
            missing: Ranks read as not arrived.
            unread: Ranks whose entry could not be read in time.
            notes: What is known of the missing ranks (from `report`).
            error: Phrase it for `DeadlineExceededError` (else for the stall warning).
        """
        if missing:
            text = f"rank(s) {ranks_text(missing)} never joined" if error else ""
            text = text or f"ranks not yet arrived: {ranks_text(missing)}"
            text += notes
        elif self.board is None:
            return "all ranks joined but the transfer did not finish" if error else "unknown"
        elif not unread:
            text = f"every rank {'joined' if error else 'has arrived'} ({self.board.size} of "
            text += f"{self.board.size}); the data has not finished moving{self._outstanding()}"
            return text
        else:
            arrived = [r for r in range(self.board.size) if r not in unread]
            text = f"rank(s) {ranks_text(arrived)} arrived"
        if unread:
            text += (
                f"; rank(s) {ranks_text(unread)} unknown (no answer within "
                f"{self.board.GRACE:g} s: stopped, busy outside MPI, or behind a saturated link)"
            )
            if not missing:
                text += f"; if they arrived, the data has not finished moving{self._outstanding()}"
        return text

    def _outstanding(self) -> str:
        """``": 3.0 MiB of 4.0 MiB outstanding on this rank"``, or what is known of it."""
        if self.progress is not None:
            done, total = self.progress
            return f": {size_text(total - done)} of {size_text(total)} outstanding on this rank"
        if self.header is None:
            return ""
        nbytes = self.header.payload_bytes()
        if nbytes is None:
            return ""
        known = "no partial progress is known"
        return f": up to {size_text(nbytes)} outstanding on this rank ({known})"

    def stalled(self, elapsed: float) -> None:
        """Warn (once) that the collective has waited ``elapsed`` seconds, naming what it lacks."""
        missing, unread, notes = self.report()
        get_logger().warning(
            "%s has waited %.0f s; %s%s",
            self.what(),
            elapsed,
            self.situation(missing, unread, notes, error=False),
            ""
            if self.timeout is not None
            else (
                ". No deadline is set, so this rank waits for ever: set "
                "HPCDIST_TIMEOUT_SECONDS=<seconds> (or CommunicationOptions("
                "timeout_seconds=...)) so that the job ends with an error instead"
            ),
        )

    def expired(self, elapsed: float) -> DeadlineExceededError:
        """The error at the deadline: the collective, this rank, and what the wait lacks."""
        del elapsed
        missing, unread, notes = self.report()
        rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
        return DeadlineExceededError(
            f"{self.what()} did not complete within {self.timeout:g} s on rank {rank} of "
            f"{size} ({MPI.Get_processor_name()}): "
            + self.situation(missing, unread, notes, error=True),
            tuple(missing),
        )
