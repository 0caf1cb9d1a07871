"""Cross-rank safety checks: collective fingerprints, deadlines and stall reports.

Every collective carries a `Header`: sequence number, kind, op, dtype and shape. Backends compare
headers across ranks before moving data (the shared-memory backend inside its first barrier,
the others with one small all-reduce), and ranks that disagree all raise the same
`CollectiveMismatchError`. Waiting is done by polling with a deadline, so that a rank that
never arrives produces `DeadlineExceededError` naming it, instead of a hang.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence

import numpy as np
from mpi4py import MPI

from hpcdist.errors import CollectiveMismatchError, DeadlineExceededError
from hpcdist.log import get_logger

__all__ = [
    "HEADER_WORDS",
    "ArrivalBoard",
    "Deadline",
    "Header",
    "fingerprint",
    "mismatch_error",
    "verify_headers",
]

HEADER_WORDS = 12
_MAX_DIMS = HEADER_WORDS - 5  # ndim + dims fit in the words after the 5 fixed ones

KINDS = {
    "allreduce": 1,
    "grouped_allreduce": 2,
    "broadcast": 3,
    "allgather": 4,
    "reduce_scatter": 5,
    "alltoall": 6,
    "barrier": 7,
    "allgather_object": 8,
    "broadcast_object": 9,
    # the same collectives carried by NCCL on GPU arrays (a rank staging through the host
    # instead would be a mismatch: the two paths cannot meet)
    "nccl_allreduce": 11,
    "nccl_grouped_allreduce": 12,
    "nccl_broadcast": 13,
    "nccl_allgather": 14,
    "nccl_reduce_scatter": 15,
}
_KIND_NAMES = {v: k for k, v in KINDS.items()}
_OP_NAMES = {0: "", 1: "SUM", 2: "MEAN", 3: "MIN", 4: "MAX", 5: "PROD"}


class Header:
    """What one rank is about to do in one collective.

    Args:
        seq: Sequence number of the collective on this communicator.
        kind: Code of the collective (see ``KINDS``).
        op: Code of the reduce op, 0 if none.
        dtype_char: ``ord(dtype.char)``; 0 if none.
        shape: The shape that must agree (for allgather, without the first axis).
        extra: One more number that must agree (root, pack layout hash, ...).

    ``words`` is the fixed-length encoding that ranks compare (a tuple of ``HEADER_WORDS``
    ints; shapes of more than ``HEADER_WORDS - 7`` dimensions are hashed).
    """

    __slots__ = ("extra", "kind", "op", "seq", "shape", "words")

    def __init__(
        self,
        seq: int,
        kind: int,
        op: int = 0,
        dtype_char: int = 0,
        shape: tuple[int, ...] = (),
        extra: int = 0,
    ) -> None:
        self.seq, self.kind, self.op, self.shape, self.extra = seq, kind, op, shape, extra
        ndim = len(shape)
        if ndim <= _MAX_DIMS - 1:
            self.words = (seq, kind, op, dtype_char, extra, ndim, *shape, *_PAD[ndim])
        else:
            self.words = (seq, kind, op, dtype_char, extra, -ndim, hash(shape), *_PAD[1])

    @property
    def dtype_char(self) -> int:
        """``ord(dtype.char)``, 0 if none."""
        return self.words[3]

    def fingerprint(self) -> int:
        """A 62-bit hash of the header (deterministic across processes: ints only)."""
        return fingerprint(self.seq, self.kind, self.op, self.words[3], self.shape, self.extra)

    def replace_extra(self, extra: int) -> Header:
        """Return a copy with another ``extra`` word."""
        return Header(self.seq, self.kind, self.op, self.dtype_char, self.shape, extra)

    @staticmethod
    def describe_words(words: Sequence[int]) -> str:
        """Human-readable form of encoded words, e.g. ``allreduce #3 SUM float32[4, 3]``."""
        seq, kind, op, dchar, extra, ndim = (int(w) for w in words[:6])
        name = _KIND_NAMES.get(kind, f"kind{kind}")
        text = f"{name} #{seq}"
        if op:
            text += f" {_OP_NAMES.get(op, op)}"
        if dchar:
            dims = "..." if ndim < 0 else ", ".join(str(int(d)) for d in words[6 : 6 + ndim])
            text += f" {np.dtype(chr(dchar)).name}[{dims}]"
        if extra:
            text += f" ({extra})"
        return text

    def describe(self) -> str:
        """Human-readable form of this header."""
        return self.describe_words(self.words)


