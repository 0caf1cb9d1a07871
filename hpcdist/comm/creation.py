"""Creating communicators under a deadline: every rank arrives, or the missing ones are named.

MPI's constructors of communicators and windows (``Dup``, ``Split``, ``Win.Allocate``) are
collective and blocking: one rank that never calls them leaves the others waiting for ever.
hpcdist makes its private communicators with `dup` (``Communicator``, ``p2p.Channel``) and
guards the constructors of its windows (``hpcdist.comm.rma.Window``) with `arrive`; both are
bounded by the deadline of every collective (``HPCDIST_TIMEOUT_SECONDS``) and raise
`DeadlineExceededError` naming the ranks that never joined, on every rank that did.

**The protocol**, on each rank of the parent communicator ``comm``:

1. *Gate.* Post a nonblocking collective that completes only once every rank has entered it:
   ``Idup`` (MPI-3's ``MPI_Comm_idup``) for `dup`, ``Ibarrier`` for `arrive`; poll it through a
   `hpcdist.utils.waiting.Waiter` (one clock and one deadline for the whole creation). When all
   ranks are there it completes at once and nothing else is sent.
2. *Announce* (slow path only). A gate that has not completed after `grace` seconds (at most
   `GRACE_S`, at most half the deadline and half the stall warning) makes the rank announce
   itself: one empty message to every other rank of ``comm``, with the tag reserved for it in
   `hpcdist.comm.p2p` (`TAG_ARRIVED`); from then on each poll also takes in the announcements
   of the others. A rank that finds an announcement waiting announces itself at once.
3. *Name.* At the deadline, the ranks from which no announcement came never joined: each rank
   raises `DeadlineExceededError` with them. Every rank decides from what it received, nobody
   waits for a coordinator, so the names reach every arrived rank within its own deadline, rank
   0 among the missing or not. They are right: a rank R that arrives before this rank's
   deadline ``start + T`` has announced by then. Either R arrived before ``start + grace`` and
   announced by ``start + 2 * grace <= start + T``, or it arrived after this rank's own
   announcement (sent at ``start + grace``), found it waiting at its first poll and answered
   at once.
4. *Clean up.* Once the gate completes, announcements still in flight must not stay in the
   parent's queue, where a receive of the user's with ``MPI.ANY_TAG`` could take them. The
   ranks all-reduce whether anyone announced (one integer, on the new communicator for `dup`,
   on ``comm`` for `arrive`, under the same deadline) and, if someone did, all-gather who did;
   each rank then receives the announcements it still lacks (they are on their way), and its
   own sends complete.

Cost: the normal path adds one all-reduce of one integer to the ``Dup``; the slow path (a rank
more than `grace` late) adds ``size - 1`` empty messages per rank and one all-gather.

After a deadline the gate stays posted on ``comm`` (MPI cannot cancel a collective): ``comm``
cannot be used for another collective, and MPI cannot finalise cleanly. The creation is
recorded with `hpcdist.comm.lifetime.abandon`, so that the end of the program aborts the job
(exit code `hpcdist.exit_codes.EXIT_DEADLINE_CODE`) instead of hanging in ``MPI_Finalize``; an
uncaught error with the abort hook installed ends it at once (exit code 17).
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from hpcdist.comm import lifetime
from hpcdist.comm.counters import COUNTING, add
from hpcdist.comm.deadline import ranks_text
from hpcdist.errors import DeadlineExceededError
from hpcdist.logger import get_logger
from hpcdist.settings import get_settings
from hpcdist.utils.waiting import Waiter

__all__ = ["GRACE_S", "TAG_ARRIVED", "arrive", "arrive_in_time", "dup", "grace"]

#: Tag of the announcements (reserved under this number in `hpcdist.comm.p2p`).
TAG_ARRIVED = 95
#: Longest wait for the gate before a rank announces itself, in seconds.
GRACE_S = 1.0

_EMPTY = np.zeros(0, dtype=np.uint8)


def grace(timeout: float | None, stall_warning: float | None) -> float:
    """Seconds a rank waits for the gate before announcing itself (see the module docstring).

    At most `GRACE_S`, half the deadline and half the stall warning, so that the names are
    complete at either.
    """
    limits = [GRACE_S] + [t / 2 for t in (timeout, stall_warning) if t is not None]
    return min(limits)


class _Arrival(Waiter):
    """The wait of one creation: the gate, the announcements, the names at the deadline."""

    __slots__ = ("comm", "gate", "grace", "heard", "me", "sends", "size", "what")

    def __init__(
        self,
        comm: MPI.Intracomm,
        gate: MPI.Request,
        what: str,
        timeout: float | None,
        stall_warning: float | None,
    ) -> None:
        super().__init__(timeout, stall_warning)
        self.comm = comm
        self.gate = gate
        self.what = what
        self.me = comm.Get_rank()
        self.size = comm.Get_size()
        self.grace = grace(timeout, stall_warning)
        #: Ranks whose announcement this rank received.
        self.heard: set[int] = set()
        #: This rank's announcements (None: not announced).
        self.sends: list[MPI.Request] | None = None

    def poll(self) -> bool:
        """Whether the gate completed; past the grace (or when asked), announce and listen."""
        if self.gate.Test():
            return True
        if self.sends is None and self.elapsed() > self.grace:
            self.announce()
        if self.listen() and self.sends is None:
            self.announce()  # another rank is waiting for names: answer at once
        return False

    def announce(self) -> None:
        """Send the empty announcement to every other rank (once)."""
        if COUNTING:
            add("p2p.announce", 0, self.size - 1)
        self.sends = [
            self.comm.Isend([_EMPTY, MPI.BYTE], dest=r, tag=TAG_ARRIVED)
            for r in range(self.size)
            if r != self.me
        ]

    def listen(self) -> bool:
        """Take in the announcements waiting; whether there were any."""
        status = MPI.Status()
        found = False
        while self.comm.Iprobe(source=MPI.ANY_SOURCE, tag=TAG_ARRIVED, status=status):
            source = status.Get_source()
            self.comm.Recv([_EMPTY, MPI.BYTE], source=source, tag=TAG_ARRIVED)
            self.heard.add(source)
            found = True
        return found

    def missing(self) -> list[int]:
        """The ranks not heard from (this rank excluded)."""
        self.listen()
        return [r for r in range(self.size) if r != self.me and r not in self.heard]

    def world_ranks(self, ranks: list[int]) -> str:
        """``" (world ranks 4,6)"`` when ``comm`` is not the world, else empty."""
        if not ranks or MPI.Comm.Compare(self.comm, MPI.COMM_WORLD) in (MPI.IDENT, MPI.CONGRUENT):
            return ""
        group, world = self.comm.Get_group(), MPI.COMM_WORLD.Get_group()
        try:
            return f" (world ranks {ranks_text(MPI.Group.Translate_ranks(group, ranks, world))})"
        finally:
            group.Free()
            world.Free()

    def situation(self) -> tuple[list[int], str]:
        """The ranks that never joined and the words for them."""
        if self.sends is None:
            self.announce()  # (a deadline shorter than the first slow polls)
        missing = self.missing()
        if not missing:
            text = (
                f"every rank arrived ({self.size} of {self.size}) but the collective creation "
                "did not complete"
            )
        else:
            text = f"rank(s) {ranks_text(missing)} never joined{self.world_ranks(missing)}"
        return missing, text

    def stalled(self, elapsed: float) -> None:
        """Warn once, naming the ranks not yet arrived."""
        missing, text = self.situation()
        get_logger().warning(
            "%s has waited %.0f s on rank %d of %d; %s%s",
            self.what,
            elapsed,
            self.me,
            self.size,
            text.replace("never joined", "not yet arrived") if missing else text,
            ""
            if self.timeout is not None
            else (
                ". No deadline is set, so this rank waits for ever: set "
                "HPCDIST_TIMEOUT_SECONDS=<seconds> so that the job ends with an error instead"
            ),
        )

    def expired(self, elapsed: float) -> DeadlineExceededError:
        """The error at the deadline, naming the ranks that never joined."""
        missing, text = self.situation()
        message = (
            f"{self.what} did not complete within {self.timeout:g} s (waited {elapsed:.1f} s) "
            f"on rank {self.me} of {self.size} ({MPI.Get_processor_name()}): {text}. The "
            "parent communicator is unusable now; the job ends at the exit of the program"
        )
        lifetime.abandon(message)
        return DeadlineExceededError(message, tuple(missing))


def _clean_up(arrival: _Arrival, comm: MPI.Intracomm) -> None:
    """Step 4: every announcement is received and every send completes (collective on comm)."""
    mine = np.array([arrival.sends is not None], dtype=np.int32)
    anyone = np.zeros(1, dtype=np.int32)
    arrival.wait(comm.Iallreduce(mine, anyone, op=MPI.MAX).Test)
    if not anyone[0]:
        return
    who = np.zeros(arrival.size, dtype=np.int32)
    arrival.wait(comm.Iallgather(mine, who).Test)
    for r in np.flatnonzero(who).tolist():
        if r != arrival.me and r not in arrival.heard:
            arrival.wait(lambda r=r: arrival.comm.Iprobe(source=r, tag=TAG_ARRIVED))
            arrival.comm.Recv([_EMPTY, MPI.BYTE], source=r, tag=TAG_ARRIVED)
            arrival.heard.add(r)
    if arrival.sends is not None:
        arrival.wait(lambda: MPI.Request.Testall(arrival.sends))


def dup(
    comm: MPI.Intracomm,
    what: str,
    timeout: float | None,
    stall_warning: float | None,
) -> MPI.Intracomm:
    """``comm.Dup()`` bounded by ``timeout`` (collective over ``comm``; see the module docstring).

    Args:
        comm: The parent communicator.
        what: The creation, for messages (``"creating hpcdist's communicator"``).
        timeout: Seconds before `DeadlineExceededError`; None waits for ever (with a stall
            warning naming the missing ranks).
        stall_warning: Seconds before that warning; None never.

    Returns:
        The new communicator.

    Raises:
        DeadlineExceededError: Some ranks did not join within ``timeout`` (``missing_ranks``:
            their ranks in ``comm``); the error is raised on every rank that joined.
    """
    if comm.Get_size() == 1:
        return comm.Dup()
    new, request = comm.Idup()
    arrival = _Arrival(comm, request, what, timeout, stall_warning)
    arrival.wait(arrival.poll)
    _clean_up(arrival, new)
    return new


def arrive(
    comm: MPI.Intracomm,
    what: str,
    timeout: float | None,
    stall_warning: float | None,
) -> None:
    """Return once every rank of ``comm`` has called it, within ``timeout`` (collective).

    Guards a blocking collective constructor (``Split``, ``Win.Allocate``) that follows it:
    call it right before, on the same ranks. Same protocol as `dup`, with ``Ibarrier`` as the
    gate.

    Raises:
        DeadlineExceededError: Some ranks did not join within ``timeout`` (named, by their
            ranks in ``comm``), on every rank that joined.
    """
    if comm.Get_size() == 1:
        return
    arrival = _Arrival(comm, comm.Ibarrier(), what, timeout, stall_warning)
    arrival.wait(arrival.poll)
    _clean_up(arrival, comm)


def arrive_in_time(comm: MPI.Intracomm, what: str) -> None:
    """`arrive` under the settings' deadline and stall warning (``HPCDIST_TIMEOUT_SECONDS``)."""
    settings = get_settings()
    arrive(comm, what, settings.timeout_seconds, settings.stall_warning_seconds)
