"""Cross-rank safety checks: collective fingerprints, deadlines and stall reports.

Every collective carries a `Header`: sequence number, kind, op, dtype and shape. Backends compare
headers across ranks before moving data (the shared-memory backend inside its first barrier,
the others with one small all-reduce), and ranks that disagree all raise the same
`CollectiveMismatchError`. Waiting is done by polling with a deadline, so that a rank that
never arrives produces `DeadlineExceededError` naming it, instead of a hang. The stall warning
and the error say what the wait lacks: ranks read as not arrived (from the `ArrivalBoard` of
`hpcdist.comm.envelope`), ranks whose entry could not be read in time (not known), or, when
every rank has arrived, data that has not finished moving (the bytes outstanding where known).

dtypes are compared by kind, size and byte order (`dtype_code`): ``int64`` and ``longlong``
are the same type, ``>f8`` and ``<f8`` are not.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
from mpi4py import MPI

from hpcdist.errors import CollectiveMismatchError, DeadlineExceededError
from hpcdist.log import get_logger

if TYPE_CHECKING:
    from hpcdist.comm.envelope import ArrivalBoard

__all__ = [
    "CLOSING",
    "GAVE_UP",
    "HEADER_WORDS",
    "LEFT",
    "NO_ANSWER",
    "POISON",
    "Deadline",
    "Header",
    "dtype_code",
    "fingerprint",
    "mismatch_error",
    "payload_bytes",
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

#: The ``extra`` word of a poisoned header: the rank's arguments are invalid (never a root or a
#: pack layout). Every rank sees the headers differ; `mismatch_error` names the poisoned ranks.
POISON = -0x5BAD

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

#: Flag bit of a `dtype_code`: the dtype is big-endian.
_BIG = 0x100
_CODES: dict[np.dtype, int] = {}


def dtype_code(dtype: np.dtype) -> int:
    """The number that stands for ``dtype`` in a header: kind, size and byte order.

    Numeric dtypes of the same kind and size share one code (``int64`` and ``longlong`` are the
    same type; the code is ``ord`` of numpy's canonical character, so ``ord("f")`` is float32);
    big-endian ones set a flag bit, so arrays of the same type but different byte orders differ.
    """
    code = _CODES.get(dtype)
    if code is None:
        char = dtype.char
        if dtype.kind in "biufc":
            char = np.dtype(f"{dtype.kind}{dtype.itemsize}").char
        big = dtype.byteorder == ">" or (dtype.byteorder == "=" and sys.byteorder == "big")
        code = _CODES[dtype] = ord(char) | (_BIG if big else 0)
    return code


def describe_dtype(code: int) -> str:
    """The dtype name of a `dtype_code`, e.g. ``float32`` or ``float64 (big-endian)``."""
    try:
        name = np.dtype(chr(code & 0xFF)).name
    except TypeError:
        name = f"dtype{code & 0xFF}"
    return f"{name} (big-endian)" if code & _BIG else name


class Header:
    """What one rank is about to do in one collective.

    Args:
        seq: Sequence number of the collective on this communicator.
        kind: Code of the collective (see ``KINDS``).
        op: Code of the reduce op, 0 if none.
        dtype_char: The dtype's `dtype_code` (``ord(dtype.char)`` for native numeric dtypes);
            0 if none.
        shape: The shape that must agree (for allgather, without the first axis).
        extra: One more number that must agree (root, pack layout hash, ...), or `POISON`.

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
        """The dtype's `dtype_code`, 0 if none."""
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
        seq, kind, op, dcode, extra, ndim = (int(w) for w in words[:6])
        name = _KIND_NAMES.get(kind, f"kind{kind}")
        text = f"{name} #{seq}"
        if op:
            text += f" {_OP_NAMES.get(op, op)}"
        if dcode:
            dims = "..." if ndim < 0 else ", ".join(str(int(d)) for d in words[6 : 6 + ndim])
            text += f" {describe_dtype(dcode)}[{dims}]"
        if extra == POISON:
            text += " (invalid arguments)"
        elif extra:
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

    When some headers are poisoned (`POISON`: those ranks' arguments are invalid and they raise
    their own error), the message names those ranks instead of listing what each rank sent.

    Args:
        table: ``(n, HEADER_WORDS)`` int64 headers.
        ranks: Rank of each row (default ``0..n-1``).

    Returns:
        An error whose message groups ranks by what they sent.
    """
    ranks = list(range(len(table))) if ranks is None else list(ranks)
    descriptions = tuple(Header.describe_words(row) for row in table)
    bad = [rank for rank, row in zip(ranks, table, strict=True) if row[4] == POISON]
    if bad:
        good = [row for row in table if row[4] != POISON]
        what = Header.describe_words(good[0] if good else table[0]).replace(
            " (invalid arguments)", ""
        )
        return CollectiveMismatchError(
            f"collective {what} failed: invalid arguments on rank(s) {_ranks_text(bad)} "
            "(see the error on those ranks)",
            descriptions,
        )
    groups: dict[str, list[int]] = {}
    for rank, text in zip(ranks, descriptions, strict=True):
        groups.setdefault(text, []).append(rank)
    parts = [
        f"rank{'s' if len(r) > 1 else ''} {_ranks_text(r)} sent {d}" for d, r in groups.items()
    ]
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
        seq: Sequence number of the collective, when no header is given (`CLOSE`: the wait for
            every rank to close the communicator).
    """

    __slots__ = (
        "_warned",
        "board",
        "header",
        "header_fn",
        "progress",
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
        #: (bytes moved, bytes in all) of this rank's transfer, where a backend reports it.
        self.progress: tuple[int, int] | None = None
        self._warned = False

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
            text = f"rank(s) {_ranks_text(missing)} never joined" if error else ""
            text = text or f"ranks not yet arrived: {_ranks_text(missing)}"
            text += notes
        elif self.board is None:
            return "all ranks joined but the transfer did not finish" if error else "unknown"
        elif not unread:
            text = f"every rank {'joined' if error else 'has arrived'} ({self.board.size} of "
            text += f"{self.board.size}); the data has not finished moving{self._outstanding()}"
            return text
        else:
            arrived = [r for r in range(self.board.size) if r not in unread]
            text = f"rank(s) {_ranks_text(arrived)} arrived"
        if unread:
            text += (
                f"; rank(s) {_ranks_text(unread)} unknown (no answer within "
                f"{self.board.GRACE:g} s: stopped, busy outside MPI, or behind a saturated link)"
            )
            if not missing:
                text += f"; if they arrived, the data has not finished moving{self._outstanding()}"
        return text

    def _outstanding(self) -> str:
        """``": 3.0 MiB of 4.0 MiB outstanding on this rank"``, or what is known of it."""
        if self.progress is not None:
            done, total = self.progress
            return f": {_size(total - done)} of {_size(total)} outstanding on this rank"
        if self.header is None:
            return ""
        nbytes = payload_bytes(self.header.words)
        if nbytes is None:
            return ""
        return f": up to {_size(nbytes)} outstanding on this rank (no partial progress is known)"

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
        if self.timeout is not None and elapsed > self.timeout:
            missing, unread, notes = self.report()
            rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
            raise DeadlineExceededError(
                f"{self.what()} did not complete within {self.timeout:g} s on rank {rank} of "
                f"{size} ({MPI.Get_processor_name()}): "
                + self.situation(missing, unread, notes, error=True),
                tuple(missing),
            )


def payload_bytes(words: Sequence[int]) -> int | None:
    """Bytes of the array described by a header's words; None without one (or hashed shape)."""
    dcode, ndim = int(words[3]), int(words[5])
    if not dcode or ndim < 0:
        return None
    try:
        itemsize = np.dtype(chr(dcode & 0xFF)).itemsize
    except TypeError:
        return None
    return itemsize * int(np.prod([int(d) for d in words[6 : 6 + ndim]], dtype=np.int64))


def _size(nbytes: int) -> str:
    return f"{nbytes / (1 << 20):.1f} MiB" if nbytes >= 1 << 20 else f"{nbytes} bytes"


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
