"""All-reduce of GPU arrays handed straight to a CUDA-aware MPI library (opt-in).

Enabled with ``HPCDIST_CUDA_AWARE_MPI=1`` for CuPy arrays that NCCL does not carry (NCCL
missing, or ``implementation="mpi"``). There is no portable way to ask an MPI library whether
it accepts device pointers, so, as in mpi4jax, the user says so. mpi4py takes CuPy arrays as
buffers through ``__cuda_array_interface__``. MPI knows nothing of CUDA streams, so the current
stream is synchronised before every MPI call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mpi4py import MPI

from hpcdist.comm.checks import Deadline, Header, verify_headers
from hpcdist.comm.mpi_backend import wait_request
from hpcdist.comm.reduce_op import ReduceOp

__all__ = ["CudaAwareMpiBackend"]


class CudaAwareMpiBackend:
    """``MPI_Iallreduce`` on device buffers (same contract as `NcclBackend.allreduce`).

    Args:
        comm: The MPI group.
        ranks: Global rank of each member (for messages).
    """

    name = "cuda-aware-mpi"
    #: MPI has no float16 type: float16 arrays are widened first.
    carries_float16 = False

    def __init__(self, comm: MPI.Intracomm, ranks: Sequence[int] | None = None) -> None:
        self.comm = comm
        self.ranks = list(range(comm.Get_size())) if ranks is None else list(ranks)

    def allreduce(
        self,
        src: Any,
        dst: Any,
        op: ReduceOp,
        header: Header | None,
        deadline: Deadline,
        nccl_type: int | None = None,
    ) -> None:
        """Reduce ``src`` into ``dst`` (CuPy arrays; ``src is dst`` means in place)."""
        if nccl_type is not None:
            raise TypeError("CUDA-aware MPI has no bfloat16 type; compress with 'fp16'")
        if header is not None:
            verify_headers(self.comm, header, deadline, self.ranks)
        import cupy

        cupy.cuda.get_current_stream().synchronize()
        sendbuf = MPI.IN_PLACE if src is dst else src
        request = self.comm.Iallreduce(sendbuf, dst, op=op.mpi)
        wait_request(request, deadline, deadline.timeout is None)

    def close(self) -> None:
        """Nothing to release."""