_PAD = [(0,) * (HEADER_WORDS - 6 - k) for k in range(HEADER_WORDS - 5)]
_MASK = (1 << 62) - 1


def fingerprint(
    seq: int, kind: int, op: int, dtype_char: int, shape: tuple[int, ...], extra: int = 0
) -> int:
    """The 62-bit fingerprint of a header, computed without building one (hot path).

    Only ints and tuples of ints are hashed, so the value is the same in every process
    (``PYTHONHASHSEED`` randomises only str and bytes hashes).
    """
    return hash((seq, kind, op, dtype_char, extra, shape)) & _MASK


def mismatch_error(
    table: np.ndarray, ranks: Sequence[int] | None = None
) -> CollectiveMismatchError:
    """Build the error for a table of encoded headers, one row per rank.

    Args:
        table: ``(n, HEADER_WORDS)`` int64 headers.
        ranks: Rank of each row (default ``0..n-1``).

    Returns:
        An error whose message groups ranks by what they sent.
    """
    ranks = list(range(len(table))) if ranks is None else list(ranks)
    groups: dict[str, list[int]] = {}
    for rank, row in zip(ranks, table, strict=True):
        groups.setdefault(Header.describe_words(row), []).append(rank)
    parts = [
        f"rank{'s' if len(r) > 1 else ''} {_ranks_text(r)} sent {d}" for d, r in groups.items()
    ]
    descriptions = tuple(Header.describe_words(row) for row in table)
    return CollectiveMismatchError(
        "collective mismatch across ranks: " + "; ".join(parts), descriptions
    )


def _ranks_text(ranks: Sequence[int]) -> str:
    return ",".join(str(r) for r in ranks)


class Deadline:
    """Polls for completion with a deadline, a stall warning and polite spinning.

    Args:
        timeout: Seconds before `DeadlineExceededError`; None waits forever.
        stall_warning: Seconds before a warning naming the missing ranks; None never.
        header: The collective (for messages).
        board: Where ranks publish their progress, to name the missing ones; None if unknown.
        seq: Sequence number of the collective, when no header is given.
    """

    __slots__ = (
        "_warned",
        "board",
        "header",
        "header_fn",
        "seq",
        "stall_warning",
        "start",
        "timeout",
    )

    #: Iterations spent spinning before yielding the processor.
    SPINS = 200
    #: Seconds of yielding before sleeping.
    YIELD_S = 0.02

    def __init__(
        self,
        timeout: float | None,
        stall_warning: float | None,
        header: Header | None = None,
        board: ArrivalBoard | None = None,
        seq: int | None = None,
    ) -> None:
        self.start: float | None = None  # set at the first slow poll: spinning is not waiting
        self.timeout = timeout
        self.stall_warning = stall_warning
        self.header = header
        self.board = board
        self.seq = header.seq if seq is None and header is not None else seq
        self.header_fn: Callable[[], Header] | None = None  # builds the header lazily
        self._warned = False

    def what(self) -> str:
        """The collective, for messages."""
        if self.header is None and self.header_fn is not None:
            self.header = self.header_fn()
        if self.header is not None:
            return self.header.describe()
        return f"collective #{self.seq}" if self.seq is not None else "collective"

    def missing(self) -> list[int]:
        """The ranks that have not entered this collective (empty if unknown)."""
        if self.board is None or self.seq is None:
            return []
        return self.board.behind(self.seq)

    def wait(self, done: Callable[[], bool]) -> None:
        """Return once ``done()`` is true.

        Raises:
            DeadlineExceededError: The timeout passed first.
        """
        spins = 0
        while not done():
            spins += 1
            if spins >= self.SPINS:
                self.poll_slow(spins)

    def poll_slow(self, spins: int) -> None:
        """Yield the processor, warn about stalls, enforce the deadline.

        For the first `YIELD_S` seconds the wait only yields (``sched_yield`` returns at once
        when no other process wants the core, so latency stays that of spinning); after that
        it sleeps with a growing back-off (up to 1 ms), so a long wait costs no CPU.
        """
        now = time.monotonic()
        if self.start is None:
            self.start = now
        elapsed = now - self.start
        if elapsed < self.YIELD_S:
            os.sched_yield()
        else:
            time.sleep(min(1e-3, 1e-6 * (spins - self.SPINS + 1)))
        if self.stall_warning is not None and not self._warned and elapsed > self.stall_warning:
            self._warned = True
            get_logger().warning(
                "%s has waited %.0f s; ranks not yet arrived: %s",
                self.what(),
                elapsed,
                _ranks_text(self.missing()) or "unknown",
            )
        if self.timeout is not None and elapsed > self.timeout:
            missing = self.missing()
            rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
            raise DeadlineExceededError(
                f"{self.what()} did not complete within {self.timeout:g} s on rank {rank} of "
                f"{size} ({MPI.Get_processor_name()}): "
                + (
                    f"rank(s) {_ranks_text(missing)} never joined"
                    if missing
                    else "all ranks joined but the transfer did not finish"
                ),
                tuple(missing),
            )


