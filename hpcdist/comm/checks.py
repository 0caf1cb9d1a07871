"""Cross-rank header checks: collective fingerprints, header comparison and mismatch reports.

Every collective carries a `Header`: sequence number, kind, op, dtype and shape. Backends compare
headers across ranks before moving data (the shared-memory backend inside its first barrier,
the others with one small all-reduce), and ranks that disagree all raise the same
`CollectiveMismatchError`. The waits of those comparisons are bounded by a `Deadline`
(`hpcdist.comm.deadline`), so that a rank that never arrives produces `DeadlineExceededError`
naming it, instead of a hang.

dtypes are compared by kind, size and byte order (`dtype_code`): ``int64`` and ``longlong``
are the same type, ``>f8`` and ``<f8`` are not.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import numpy as np
from mpi4py import MPI

from hpcdist.comm.counters import COUNTING, add
from hpcdist.comm.deadline import Deadline, ranks_text
from hpcdist.errors import CollectiveMismatchError

__all__ = [
    "HEADER_WORDS",
    "POISON",
    "Header",
    "dtype_code",
    "fingerprint",
    "fingerprint_at",
    "header_print",
    "mismatch_error",
    "payload_bytes",
    "verify_headers",
]

HEADER_WORDS = 12
#: Dimensions that fit after the 6 fixed words (seq, kind, op, dtype, extra, ndim); a shape of
#: more dimensions is hashed into one word.
_MAX_DIMS = HEADER_WORDS - 6

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
    ints; shapes of more than ``HEADER_WORDS - 6`` (6) dimensions are hashed).
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
        if ndim <= _MAX_DIMS:
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

    def payload_bytes(self) -> int | None:
        """Bytes of the array this header describes; None without one (or a hashed shape)."""
        return payload_bytes(self.words)

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


_PAD = [(0,) * (_MAX_DIMS - k) for k in range(_MAX_DIMS + 1)]
_MASK = (1 << 62) - 1


#: Odd multiplier that spreads the sequence number over the fingerprint's 62 bits.
_SEQ_MIX = 0x9E3779B97F4A7C15


def header_print(
    kind: int, op: int, dtype_char: int, shape: tuple[int, ...], extra: int = 0
) -> int:
    """The part of a header's fingerprint that does not depend on its sequence number.

    A caller that repeats one collective (the small all-reduce's plans) computes it once, then
    `fingerprint_at` per call. Only ints and tuples of ints are hashed, so the value is the
    same in every process (``PYTHONHASHSEED`` randomises only str and bytes hashes).
    """
    return hash((kind, op, dtype_char, extra, shape))


def fingerprint_at(base: int, seq: int) -> int:
    """The 62-bit fingerprint of the header ``base`` (`header_print`) at sequence number ``seq``."""
    return (base + seq * _SEQ_MIX) & _MASK


def fingerprint(
    seq: int, kind: int, op: int, dtype_char: int, shape: tuple[int, ...], extra: int = 0
) -> int:
    """The 62-bit fingerprint of a header, computed without building one."""
    return fingerprint_at(header_print(kind, op, dtype_char, shape, extra), seq)


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
            f"collective {what} failed: invalid arguments on rank(s) {ranks_text(bad)} "
            "(see the error on those ranks)",
            descriptions,
        )
    groups: dict[str, list[int]] = {}
    for rank, text in zip(ranks, descriptions, strict=True):
        groups.setdefault(text, []).append(rank)
    parts = [f"rank{'s' if len(r) > 1 else ''} {ranks_text(r)} sent {d}" for d, r in groups.items()]
    return CollectiveMismatchError(
        "collective mismatch across ranks: " + "; ".join(parts), descriptions
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
    if COUNTING:
        add("collective.header", buf.nbytes)
    request = comm.Iallreduce(buf, out, op=MPI.MIN)
    deadline.wait(request.Test)
    if out[0] == -out[1]:
        return
    table = np.empty((comm.Get_size(), HEADER_WORDS), dtype=np.int64)
    if COUNTING:
        add("collective.header_table", HEADER_WORDS * 8)
    request = comm.Iallgather(np.array(header.words, dtype=np.int64), table)
    deadline.wait(request.Test)
    raise mismatch_error(table, ranks)
