"""Ring all-reduce over MPI point-to-point messages, optionally with a 16-bit wire format.

The classic bandwidth-optimal algorithm: ``n - 1`` reduce-scatter steps, in which each rank sends
one segment to its right neighbour and adds the segment received from its left, then ``n - 1``
all-gather steps that circulate the reduced segments. Each rank sends ``2 (n - 1) / n`` of the
message. With a codec the segments travel as 16-bit words and are accumulated in the input's
precision; the owner of a reduced segment rounds it before sending it round, so every rank ends
with bitwise-identical values.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from mpi4py import MPI

from hpcdist.comm.checks import Deadline, Header, verify_headers
from hpcdist.comm.compression import Codec
from hpcdist.comm.mpi_backend import wait_request
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
        codec: 16-bit wire format, or None to send ``acc``'s own dtype.
    """
    n, r = comm.Get_size(), comm.Get_rank()
    if n == 1:
        if codec is not None:
            acc[:] = codec.decode(codec.encode(acc), acc.dtype)
        return
    bounds = balanced_bounds(acc.size, n)
    right, left = (r + 1) % n, (r - 1) % n
    blocking = deadline.timeout is None
    wire = acc.dtype if codec is None else codec.wire_dtype
    recv = np.empty(bounds[0][1] - bounds[0][0], dtype=wire)

    def exchange(send_seg: int, recv_seg: int) -> np.ndarray:
        slo, shi = bounds[send_seg]
        rlo, rhi = bounds[recv_seg]
        payload = acc[slo:shi] if codec is None else codec.encode(acc[slo:shi])
        incoming = recv[: rhi - rlo]
        requests = [
            comm.Irecv(incoming, source=left, tag=_TAG),
            comm.Isend(payload, dest=right, tag=_TAG),
        ]
        wait_request(_All(requests), deadline, blocking)
        return incoming if codec is None else codec.decode(incoming, acc.dtype)

    for step in range(n - 1):
        send_seg, recv_seg = (r - step) % n, (r - step - 1) % n
        lo, hi = bounds[recv_seg]
        op.ufunc(acc[lo:hi], exchange(send_seg, recv_seg), out=acc[lo:hi])
    if codec is not None:
        lo, hi = bounds[(r + 1) % n]
        acc[lo:hi] = codec.decode(codec.encode(acc[lo:hi]), acc.dtype)
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


class RingBackend:
    """Ring all-reduce; broadcast uses the MPI library.

    Args:
        comm: The library's communicator.
        ranks: Global rank of each member (for messages).
        codec: Optional 16-bit wire format for floating-point data.
    """

    name = "ring"

    def __init__(
        self, comm: MPI.Intracomm, ranks: Sequence[int] | None = None, codec: Codec | None = None
    ) -> None:
        self.comm = comm
        self.ranks = list(range(comm.Get_size())) if ranks is None else list(ranks)
        self.codec = codec

    def allreduce(
        self,
        src: np.ndarray,
        dst: np.ndarray,
        op: ReduceOp,
        header: Header | None,
        deadline: Deadline,
    ) -> None:
        """Reduce around the ring (in place when ``src is dst``)."""
        if header is not None:
            verify_headers(self.comm, header, deadline, self.ranks)
        if src is not dst:
            dst[:] = src
        codec = self.codec if dst.dtype.kind == "f" else None
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