class ArrivalBoard:
    """Each rank publishes the sequence number of the collective it last entered.

    One int64 per rank in an RMA window; publishing is a local store. Only when a collective is
    slow are the other ranks' numbers read (``Rget``, bounded in time), to name the ranks that
    have not arrived.

    Args:
        comm: The library's communicator (collective construction).
    """

    def __init__(self, comm: MPI.Intracomm) -> None:
        self.comm = comm
        self.win = MPI.Win.Allocate(8, 8, comm=comm)
        self.mine = np.frombuffer(self.win.tomemory(), dtype=np.int64, count=1)
        self.mine[0] = -1
        comm.Barrier()
        self.win.Lock_all(MPI.MODE_NOCHECK)

    def publish(self, seq: int) -> None:
        """Record that this rank entered collective ``seq``."""
        self.mine[0] = seq

    def behind(self, seq: int, ranks: Sequence[int] | None = None, grace: float = 2.0) -> list[int]:
        """Return the ranks whose last collective is before ``seq`` (or did not answer)."""
        self.win.Sync()
        ranks = range(self.comm.Get_size()) if ranks is None else ranks
        values = np.full(self.comm.Get_size(), -2, dtype=np.int64)
        requests = {}
        for r in ranks:
            if r != self.comm.Get_rank():
                requests[r] = self.win.Rget([values[r : r + 1], MPI.INT64_T], r)
        values[self.comm.Get_rank()] = self.mine[0]
        end = time.monotonic() + grace
        while requests and time.monotonic() < end:
            for r in [r for r, req in requests.items() if req.Test()]:
                del requests[r]
            time.sleep(1e-4)
        return [r for r in ranks if r in requests or values[r] < seq]

    def free(self) -> None:
        """Release the window (collective)."""
        if self.win != MPI.WIN_NULL:
            self.win.Unlock_all()
            self.win.Free()


def verify_headers(
    comm: MPI.Intracomm,
    header: Header,
    deadline: Deadline,
    ranks: Sequence[int] | None = None,
) -> None:
    """Check with one small all-reduce that every rank of ``comm`` sent the same header.

    Args:
        comm: The communicator.
        header: This rank's header.
        deadline: Bounds the wait.
        ranks: Global rank of each member of ``comm``, for messages.

    Raises:
        CollectiveMismatchError: On every rank, when headers differ.
    """
    fp = header.fingerprint()
    buf = np.array([fp, -fp], dtype=np.int64)
    out = np.empty(2, dtype=np.int64)
    request = comm.Iallreduce(buf, out, op=MPI.MIN)
    deadline.wait(request.Test)
    if out[0] == -out[1]:
        return
    table = np.empty((comm.Get_size(), HEADER_WORDS), dtype=np.int64)
    request = comm.Iallgather(np.array(header.words, dtype=np.int64), table)
    deadline.wait(request.Test)
    raise mismatch_error(table, ranks)
