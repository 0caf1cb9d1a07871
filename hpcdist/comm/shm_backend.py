"""The shared-memory backend: all-reduce through one ``MPI_Win_allocate_shared`` segment per node.

Layout of the segment (allocated by local rank 0, mapped by every rank of the node)::

    flags    n x 64 B        phase counter of each rank (one cache line each)
    prints   2 x n x 64 B    header fingerprint of each rank, double-buffered by phase parity
    headers  2 x n x 96 B    full headers, written only to describe a mismatch
    slots    2 x n x C B     each rank's input chunk, double-buffered by phase parity
    result   2 x C B         reduced chunk, double-buffered by phase parity

A *phase* is one barrier: a rank writes its flag, then waits until every flag has reached the
same phase. Whatever a rank writes into buffer ``p % 2`` before barrier ``p`` is read by the
others after it and before they arrive at barrier ``p + 1``; the next write to that buffer
happens after barrier ``p + 1``, so double-buffering needs no second barrier.

Small messages (up to ``direct_bytes``) take one barrier: every rank reduces all slots itself,
in rank order, so all ranks get bitwise-identical results. Larger messages are pipelined in
chunks of ``C`` bytes with one barrier per chunk (`ShmBackend._owned`): rank ``i`` owns the
``i``-th slice of each chunk. It copies into its slot only the slices the other ranks reduce,
reduces its own slice from its input and the others' slots (in rank order) straight into the
output, publishes that slice in the result buffer, and after the next barrier copies the other
ranks' slices out. The chunks stay in cache, so main memory sees each input once and each
output once, against several copies through MPI's eager and rendezvous buffers.

Tensor fusion (`ShmBackend.allreduce_gather`) runs the same pipeline on the concatenation of
many arrays without packing them first, into one output or back into the arrays themselves.

The header check rides on the first barrier: each rank writes its header's fingerprint next to
its data and, after the barrier, compares all fingerprints. On a mismatch, which every rank sees,
the ranks spend one more phase exchanging their full headers, then all raise the same error; the
phase counters stay in step, so the communicator remains usable.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np
from mpi4py import MPI

from hpcdist.comm.backend import HOST_DTYPES, DelegatingBackend, unsupported_codec
from hpcdist.comm.checks import HEADER_WORDS, Header, mismatch_error
from hpcdist.comm.deadline import Deadline
from hpcdist.comm.mpi_backend import MpiBackend
from hpcdist.comm.reduce_op import ReduceOp

if TYPE_CHECKING:
    from hpcdist.comm.compression import Codec

__all__ = ["ShmBackend", "reduce_in_rank_order"]

_LINE = 64
#: Largest message every rank reduces whole, after one barrier. With two ranks that beats the
#: two-barrier pipeline up to about 256 KiB on the test machine (in place, 2 ranks: 28 against
#: 56 us at 96 KiB, 47 against 72 us at 192 KiB, 79 against 80 us at 256 KiB); with more ranks
#: each rank would add up more slots, so the earlier 64 KiB stays.
DIRECT_BYTES_TWO_RANKS = 192 << 10
DIRECT_BYTES = 64 << 10


class ShmBackend(DelegatingBackend):
    """All-reduce, broadcast and barrier among the ranks of one node.

    All-gather, reduce-scatter and all-to-all go to an `MpiBackend` on ``comm``.

    Args:
        comm: A communicator whose ranks share memory (collective construction).
        chunk_bytes: Slot size ``C``.
        direct_bytes: Largest message reduced in one barrier by every rank; None:
            `DIRECT_BYTES_TWO_RANKS` with two ranks, else `DIRECT_BYTES`.
        ranks: Global rank of each member (for messages).
    """

    name = "shm"
    collectives = frozenset({"allreduce", "broadcast", "barrier"})
    #: numpy reduces float16 itself
    dtypes = HOST_DTYPES | {"e"}

    def __init__(
        self,
        comm: MPI.Intracomm,
        chunk_bytes: int = 1 << 20,
        direct_bytes: int | None = None,
        ranks: Sequence[int] | None = None,
    ) -> None:
        self.comm = comm
        self.n = n = comm.Get_size()
        self.me = comm.Get_rank()
        self.ranks = list(range(n)) if ranks is None else list(ranks)
        self.fallback = MpiBackend(comm, self.ranks)
        self.chunk = max(_LINE, chunk_bytes // _LINE * _LINE)
        if direct_bytes is None:
            direct_bytes = DIRECT_BYTES_TWO_RANKS if n == 2 else DIRECT_BYTES
        self.direct_bytes = min(direct_bytes, self.chunk)
        header_bytes = HEADER_WORDS * 8
        off_prints = n * _LINE
        off_headers = off_prints + 2 * n * _LINE
        off_slots = off_headers + 2 * n * header_bytes
        off_slots = -(-off_slots // 4096) * 4096
        off_result = off_slots + 2 * n * self.chunk
        total = off_result + 2 * self.chunk
        self.win = MPI.Win.Allocate_shared(total if self.me == 0 else 0, 1, comm=comm)
        buf, _ = self.win.Shared_query(0)
        mem = np.frombuffer(buf, dtype=np.uint8, count=total)
        self.flags = mem[:off_prints].view(np.int64)[:: _LINE // 8]
        # The barrier's words as memoryviews: a Python int in and out is 3x cheaper than a
        # numpy scalar on the small-message path. Rank r's word is at index r * 8 of each.
        self._flag_words = memoryview(mem[:off_prints]).cast("q")
        line = n * _LINE
        self._print_words = [
            memoryview(mem[off_prints + b * line : off_prints + (b + 1) * line]).cast("q")
            for b in range(2)
        ]
        self._me_word = self.me * (_LINE // 8)
        self._other_words = [r * (_LINE // 8) for r in range(n) if r != self.me]
        self.headers = mem[off_headers : off_headers + 2 * n * header_bytes].view(np.int64)
        self.headers = self.headers.reshape(2, n, HEADER_WORDS)
        self.slots = mem[off_slots:off_result].reshape(2, n, self.chunk)
        self.result = mem[off_result:total].reshape(2, self.chunk)
        self.others = [r for r in range(n) if r != self.me]
        self.phase = 0
        self._views: dict[tuple[int, str, int], list[np.ndarray]] = {}
        self.win.Lock_all(MPI.MODE_NOCHECK)
        if self.me == 0:
            self.flags[:] = 0
        self.win.Sync()
        comm.Barrier()
        self.win.Sync()

    # -- synchronisation ---------------------------------------------------------------------

    def _meet(self, print_: int | None, deadline: Deadline) -> bool:
        """One phase of the barrier, carrying this rank's header fingerprint ``print_``.

        The rank writes ``print_`` (None: none) and its flag, waits until every rank's flag has
        reached the phase, then compares the fingerprints the others posted in it.

        Returns:
            Whether another rank posted a different fingerprint (never without ``print_``).
        """
        me, others = self._me_word, self._other_words
        self.phase = phase = self.phase + 1
        flags = self._flag_words
        if print_ is not None:
            prints = self._print_words[phase & 1]
            prints[me] = print_
        self.win.Sync()
        flags[me] = phase
        for r in others:
            if flags[r] < phase:
                deadline.wait(lambda r=r: flags[r] >= phase)
        self.win.Sync()
        if print_ is not None:
            for r in others:
                if prints[r] != print_:
                    return True
        return False

    def _meet_checked(self, header: Header | None, deadline: Deadline) -> None:
        """One phase of the barrier with the header check (``header`` None: without)."""
        if header is None:
            self._meet(None, deadline)
        elif self._meet(header.fingerprint(), deadline):
            self._raise_mismatch(header, deadline)

    def _raise_mismatch(self, header: Header, deadline: Deadline) -> None:
        """Every rank saw the fingerprints differ: exchange full headers, raise everywhere."""
        self.headers[(self.phase + 1) & 1, self.me] = header.words
        self._meet(None, deadline)
        raise mismatch_error(self.headers[self.phase & 1].copy(), self.ranks)

    def typed_slots(self, b: int, dtype: np.dtype, count: int) -> list[np.ndarray]:
        """Typed views of the first ``count`` elements of every rank's slot in buffer ``b``."""
        key = (b, dtype.char, count)
        views = self._views.get(key)
        if views is None:
            if len(self._views) > 512:
                self._views.clear()
            nbytes = count * dtype.itemsize
            views = [self.slots[b, r, :nbytes].view(dtype) for r in range(self.n)]
            self._views[key] = views
        return views

    def small_views(
        self, dtype: np.dtype, shape: tuple[int, ...]
    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Every rank's slot as an array of ``shape`` and ``dtype``, in each parity's buffer.

        The small all-reduce's plans keep them, so that a call looks nothing up.
        """
        count = int(np.prod(shape, dtype=np.int64))
        return (
            [v.reshape(shape) for v in self.typed_slots(0, dtype, count)],
            [v.reshape(shape) for v in self.typed_slots(1, dtype, count)],
        )

    def allreduce_small(
        self,
        x: np.ndarray,
        views: tuple[list[np.ndarray], list[np.ndarray]],
        ufunc: np.ufunc,
        print_: int | None,
        header: Callable[[], Header],
        deadline: Deadline,
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        """Hot path: reduce a contiguous array of at most ``direct_bytes``.

        The protocol of `allreduce` with a header (`_allreduce_direct`), with the header's
        fingerprint computed by the caller and the full header built only for a mismatch.

        Args:
            x: The input (contiguous, on every rank the same size if the check passes).
            views: `small_views` of ``x``'s dtype and shape.
            ufunc: The reduction.
            print_: Fingerprint of this rank's header; None when headers are not compared.
            header: Builds the full header, called only to describe a mismatch.
            deadline: Bounds the wait.
            out: Where to write the result (may be ``x``); a new array by default (not for a
                0-d ``x``: numpy's ufuncs return scalars there).

        Returns:
            ``out``, or the new array.
        """
        slots = views[(self.phase + 1) & 1]
        slots[self.me][...] = x
        if self._meet(print_, deadline):
            self._raise_mismatch(header(), deadline)
        return reduce_in_rank_order(ufunc, slots, out)

    # -- collectives ----------------------------------------------------------------------------

    def allreduce(
        self,
        src: np.ndarray,
        dst: np.ndarray,
        op: ReduceOp,
        header: Header | None,
        deadline: Deadline,
        codec: Codec | None = None,
    ) -> None:
        """Reduce through the node's segment (in place when ``src is dst``)."""
        unsupported_codec(self, codec)
        if self.n == 1:
            self.barrier(header, deadline)
            if src is not dst:
                dst[:] = src
        elif src.nbytes <= self.direct_bytes:
            self._allreduce_direct(src, dst, op, header, deadline)
        else:
            self._owned(_Members([src]), None if dst is src else dst, op, header, deadline)

    def _allreduce_direct(
        self,
        src: np.ndarray,
        dst: np.ndarray,
        op: ReduceOp,
        header: Header | None,
        deadline: Deadline,
    ) -> None:
        dtype = src.dtype
        b = (self.phase + 1) % 2
        self.typed_slots(b, dtype, src.size)[self.me][:] = src
        self._meet_checked(header, deadline)
        if src.size == 0:
            return
        reduce_in_rank_order(op.ufunc, self.typed_slots(b, dtype, src.size), dst)

    def allreduce_gather(
        self,
        members: Sequence[np.ndarray],
        dst: np.ndarray | None,
        op: ReduceOp,
        header: Header | None,
        deadline: Deadline,
    ) -> None:
        """Reduce the concatenation of ``members`` into the flat ``dst``, without packing first.

        Tensor fusion through the segment: the members are copied straight into this rank's
        slot, chunk by chunk, and reduced straight into ``dst`` (which the caller hands out as
        views), so no pack buffer is filled first (see `_owned`). With ``dst`` None the
        results go back into the members themselves (``grouped_allreduce_``).

        Args:
            members: Arrays of one dtype (any shape; read in C order). In place: C-contiguous,
                writeable and not overlapping one another.
            dst: Contiguous 1-D result, as many elements as the members together; None to
                reduce in place.
            op: The reduction (not MEAN).
            header: Compared in the first barrier when not None.
            deadline: Bounds every wait.
        """
        source = _Members(members)
        count = source.starts[-1]
        if self.n == 1 or count == 0:
            self.barrier(header, deadline)
            if count and dst is not None:
                source.copy(dst, 0, count)
        else:
            self._owned(source, dst, op, header, deadline)

    def _owned(
        self,
        members: _Members,
        dst: np.ndarray | None,
        op: ReduceOp,
        header: Header | None,
        deadline: Deadline,
    ) -> None:
        """The split pipeline, where a rank reads its own slice from the members themselves.

        Rank ``i`` owns slice ``i`` of every chunk: it copies only the other slices into its
        slot, reduces its slice from its members and the other ranks' slots (in rank order)
        straight into ``dst`` (into the members when ``dst`` is None), and publishes it in the
        result buffer, from which the others copy it after the next barrier. Each rank copies
        in and reduces ``1/n`` less than the plain pipeline, and its own slice never passes
        through the segment. In place, a chunk's elements are overwritten only after the
        barrier that follows their copy into the slot, so no rank reads a reduced value.
        """
        dtype, itemsize = members.dtype, members.dtype.itemsize
        ufunc = op.ufunc
        n, me = self.n, self.me
        count = members.starts[-1]
        per_chunk = self.chunk // itemsize
        pending: tuple[int, int, int, int, int] | None = None
        for lo in range(0, count, per_chunk):
            hi = min(count, lo + per_chunk)
            m = hi - lo
            share = -(-m // n)
            s, e = min(m, me * share), min(m, (me + 1) * share)
            b = (self.phase + 1) & 1
            slots = [self.slots[b, r, : m * itemsize].view(dtype) for r in range(n)]
            members.copy(slots[me][:s], lo, lo + s)
            members.copy(slots[me][e:], lo + e, hi)
            self._meet_checked(header if lo == 0 else None, deadline)
            if pending is not None:
                self._copy_others(members, dst, *pending)
            mine = self.result[b, : m * itemsize].view(dtype)
            # In place, ranks 0 and 1 reduce into their members (read by the first ufunc
            # only) and then publish; a later rank reduces in the segment and copies back.
            into_members = dst is None and me < 2
            for x, at in members.pieces(lo + s, lo + e):
                k = at - lo
                size = x.size
                if dst is not None:
                    out = dst[at : at + size]
                else:
                    out = x if into_members else mine[k : k + size]
                if n == 2:  # without building the operand list
                    y = slots[1 - me][k : k + size]
                    ops: Sequence[np.ndarray] = (x, y) if me == 0 else (y, x)
                else:
                    ops = [x if r == me else slots[r][k : k + size] for r in range(n)]
                reduce_in_rank_order(ufunc, ops, out)
            if e > s:
                if into_members:
                    members.copy(mine[s:e], lo + s, lo + e)
                elif dst is None:
                    members.scatter(mine[s:e], lo + s, lo + e)
                else:
                    mine[s:e] = dst[lo + s : lo + e]
            pending = (b, lo, hi, s, e)
        self._meet(None, deadline)
        if pending is not None:
            self._copy_others(members, dst, *pending)

    def _copy_others(
        self,
        members: _Members,
        dst: np.ndarray | None,
        b: int,
        lo: int,
        hi: int,
        s: int,
        e: int,
    ) -> None:
        """Copy the slices of chunk ``lo:hi`` that the other ranks reduced (all but ``s:e``)."""
        reduced = self.result[b, : (hi - lo) * members.dtype.itemsize].view(members.dtype)
        if dst is None:
            members.scatter(reduced[:s], lo, lo + s)
            members.scatter(reduced[e:], lo + e, hi)
        else:
            dst[lo : lo + s] = reduced[:s]
            dst[lo + e : hi] = reduced[e:]

    def broadcast(
        self, buf: np.ndarray, root: int, header: Header | None, deadline: Deadline
    ) -> None:
        """Copy ``buf`` from ``root`` through the segment, chunk by chunk."""
        dtype, itemsize = buf.dtype, buf.dtype.itemsize
        per_chunk = self.chunk // itemsize
        count = buf.size
        for lo in range(0, max(count, 1), per_chunk):
            hi = min(count, lo + per_chunk)
            b = (self.phase + 1) % 2
            if self.me == root:
                self.slots[b, root, : (hi - lo) * itemsize].view(dtype)[:] = buf[lo:hi]
            self._meet_checked(header if lo == 0 else None, deadline)
            if self.me != root:
                buf[lo:hi] = self.slots[b, root, : (hi - lo) * itemsize].view(dtype)

    def barrier(self, header: Header | None, deadline: Deadline) -> None:
        """One phase of the segment's barrier (with the header check)."""
        self._meet_checked(header, deadline)

    def close(self) -> None:
        """Release the segment (collective)."""
        if self.win != MPI.WIN_NULL:
            self.win.Unlock_all()
            self.win.Free()


def reduce_in_rank_order(
    ufunc: np.ufunc, operands: Sequence[np.ndarray], out: np.ndarray | None = None
) -> np.ndarray:
    """``out = operands[0] op operands[1] op ...``, folded left in rank order.

    Every rank reduces in the same order, so all of them get bitwise-identical results (floating
    point addition is not associative). ``out`` may be ``operands[0]`` or ``operands[1]`` (both
    are read before ``out`` is written), never a later one.

    Args:
        ufunc: The reduction.
        operands: One array per rank (at least two, of at least one dimension when ``out`` is
            None), in rank order.
        out: The result; None: a new array.

    Returns:
        ``out``, or the new array.
    """
    out = ufunc(operands[0], operands[1], out=out)
    if len(operands) > 2:  # no loop set up for two ranks: this runs on the fast path
        for operand in operands[2:]:
            ufunc(out, operand, out=out)
    return out


class _Members:
    """Random access to element ranges of the concatenation of some arrays (C order)."""

    def __init__(self, members: Sequence[np.ndarray]) -> None:
        self.flats = [m if m.ndim == 1 else m.reshape(-1) for m in members]
        self.dtype = members[0].dtype if members else np.dtype(np.float32)
        #: The one array of a plain all-reduce (slices instead of the general walk).
        self.single = self.flats[0] if len(self.flats) == 1 else None
        self.starts = [0]
        for f in self.flats:
            self.starts.append(self.starts[-1] + f.size)

    def pieces(self, lo: int, hi: int) -> Iterator[tuple[np.ndarray, int]]:
        """The parts of the members that hold elements ``lo:hi``, with where each starts."""
        if self.single is not None:
            if hi > lo:
                yield self.single[lo:hi], lo
            return
        starts, flats = self.starts, self.flats
        i = bisect.bisect_right(starts, lo) - 1
        pos = lo
        while pos < hi:
            end = starts[i + 1]
            if end > pos:
                take = min(hi, end) - pos
                first = pos - starts[i]
                flat = flats[i]
                yield (flat if take == flat.size else flat[first : first + take]), pos
                pos += take
            i += 1

    def copy(self, out: np.ndarray, lo: int, hi: int) -> None:
        """Write elements ``lo:hi`` into ``out`` (one C call for all the pieces)."""
        if self.single is not None:
            out[: hi - lo] = self.single[lo:hi]
        elif hi > lo:
            np.concatenate([piece for piece, _ in self.pieces(lo, hi)], out=out[: hi - lo])

    def scatter(self, src: np.ndarray, lo: int, hi: int) -> None:
        """Write ``src`` into elements ``lo:hi`` (the members must be C-contiguous)."""
        if self.single is not None:
            self.single[lo:hi] = src
            return
        for piece, at in self.pieces(lo, hi):
            np.copyto(piece, src[at - lo : at - lo + piece.size])
