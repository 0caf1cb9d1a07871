"""The NCCL backend: collectives on CuPy arrays, bootstrapped over MPI.

Rank 0 of the group creates NCCL's unique id and broadcasts it over MPI; every rank then joins
one ``cupy.cuda.nccl.NcclCommunicator`` on its GPU. Operations are enqueued on CuPy's current
stream, like any CuPy kernel, so their results are ordered with the kernels that follow and no
host synchronisation is needed. Under a deadline (``timeout_seconds``) the backend waits for
an event recorded after the operation; past the deadline it aborts the NCCL communicator (NCCL's
way out of an operation that will never complete) and raises `DeadlineExceededError`.

CuPy is imported when the backend is created, never at import time: this module imports
without CuPy, and `nccl_dtype` / `nccl_op` (NCCL's codes, used by `hpcdist.NcclAllReduce`)
work without it.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Sequence
from typing import Any

import numpy as np
from mpi4py import MPI

from hpcdist.comm.arrays import stage_to_host
from hpcdist.comm.backend import Backend, DelegatingBackend, unsupported_codec
from hpcdist.comm.checks import Header, verify_headers
from hpcdist.comm.compression import Codec, get_codec
from hpcdist.comm.cuda_mpi import CudaAwareMpiBackend, StagedMpiBackend
from hpcdist.comm.deadline import Deadline
from hpcdist.comm.mpi_backend import wait_request
from hpcdist.comm.reduce_op import ReduceOp
from hpcdist.errors import ClusterConfigError, UnavailableError
from hpcdist.logger import get_logger
from hpcdist.utils.xp import array_module, import_cupy

__all__ = [
    "HierarchicalNcclBackend",
    "NcclBackend",
    "bf16_to_float32",
    "float32_to_bf16",
    "nccl_available",
    "nccl_dtype",
    "nccl_op",
]

# ncclDataType_t values (nccl.h); bfloat16 buffers are uint16 bit patterns.
_NCCL_DTYPES = {
    "b": 0,  # int8
    "B": 1,  # uint8
    "i": 2,  # int32
    "I": 3,  # uint32
    "l": 4,  # int64
    "L": 5,  # uint64
    "q": 4,
    "Q": 5,
    "e": 6,  # float16
    "f": 7,  # float32
    "d": 8,  # float64
}
NCCL_BFLOAT16 = 9
# the NCCL type of each 16-bit wire format
_NCCL_WIRE = {"fp16": _NCCL_DTYPES["e"], "bf16": NCCL_BFLOAT16}
# ncclRedOp_t values
_NCCL_OPS = {ReduceOp.SUM: 0, ReduceOp.PROD: 1, ReduceOp.MAX: 2, ReduceOp.MIN: 3}


def nccl_op(op: ReduceOp) -> int | None:
    """NCCL's code for ``op`` (SUM, PROD, MAX, MIN), or None (MEAN is a SUM and a division)."""
    return _NCCL_OPS.get(op)


def nccl_dtype(dtype: np.dtype) -> int | None:
    """NCCL's code for ``dtype``, or None when NCCL cannot reduce it natively."""
    return _NCCL_DTYPES.get(np.dtype(dtype).char)


@functools.cache
def nccl_available() -> bool:
    """Whether CuPy is installed and its NCCL bindings load (no GPU needed to answer).

    Where CuPy is installed but NCCL does not load (CuPy without NCCL, or a broken install),
    CuPy arrays are staged through host memory instead of staying on the GPU: that is said
    once per process, at warning level, with the reason.
    """
    if importlib.util.find_spec("cupy") is None:
        return False
    try:
        from cupy.cuda import nccl

        if nccl.available:
            return True
        why = "cupy.cuda.nccl.available is False (CuPy found no usable NCCL library)"
    except Exception as exc:  # CuPy without NCCL, or a broken install
        why = f"importing cupy.cuda.nccl raised {type(exc).__name__}: {exc}"
    get_logger().warning(
        "NCCL cannot be loaded (%s): collectives of CuPy arrays are staged through host "
        "memory instead (all-reduces use CUDA-aware MPI where HPCDIST_CUDA_AWARE_MPI=1), and "
        "implementation='nccl' raises UnavailableError. Install CuPy with NCCL for this CUDA "
        "version (pip install 'hpcdist[gpu]')",
        why,
    )
    return False


