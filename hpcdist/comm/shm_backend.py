"""The shared-memory backend: all-reduce through one ``MPI_Win_allocate_shared`` segment per node.

Layout of the segment (allocated by local rank 0, mapped by every rank of the node)::

    flags    n x 64 B        phase counter of each rank (one cache line each)
    headers  2 x n x 96 B    collective headers, double-buffered by phase parity
    slots    2 x n x C B     each rank's input chunk, double-buffered by phase parity
    result   2 x C B         reduced chunk, double-buffered by phase parity

A *phase* is one barrier: a rank writes its flag, then waits until every flag has reached the
same phase. Whatever a rank writes into buffer ``p % 2`` before barrier ``p`` is read by the
others after it and before they arrive at barrier ``p + 1``; the next write to that buffer
happens after barrier ``p + 1``, so double-buffering needs no second barrier.

Small messages (up to ``direct_bytes``) take one barrier: every rank reduces all slots itself,
in rank order, so all ranks get bitwise-identical results. Larger messages are pipelined in
chunks of ``C`` bytes with one barrier per chunk: rank ``i`` reduces the ``i``-th slice of the
chunk into the result buffer and every rank copies the whole reduced chunk out after the next
barrier. The chunks stay in cache, so main memory sees each input once and each output once,
against several copies through MPI's eager and rendezvous buffers.

The header check rides on the first barrier: each rank writes its header next to its data and,
after the barrier, compares all headers; on a mismatch every rank raises the same error and the
phase counters stay in step, so the communicator remains usable.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from mpi4py import MPI

from hpcdist.comm.checks import HEADER_WORDS, Deadline, Header, mismatch_error
from hpcdist.comm.ops import ReduceOp

__all__ = ["ShmBackend"]

_LINE = 64


class ShmBackend:
    """All-reduce and broadcast among the ranks of one node.

    Args:
        comm: A communicator whose ranks share memory (collective construction).
        chunk_bytes: Slot size ``C``.
        direct_bytes: Largest message reduced in one barrier by every rank.
        ranks: Global rank of each member (for messages).
    """

    name = "shm"

    def __init__(
        self,
        comm: MPI.Intracomm,
        chunk_bytes: int = 1 << 20,
        direct_bytes: int = 64 << 10,
        ranks: Sequence[int] | None = None,
    ) -> None:
        self.comm = comm
        self.n = n = comm.Get_size()
        self.me = comm.Get_rank()
        self.ranks = list(range(n)) if ranks is None else list(ranks)
        self.chunk = max(_LINE, chunk_bytes // _LINE * _LINE)
        self.direct_bytes = min(direct_bytes, self.chunk)
        header_bytes = HEADER_WORDS * 8
        off_headers = n * _LINE
        off_slots = off_headers + 2 * n * header_bytes
        off_slots = -(-off_slots // 4096) * 4096
        off_result = off_slots + 2 * n * self.chunk
        total = off_result + 2 * self.chunk
        self.win = MPI.Win.Allocate_shared(total if self.me == 0 else 0, 1, comm=comm)
        buf, _ = self.win.Shared_query(0)
        mem = np.frombuffer(buf, dtype=np.uint8, count=total)
        self.flags = mem[:off_headers].view(np.int64)[:: _LINE // 8]
        self.headers = mem[off_headers : off_headers + 2 * n * header_bytes].view(np.int64)
        self.headers = self.headers.reshape(2, n, HEADER_WORDS)
        self.slots = mem[off_slots:off_result].reshape(2, n, self.chunk)
        self.result = mem[off_result:total].reshape(2, self.chunk)
        self.others = [r for r in range(n) if r != self.me]
        self.phase = 0
        self.win.Lock_all(MPI.MODE_NOCHECK)
        if self.me == 0:
            self.flags[:] = 0
        self.win.Sync()
        comm.Barrier()
        self.win.Sync()

    # -- synchronisation ---------------------------------------------------------------------

    def _barrier(self, deadline: Deadline) -> None:
        self.phase += 1
        phase = self.phase
        flags = self.flags
        self.win.Sync()
        flags[self.me] = phase
        for r in self.others:
            if flags[r] < phase:
                deadline.wait(lambda r=r: flags[r] >= phase)
        self.win.Sync()

    def _post_header(self, header: Header | None) -> None:
        if header is not None:
            self.headers[(self.phase + 1) % 2, self.me] = header.words

    def _check_headers(self, header: Header | None) -> None:
        if header is None:
            return
        table = self.headers[self.phase % 2]
        first = table[0].tobytes()
        for r in range(1, self.n):
            if table[r].tobytes() != first:
                raise mismatch_error(table.copy(), self.ranks)

    # -- collectives ----------------------------------------------------------------------------

    def allreduce(
        self,
        src: np.ndarray,
        dst: np.ndarray,
        op: ReduceOp,
        header: Header | None,
        deadline: Deadline,
    ) -> None:
        """Reduce through the node's segment (in place when ``src is dst``)."""
        if self.n == 1:
            self.barrier(header, deadline)
            if src is not dst:
                dst[:] = src
        elif src.nbytes <= self.direct_bytes:
            self._allreduce_direct(src, dst, op, header, deadline)
        else:
            self._allreduce_pipelined(src, dst, op, header, deadline)

    def _allreduce_direct(
        self,
        src: np.ndarray,
        dst: np.ndarray,
        op: ReduceOp,
        header: Header | None,
        deadline: Deadline,
    ) -> None:
        nbytes, dtype = src.nbytes, src.dtype
        b = (self.phase + 1) % 2
        self._post_header(header)
        slots = self.slots[b]
        slots[self.me, :nbytes].view(dtype)[:] = src
        self._barrier(deadline)
        self._check_headers(header)
        if src.size == 0:
            return
        ufunc = op.ufunc
        ufunc(slots[0, :nbytes].view(dtype), slots[1, :nbytes].view(dtype), out=dst)
        for r in range(2, self.n):
            ufunc(dst, slots[r, :nbytes].view(dtype), out=dst)

    def _allreduce_pipelined(
        self,
        src: np.ndarray,
        dst: np.ndarray,
        op: ReduceOp,
        header: Header | None,
        deadline: Deadline,
    ) -> None:
        dtype, itemsize = src.dtype, src.dtype.itemsize
        ufunc = op.ufunc
        per_chunk = self.chunk // itemsize
        count = src.size
        pending: tuple[int, int, int] | None = None
        for lo in range(0, count, per_chunk):
            hi = min(count, lo + per_chunk)
            m = hi - lo
            b = (self.phase + 1) % 2
            if lo == 0:
                self._post_header(header)
            self.slots[b, self.me, : m * itemsize].view(dtype)[:] = src[lo:hi]
            self._barrier(deadline)
            if lo == 0:
                self._check_headers(header)
            if pending is not None:
                self._copy_out(dst, *pending)
            share = -(-m // self.n)
            s, e = min(m, self.me * share) * itemsize, min(m, (self.me + 1) * share) * itemsize
            if e > s:
                slots = self.slots[b]
                out = self.result[b, s:e].view(dtype)
                ufunc(slots[0, s:e].view(dtype), slots[1, s:e].view(dtype), out=out)
                for r in range(2, self.n):
                    ufunc(out, slots[r, s:e].view(dtype), out=out)
            pending = (b, lo, hi)
        self._barrier(deadline)
        if pending is not None:
            self._copy_out(dst, *pending)

    def _copy_out(self, dst: np.ndarray, b: int, lo: int, hi: int) -> None:
        dst[lo:hi] = self.result[b, : (hi - lo) * dst.dtype.itemsize].view(dst.dtype)

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
            if lo == 0:
                self._post_header(header)
            if self.me == root:
                self.slots[b, root, : (hi - lo) * itemsize].view(dtype)[:] = buf[lo:hi]
            self._barrier(deadline)
            if lo == 0:
                self._check_headers(header)
            if self.me != root:
                buf[lo:hi] = self.slots[b, root, : (hi - lo) * itemsize].view(dtype)

    def barrier(self, header: Header | None, deadline: Deadline) -> None:
        """One phase of the segment's barrier (with the header check)."""
        self._post_header(header)
        self._barrier(deadline)
        self._check_headers(header)

    def close(self) -> None:
        """Release the segment (collective)."""
        if self.win != MPI.WIN_NULL:
            self.win.Unlock_all()
            self.win.Free()
