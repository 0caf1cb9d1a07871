"""MPI on GPU buffers: handed straight to a CUDA-aware MPI library, or staged through the host.

`CudaAwareMpiBackend` is opt-in (``HPCDIST_CUDA_AWARE_MPI=1``) for CuPy arrays that NCCL does
not carry (NCCL missing, or ``implementation="mpi"``). There is no portable way to ask an MPI
library whether it accepts device pointers, so, as in mpi4jax, the user says so. mpi4py takes
CuPy arrays as buffers through ``__cuda_array_interface__``. MPI knows nothing of CUDA streams,
so the current stream is synchronised before every MPI call.

`StagedMpiBackend` copies device buffers into pinned host memory, runs an `MpiBackend`
collective there and copies the result back: the GPU backends use it for the collectives they
do not carry themselves.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from mpi4py import MPI

from hpcdist.comm.arrays import stage_to_host
from hpcdist.comm.backend import COLLECTIVES, DelegatingBackend, unsupported_codec
from hpcdist.comm.checks import Header, verify_headers
from hpcdist.comm.deadline import Deadline
from hpcdist.comm.mpi_backend import MpiBackend, wait_request
from hpcdist.comm.reduce_op import ReduceOp
from hpcdist.utils.xp import import_cupy

if TYPE_CHECKING:
    from hpcdist.comm.compression import Codec

__all__ = ["CudaAwareMpiBackend", "StagedMpiBackend"]

#: What MPI reduces on the device in hpcdist: NCCL's types without float16 (MPI has none).
_DEVICE_MPI_DTYPES = frozenset("bBiIlLqQfd")


def _synchronize() -> None:
    """Wait for the current CUDA stream: MPI reads device memory outside any stream."""
    import_cupy("GPU buffers").cuda.get_current_stream().synchronize()


class _DeviceMpiBackend(DelegatingBackend):
    """Every collective of CuPy arrays with an `MpiBackend` over the same group.

    Args:
        comm: The MPI group.
        ranks: Global rank of each member (for messages).
    """

    collectives = COLLECTIVES
    devices = frozenset({"gpu"})
    dtypes = _DEVICE_MPI_DTYPES

    def __init__(self, comm: MPI.Intracomm, ranks: Sequence[int] | None = None) -> None:
        self.comm = comm
        self.ranks = list(range(comm.Get_size())) if ranks is None else list(ranks)
        self.fallback = MpiBackend(comm, self.ranks)


class CudaAwareMpiBackend(_DeviceMpiBackend):
    """Every collective with the MPI library on device buffers (CuPy arrays)."""

    name = "cuda-aware-mpi"

    def allreduce(
        self,
        src: Any,
        dst: Any,
        op: ReduceOp,
        header: Header | None,
        deadline: Deadline,
        codec: Codec | None = None,
    ) -> None:
        """Reduce ``src`` into ``dst`` (CuPy arrays; ``src is dst`` means in place)."""
        unsupported_codec(self, codec)
        if header is not None:
            verify_headers(self.comm, header, deadline, self.ranks)
        _synchronize()
        sendbuf = MPI.IN_PLACE if src is dst else src
        request = self.comm.Iallreduce(sendbuf, dst, op=op.mpi)
        wait_request(request, deadline, deadline.timeout is None)

    def broadcast(self, buf: Any, root: int, header: Header | None, deadline: Deadline) -> None:
        """``MPI_Ibcast`` of a device buffer."""
        _synchronize()
        self.fallback.broadcast(buf, root, header, deadline)

    def allgather(
        self, src: Any, dst: Any, counts: Sequence[int], header: Header | None, deadline: Deadline
    ) -> None:
        """``MPI_Iallgatherv`` of device buffers."""
        _synchronize()
        self.fallback.allgather(src, dst, counts, header, deadline)

    def reduce_scatter(
        self,
        src: Any,
        dst: Any,
        counts: Sequence[int],
        op: ReduceOp,
        header: Header | None,
        deadline: Deadline,
    ) -> None:
        """``MPI_Ireduce_scatter`` of device buffers."""
        _synchronize()
        self.fallback.reduce_scatter(src, dst, counts, op, header, deadline)

    def alltoall(
        self,
        src: Any,
        dst: Any,
        send_counts: Sequence[int],
        recv_counts: Sequence[int],
        header: Header | None,
        deadline: Deadline,
    ) -> None:
        """``MPI_Ialltoallv`` of device buffers."""
        _synchronize()
        self.fallback.alltoall(src, dst, send_counts, recv_counts, header, deadline)


class StagedMpiBackend(_DeviceMpiBackend):
    """Every collective on device buffers through pinned host memory and an `MpiBackend`."""

    name = "staged-mpi"

    @staticmethod
    def _host_pair(src: Any, dst: Any) -> tuple[np.ndarray, np.ndarray]:
        host = stage_to_host(src)
        return host, (host if src is dst else np.empty(dst.shape, dtype=dst.dtype))

    def allreduce(
        self,
        src: Any,
        dst: Any,
        op: ReduceOp,
        header: Header | None,
        deadline: Deadline,
        codec: Codec | None = None,
    ) -> None:
        """Stage, reduce with MPI, copy back."""
        unsupported_codec(self, codec)
        hsrc, hdst = self._host_pair(src, dst)
        self.fallback.allreduce(hsrc, hdst, op, header, deadline)
        dst.set(hdst)

    def broadcast(self, buf: Any, root: int, header: Header | None, deadline: Deadline) -> None:
        """Stage, broadcast with MPI, copy back."""
        host = stage_to_host(buf)
        self.fallback.broadcast(host, root, header, deadline)
        buf.set(host)

    def allgather(
        self, src: Any, dst: Any, counts: Sequence[int], header: Header | None, deadline: Deadline
    ) -> None:
        """Stage, gather with MPI, copy back."""
        hsrc, hdst = self._host_pair(src, dst)
        self.fallback.allgather(hsrc, hdst, counts, header, deadline)
        dst.set(hdst)

    def reduce_scatter(
        self,
        src: Any,
        dst: Any,
        counts: Sequence[int],
        op: ReduceOp,
        header: Header | None,
        deadline: Deadline,
    ) -> None:
        """Stage, reduce-scatter with MPI, copy back."""
        hsrc, hdst = self._host_pair(src, dst)
        self.fallback.reduce_scatter(hsrc, hdst, counts, op, header, deadline)
        dst.set(hdst)

    def alltoall(
        self,
        src: Any,
        dst: Any,
        send_counts: Sequence[int],
        recv_counts: Sequence[int],
        header: Header | None,
        deadline: Deadline,
    ) -> None:
        """Stage, exchange with MPI, copy back."""
        hsrc, hdst = self._host_pair(src, dst)
        self.fallback.alltoall(hsrc, hdst, send_counts, recv_counts, header, deadline)
        dst.set(hdst)