def float32_to_bf16(x: Any) -> Any:
    """bfloat16 bit patterns (uint16) of a float32 CuPy array, rounded to nearest even."""
    return get_codec("bf16").encode(x)


def bf16_to_float32(bits: Any) -> Any:
    """float32 values of bfloat16 bit patterns (uint16) in a CuPy array."""
    return get_codec("bf16").decode(bits, np.float32)


class NcclBackend(DelegatingBackend):
    """All-reduce, broadcast, all-gather and reduce-scatter with NCCL on one GPU per rank.

    All-to-all and the barrier go through MPI (`StagedMpiBackend`).

    Construction is collective over ``comm``: every rank checks that it can create the backend,
    the ranks agree (so an error on one rank is an error on all), then they check that no two
    ranks share a GPU, and only then do they join the NCCL communicator (which would otherwise
    wait forever for a rank that failed).

    Args:
        comm: The MPI group; NCCL ranks are its ranks.
        device: CUDA ordinal of this rank's GPU.
        ranks: Global rank of each member (for messages).

    Raises:
        UnavailableError: CuPy or NCCL is missing on some rank (raised on every rank).
        ClusterConfigError: Two ranks would use the same GPU (raised on every rank).
    """

    name = "nccl"
    collectives = frozenset({"allreduce", "broadcast", "allgather", "reduce_scatter"})
    devices = frozenset({"gpu"})
    dtypes = frozenset(_NCCL_DTYPES)
    compression = frozenset(_NCCL_WIRE)

    def __init__(self, comm: MPI.Intracomm, device: int, ranks: Sequence[int] | None = None):
        self.comm = comm
        self.device = int(device)
        self.ranks = list(range(comm.Get_size())) if ranks is None else list(ranks)
        self.fallback = StagedMpiBackend(comm, self.ranks)
        rank = comm.Get_rank()
        problem, where = None, None
        try:
            cupy = import_cupy("the NCCL backend")
            from cupy.cuda import nccl

            with cupy.cuda.Device(self.device):
                where = (MPI.Get_processor_name(), cupy.cuda.Device(self.device).pci_bus_id)
        except Exception as exc:  # missing CuPy, NCCL, driver or device: agree first
            problem = f"{type(exc).__name__}: {exc}"
        reports = comm.allgather((problem, where))
        failed = [(self.ranks[r], p) for r, (p, _) in enumerate(reports) if p is not None]
        if failed:
            text = "; ".join(f"rank {r}: {p}" for r, p in failed)
            raise UnavailableError(f"the NCCL backend cannot start ({text})")
        seen: dict[Any, int] = {}
        for r, (_, gpu) in enumerate(reports):
            if gpu in seen:
                raise ClusterConfigError(
                    f"ranks {self.ranks[seen[gpu]]} and {self.ranks[r]} both use GPU {gpu[1]} "
                    f"of node {gpu[0]}: NCCL needs one GPU per rank (launch at most as many "
                    "ranks per node as it has GPUs, or bind them with CUDA_VISIBLE_DEVICES / "
                    "srun --gpus-per-task=1)"
                )
            seen[gpu] = r
        uid = nccl.get_unique_id() if rank == 0 else None
        uid = comm.bcast(uid, root=0)
        #: The CuPy module (imported at construction, never at import time).
        self.cupy = cupy
        self._nccl = nccl
        with cupy.cuda.Device(self.device):
            self.communicator = nccl.NcclCommunicator(comm.Get_size(), uid, rank)
        self._aborted = False

    # -- helpers ------------------------------------------------------------------------------

    def _stream(self) -> Any:
        return self.cupy.cuda.get_current_stream()

    def check_device(self, *arrays: Any) -> None:
        """Raise `ValueError` unless every array is on this backend's GPU."""
        for a in arrays:
            if a.device.id != self.device:
                raise ValueError(
                    f"rank {self.comm.Get_rank()}: the NCCL communicator works on GPU "
                    f"{self.device}, got an array on GPU {a.device.id}"
                )

    def _finish(self, stream: Any, deadline: Deadline) -> None:
        """Wait for the enqueued operation only when a deadline applies (else stay async)."""
        if deadline.timeout is None:
            return
        event = self.cupy.cuda.Event(block=False, disable_timing=True)
        event.record(stream)
        try:
            deadline.wait(lambda: event.done)
        except Exception:
            # The peers may never join: abort the communicator so the GPU does not stay
            # blocked in the operation, and refuse further work (the Communicator does too).
            self._aborted = True
            self.communicator.abort()
            raise

    @staticmethod
    def _code(dtype: np.dtype) -> int:
        code = nccl_dtype(dtype)
        if code is None:
            raise TypeError(f"NCCL cannot carry dtype {dtype}")
        return code

    # -- collectives --------------------------------------------------------------------------

    def allreduce(
        self,
        src: Any,
        dst: Any,
        op: ReduceOp,
        header: Header | None,
        deadline: Deadline,
        codec: Codec | None = None,
    ) -> None:
        """Reduce ``src`` into ``dst`` (CuPy arrays; ``src is dst`` means in place).

        With ``codec`` the buffers hold 16-bit words, reduced as NCCL's float16 or bfloat16.
        """
        unsupported_codec(self, codec)
        if header is not None:
            verify_headers(self.comm, header, deadline, self.ranks)
        self.check_device(src, dst)
        stream = self._stream()
        with self.cupy.cuda.Device(self.device):
            self.communicator.allReduce(
                src.data.ptr,
                dst.data.ptr,
                src.size,
                self._code(src.dtype) if codec is None else _NCCL_WIRE[codec.name],
                _NCCL_OPS[op],
                stream.ptr,
            )
        self._finish(stream, deadline)

    def broadcast(self, buf: Any, root: int, header: Header | None, deadline: Deadline) -> None:
        """Copy ``buf`` of rank ``root`` into ``buf`` on every rank."""
        if header is not None:
            verify_headers(self.comm, header, deadline, self.ranks)
        self.check_device(buf)
        stream = self._stream()
        with self.cupy.cuda.Device(self.device):
            self.communicator.bcast(
                buf.data.ptr, buf.nbytes, self._code(np.dtype(np.uint8)), root, stream.ptr
            )
        self._finish(stream, deadline)

    def allgather(
        self, src: Any, dst: Any, counts: Sequence[int], header: Header | None, deadline: Deadline
    ) -> None:
        """Concatenate every rank's ``src`` into ``dst``, in rank order.

        NCCL gathers equal counts, so uneven blocks are padded to the largest and compacted
        after.
        """
        if header is not None:
            verify_headers(self.comm, header, deadline, self.ranks)
        self.check_device(src, dst)
        xp = array_module(src)
        size, most = len(counts), max(counts)
        even = all(c == most for c in counts)
        send = src
        if src.size < most:
            send = xp.zeros(most, dtype=src.dtype)
            send[: src.size] = src
        recv = dst if even else xp.empty(size * most, dtype=src.dtype)
        stream = self._stream()
        with self.cupy.cuda.Device(self.device):
            self.communicator.allGather(
                send.data.ptr, recv.data.ptr, send.nbytes, _NCCL_DTYPES["B"], stream.ptr
            )
        self._finish(stream, deadline)
        if not even:
            offset = 0
            for r, count in enumerate(counts):
                dst[offset : offset + count] = recv[r * most : r * most + count]
                offset += count

    def reduce_scatter(
        self,
        src: Any,
        dst: Any,
        counts: Sequence[int],
        op: ReduceOp,
        header: Header | None,
        deadline: Deadline,
    ) -> None:
        """Reduce ``src`` and keep this rank's block in ``dst`` (blocks padded to the largest)."""
        if header is not None:
            verify_headers(self.comm, header, deadline, self.ranks)
        self.check_device(src, dst)
        xp = array_module(src)
        size, most = len(counts), max(counts)
        padded = src
        if any(c != most for c in counts):
            padded = xp.zeros(size * most, dtype=src.dtype)
            offset = 0
            for r, count in enumerate(counts):
                padded[r * most : r * most + count] = src[offset : offset + count]
                offset += count
        mine = counts[self.comm.Get_rank()]
        out = dst if mine == most else xp.empty(most, dtype=src.dtype)
        stream = self._stream()
        with self.cupy.cuda.Device(self.device):
            self.communicator.reduceScatter(
                padded.data.ptr,
                out.data.ptr,
                most,
                self._code(src.dtype),
                _NCCL_OPS[op],
                stream.ptr,
            )
        self._finish(stream, deadline)
        if out is not dst:
            dst[...] = out[:mine]

    def close(self) -> None:
        """Destroy the NCCL communicator (after the current stream's work)."""
        if self.communicator is None:
            return
        if not self._aborted:
            self._stream().synchronize()
            self.communicator.destroy()
        self.communicator = None


