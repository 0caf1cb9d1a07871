"""The MPI backend: the MPI library's own collectives on numpy buffers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from mpi4py import MPI

from hpcdist.comm.backend import COLLECTIVES, HOST_DTYPES, unsupported_codec
from hpcdist.comm.checks import Header, verify_headers
from hpcdist.comm.counters import COUNTING, add
from hpcdist.comm.deadline import Deadline
from hpcdist.comm.reduce_op import ReduceOp

if TYPE_CHECKING:
    from hpcdist.comm.compression import Codec

__all__ = ["MpiBackend", "displacements", "wait_request"]


def wait_request(request: MPI.Request, deadline: Deadline, blocking: bool) -> None:
    """Complete a request: ``Wait`` when no deadline applies, else poll it under the deadline."""
    if blocking:
        request.Wait()
    else:
        deadline.wait(request.Test)


def displacements(counts: Sequence[int]) -> np.ndarray:
    """Offsets of consecutive blocks of ``counts`` elements (0, c0, c0 + c1, ...)."""
    counts = np.asarray(counts, dtype=np.int64)
    return np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)


def _bytes_if_bool(*arrays: Any) -> tuple[Any, ...]:
    """MPI moves bool arrays as bytes."""
    if arrays[0].dtype.kind != "b":
        return arrays
    return tuple(a.view(np.uint8) for a in arrays)


class MpiBackend:
    """Every collective with the MPI library's non-blocking collectives.

    Args:
        comm: The library's communicator.
        ranks: Global rank of each member (for messages).
    """

    name = "mpi"
    collectives = COLLECTIVES
    devices = frozenset({"host"})
    dtypes = HOST_DTYPES
    in_place = True
    compression: frozenset[str] = frozenset()

    #: From this size on, data is reduced in a long-lived scratch buffer: MPI libraries
    #: register (pin) large buffers with the network layer and cache the registration, so a
    #: fresh output array per call would pay the registration every time (measured 4-5x slower
    #: at 1-4 MiB with the MPICH wheel). Two memory copies are far cheaper.
    SCRATCH_MIN_BYTES = 64 << 10
    #: From this size on, an all-reduce waits under its deadline even once every rank arrived.
    DEADLINE_MIN_BYTES = 1 << 20

    def __init__(self, comm: MPI.Intracomm, ranks: Sequence[int] | None = None) -> None:
        self.comm = comm
        self.ranks = list(range(comm.Get_size())) if ranks is None else list(ranks)
        self._scratch = np.empty(0, dtype=np.uint8)

    def scratch(self, like: np.ndarray) -> np.ndarray:
        """A reusable buffer with ``like``'s dtype and size (grown when needed)."""
        if self._scratch.nbytes < like.nbytes:
            self._scratch = np.empty(like.nbytes, dtype=np.uint8)
        return self._scratch[: like.nbytes].view(like.dtype)

    def allreduce(
        self,
        src: np.ndarray,
        dst: np.ndarray,
        op: ReduceOp,
        header: Header | None,
        deadline: Deadline,
        codec: Codec | None = None,
    ) -> None:
        """Reduce with the MPI library (in place when ``src is dst``)."""
        unsupported_codec(self, codec)
        if header is not None:
            verify_headers(self.comm, header, deadline, self.ranks)
        if src is not dst and dst.nbytes >= self.SCRATCH_MIN_BYTES:
            work = self.scratch(dst)
            np.copyto(work, src)
            self.allreduce(work, work, op, None, deadline)
            np.copyto(dst, work)
            return
        sendbuf = MPI.IN_PLACE if src is dst else src
        if COUNTING:
            add("collective.allreduce", dst.nbytes)
        if deadline.timeout is None or (
            header is not None and dst.nbytes < self.DEADLINE_MIN_BYTES
        ):
            # No deadline applies, or every rank is known to be here and the message is small:
            # a blocking call is cheapest (MPICH's progress engine spins without the
            # interpreter). A large transfer stays under the deadline even after every rank
            # arrived: a stalled link must become an error, not a hang.
            self.comm.Allreduce(sendbuf, dst, op=op.mpi)
        else:
            wait_request(self.comm.Iallreduce(sendbuf, dst, op=op.mpi), deadline, False)

    def broadcast(
        self, buf: np.ndarray, root: int, header: Header | None, deadline: Deadline
    ) -> None:
        """Broadcast with the MPI library."""
        if header is not None:
            verify_headers(self.comm, header, deadline, self.ranks)
        if COUNTING:
            add("collective.bcast", buf.nbytes)
        if header is not None or deadline.timeout is None:
            self.comm.Bcast(buf, root=root)
        else:
            wait_request(self.comm.Ibcast(buf, root=root), deadline, False)

    def allgather(
        self,
        src: np.ndarray,
        dst: np.ndarray,
        counts: Sequence[int],
        header: Header | None,
        deadline: Deadline,
    ) -> None:
        """``MPI_Iallgatherv`` of ``counts[r]`` elements from each rank ``r``."""
        if header is not None:
            verify_headers(self.comm, header, deadline, self.ranks)
        send, recv = _bytes_if_bool(src, dst)
        counts = np.asarray(counts, dtype=np.int64)
        if COUNTING:
            add("collective.allgatherv", send.nbytes)
        request = self.comm.Iallgatherv(send, [recv, (counts, displacements(counts))])
        wait_request(request, deadline, deadline.timeout is None)

    def reduce_scatter(
        self,
        src: np.ndarray,
        dst: np.ndarray,
        counts: Sequence[int],
        op: ReduceOp,
        header: Header | None,
        deadline: Deadline,
    ) -> None:
        """``MPI_Ireduce_scatter``: rank ``r`` keeps the ``r``-th block of ``counts[r]``."""
        if header is not None:
            verify_headers(self.comm, header, deadline, self.ranks)
        if COUNTING:
            add("collective.reduce_scatter", src.nbytes)
        request = self.comm.Ireduce_scatter(src, dst, [int(c) for c in counts], op=op.mpi)
        wait_request(request, deadline, deadline.timeout is None)

    def alltoall(
        self,
        src: np.ndarray,
        dst: np.ndarray,
        send_counts: Sequence[int],
        recv_counts: Sequence[int],
        header: Header | None,
        deadline: Deadline,
    ) -> None:
        """``MPI_Ialltoallv``: blocks of ``send_counts`` out, of ``recv_counts`` in."""
        if header is not None:
            verify_headers(self.comm, header, deadline, self.ranks)
        send, recv = _bytes_if_bool(src, dst)
        s_counts = np.asarray(send_counts, dtype=np.int64)
        r_counts = np.asarray(recv_counts, dtype=np.int64)
        if COUNTING:
            add("collective.alltoallv", send.nbytes)
        request = self.comm.Ialltoallv(
            [send, (s_counts, displacements(s_counts))],
            [recv, (r_counts, displacements(r_counts))],
        )
        wait_request(request, deadline, deadline.timeout is None)

    def barrier(self, header: Header | None, deadline: Deadline) -> None:
        """Verify ``header`` across ranks (which synchronises them), else ``MPI_Ibarrier``."""
        if header is not None:
            verify_headers(self.comm, header, deadline, self.ranks)
        else:
            if COUNTING:
                add("collective.barrier", 0)
            wait_request(self.comm.Ibarrier(), deadline, False)

    def close(self) -> None:
        """Nothing to release: the communicator belongs to the caller."""
