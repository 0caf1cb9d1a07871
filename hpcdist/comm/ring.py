"""Ring all-reduce over MPI point-to-point messages, also of 16-bit wire words.

The classic bandwidth-optimal algorithm: ``n - 1`` reduce-scatter steps, in which each rank sends
one segment to its right neighbour and adds the segment received from its left, then ``n - 1``
all-gather steps that circulate the reduced segments. Each rank sends ``2 (n - 1) / n`` of the
message. Given a codec, the buffer holds 16-bit words (`CompressedBackend` encodes them): each
step decodes both operands to float32, reduces, and rounds the partial sum back to 16 bits, so
every rank ends with bitwise-identical values. The ring is the host backend that carries
compressed all-reduces (MPI cannot add 16-bit floats).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from mpi4py import MPI

from hpcdist.comm.backend import HOST_DTYPES, DelegatingBackend, unsupported_codec
from hpcdist.comm.checks import Header, verify_headers
from hpcdist.comm.compression import Codec
from hpcdist.comm.counters import COUNTING, add
from hpcdist.comm.deadline import Deadline
from hpcdist.comm.mpi_backend import MpiBackend, wait_request
from hpcdist.comm.reduce_op import ReduceOp
from hpcdist.utils.split import balanced_bounds

__all__ = ["RingBackend", "ring_allreduce"]

_TAG = 0x5EED


def ring_allreduce(
    comm: MPI.Intracomm,
    acc: np.ndarray,
    op: ReduceOp,
    deadline: Deadline,
    codec: Codec | None = None,
) -> None:
    """All-reduce ``acc`` in place around the ring of ``comm``.

    Args:
        comm: The communicator.
        acc: Contiguous 1-D array holding this rank's input; receives the result.
        op: SUM, MIN, MAX or PROD.
        deadline: Bounds every wait.
        codec: The wire format of ``acc``'s 16-bit words, or None for plain values.
    """
    n, r = comm.Get_size(), comm.Get_rank()
    if n == 1:
        return
    bounds = balanced_bounds(acc.size, n)
    right, left = (r + 1) % n, (r - 1) % n
    blocking = deadline.timeout is None
    recv = np.empty(bounds[0][1] - bounds[0][0], dtype=acc.dtype)

    def exchange(send_seg: int, recv_seg: int) -> np.ndarray:
        slo, shi = bounds[send_seg]
        rlo, rhi = bounds[recv_seg]
        incoming = recv[: rhi - rlo]
        if COUNTING:
            add("p2p.ring", acc[slo:shi].nbytes)
        requests = [
            comm.Irecv(incoming, source=left, tag=_TAG),
            comm.Isend(acc[slo:shi], dest=right, tag=_TAG),
        ]
        wait_request(_All(requests), deadline, blocking)
        return incoming

    for step in range(n - 1):
        send_seg, recv_seg = (r - step) % n, (r - step - 1) % n
        lo, hi = bounds[recv_seg]
        incoming = exchange(send_seg, recv_seg)
        if codec is None:
            op.ufunc(acc[lo:hi], incoming, out=acc[lo:hi])
        else:
            mine, theirs = codec.decode(acc[lo:hi], np.float32), codec.decode(incoming, np.float32)
            acc[lo:hi] = codec.encode(op.ufunc(mine, theirs, out=mine))
    for step in range(n - 1):
        send_seg, recv_seg = (r + 1 - step) % n, (r - step) % n
        lo, hi = bounds[recv_seg]
        acc[lo:hi] = exchange(send_seg, recv_seg)


class _All:
    """Adapts a list of requests to the single-request interface (``Wait``/``Test``)."""

    def __init__(self, requests: list[MPI.Request]) -> None:
        self.requests = requests

    def Wait(self) -> None:  # noqa: N802 - MPI's name
        MPI.Request.Waitall(self.requests)

    def Test(self) -> bool:  # noqa: N802 - MPI's name
        return MPI.Request.Testall(self.requests)


class RingBackend(DelegatingBackend):
    """Ring all-reduce (also of 16-bit wire words); broadcast uses the MPI library.

    All-gather, reduce-scatter, all-to-all and the barrier go to an `MpiBackend` on ``comm``.

    Args:
        comm: The library's communicator.
        ranks: Global rank of each member (for messages).
    """

    name = "ring"
    collectives = frozenset({"allreduce", "broadcast"})
    dtypes = HOST_DTYPES
    compression = frozenset({"fp16", "bf16"})

    def __init__(self, comm: MPI.Intracomm, ranks: Sequence[int] | None = None) -> None:
        self.comm = comm
        self.ranks = list(range(comm.Get_size())) if ranks is None else list(ranks)
        self.fallback = MpiBackend(comm, self.ranks)

    def allreduce(
        self,
        src: np.ndarray,
        dst: np.ndarray,
        op: ReduceOp,
        header: Header | None,
        deadline: Deadline,
        codec: Codec | None = None,
    ) -> None:
        """Reduce around the ring (in place when ``src is dst``)."""
        unsupported_codec(self, codec)
        if header is not None:
            verify_headers(self.comm, header, deadline, self.ranks)
        if src is not dst:
            dst[:] = src
        ring_allreduce(self.comm, dst, op, deadline, codec)

    def broadcast(
        self, buf: np.ndarray, root: int, header: Header | None, deadline: Deadline
    ) -> None:
        """Broadcast with the MPI library."""
        if header is not None:
            verify_headers(self.comm, header, deadline, self.ranks)
        wait_request(self.comm.Ibcast(buf, root=root), deadline, deadline.timeout is None)

    def close(self) -> None:
        """Nothing to release."""