class HierarchicalNcclBackend(DelegatingBackend):
    """NCCL inside each node, MPI between node leaders (``HPCDIST_NCCL_HIERARCHICAL=1``).

    Each node reduces onto its leader (local rank 0) with NCCL, the leaders all-reduce the node
    sums over MPI (device buffers with CUDA-aware MPI, else through pinned host memory), and
    each leader broadcasts the result to its node with NCCL. Only leaders use the network
    through MPI; useful where MPI's inter-node path beats NCCL's (or NCCL has no network
    plugin for the fabric).

    Args:
        comm: The whole group (for the header check).
        node_comm: This node's ranks.
        leader_comm: The node leaders, or ``MPI.COMM_NULL`` on other ranks.
        device: This rank's GPU.
        cuda_aware: Hand device buffers to MPI directly.

    The collectives other than all-reduce go over MPI on the whole group (CUDA-aware or
    staged through the host).
    """

    name = "nccl-hierarchical"
    collectives = frozenset({"allreduce"})
    devices = frozenset({"gpu"})
    dtypes = NcclBackend.dtypes
    compression = NcclBackend.compression

    def __init__(
        self,
        comm: MPI.Intracomm,
        node_comm: MPI.Intracomm,
        leader_comm: MPI.Intracomm,
        device: int,
        cuda_aware: bool = False,
    ) -> None:
        self.comm, self.leader_comm, self.cuda_aware = comm, leader_comm, cuda_aware
        self.node = NcclBackend(node_comm, device)
        self.device = device
        self.fallback: Backend = (CudaAwareMpiBackend if cuda_aware else StagedMpiBackend)(comm)

    def allreduce(
        self,
        src: Any,
        dst: Any,
        op: ReduceOp,
        header: Header | None,
        deadline: Deadline,
        codec: Codec | None = None,
    ) -> None:
        """Node all-reduce with NCCL, leaders' MPI all-reduce, node broadcast with NCCL."""
        unsupported_codec(self, codec)
        if header is not None:
            verify_headers(self.comm, header, deadline)
        self.node.allreduce(src, dst, op, None, deadline, codec)
        if self.leader_comm != MPI.COMM_NULL and self.leader_comm.Get_size() > 1:
            cupy = self.node.cupy
            # MPI has no 16-bit floats: the node sums cross the network as float32.
            wide = dst if codec is None else codec.decode(dst, np.float32)
            if self.cuda_aware:
                cupy.cuda.get_current_stream().synchronize()
                buf = wide
            else:
                buf = stage_to_host(wide)
            request = self.leader_comm.Iallreduce(MPI.IN_PLACE, buf, op=op.mpi)
            wait_request(request, deadline, deadline.timeout is None)
            if buf is not wide:
                wide.set(buf)
            if wide is not dst:
                dst[...] = codec.encode(wide)
        self.node.broadcast(dst, 0, None, deadline)

    def close(self) -> None:
        """Destroy the node's NCCL communicator."""
        self.node.close()
