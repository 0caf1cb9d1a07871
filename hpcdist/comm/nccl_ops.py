"""The data-moving half of `Communicator`'s collectives on GPU arrays, over `NcclBackend`.

Everything stays on the device: dtype conversions, compression to fp16/bf16, MEAN's division,
the padding that NCCL's equal-count all-gather and reduce-scatter need. The `Communicator`
validates arguments and checks headers across ranks before calling these.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Sequence
from typing import Any

import numpy as np

from hpcdist.comm.checks import Deadline
from hpcdist.comm.cuda_mpi import CudaAwareMpiBackend
from hpcdist.comm.nccl_backend import (
    NCCL_BFLOAT16,
    NcclBackend,
    bf16_to_float32,
    float32_to_bf16,
    nccl_dtype,
)
from hpcdist.comm.reduce_op import ReduceOp
from hpcdist.utils.xp import array_module

__all__ = [
    "allgather_on_device",
    "broadcast_on_device",
    "device_reduce_error",
    "nccl_available",
    "reduce_on_device",
    "reduce_scatter_on_device",
]


@functools.cache
def nccl_available() -> bool:
    """Whether CuPy is installed and its NCCL bindings load (no GPU needed to answer)."""
    if importlib.util.find_spec("cupy") is None:
        return False
    try:
        from cupy.cuda import nccl

        return bool(nccl.available)
    except Exception:  # CuPy without NCCL, or a broken install
        return False


def device_reduce_error(dtype: np.dtype, op: ReduceOp) -> str | None:
    """Why NCCL cannot reduce ``dtype`` with ``op`` (None when it can, maybe after a cast)."""
    if dtype.kind == "c" and op is ReduceOp.PROD:
        return "NCCL cannot multiply complex arrays; use implementation='mpi' (staged via host)"
    return None


def _wire(
    flat: Any, op: ReduceOp, compress: str | None, float16: bool = True
) -> tuple[Any, int | None, str, bool]:
    """The wire form of ``flat``: buffer, NCCL type override, conversion back, fresh or not.

    The buffer is fresh (a conversion) or a view of ``flat``. Without ``float16`` (CUDA-aware
    MPI) float16 is widened to float32, and so are compressed arrays: MPI reduces neither
    16-bit float type.
    """
    xp = array_module(flat)
    dtype = flat.dtype
    if not float16:
        if dtype == np.float16 or compress:
            return flat.astype(xp.float32), None, "cast", True
        compress = None
    if compress == "bf16":
        bits = float32_to_bf16(flat.astype(xp.float32, copy=False))
        return bits, NCCL_BFLOAT16, "bf16", True
    if compress == "fp16" and dtype != np.float16:
        return flat.astype(xp.float16), None, "cast", True
    if dtype.kind == "b":
        return flat.view(xp.uint8), None, "bool", False
    if dtype.kind == "c":
        return flat.view(xp.float32 if dtype == np.complex64 else xp.float64), None, "view", False
    if nccl_dtype(dtype) is None:  # int16, uint16: widen
        wide = xp.int64 if dtype.kind == "u" else xp.int32
        return flat.astype(wide), None, "cast", True
    return flat, None, "", False


def reduce_on_device(
    nccl: NcclBackend | CudaAwareMpiBackend,
    x: Any,
    op: ReduceOp,
    size: int,
    compress: str | None,
    deadline: Deadline,
    in_place: bool = False,
) -> Any:
    """All-reduce the CuPy array ``x`` (any shape) and return the result in ``x``'s dtype.

    The result is a new array, or with ``in_place`` the memory of a contiguous ``x`` itself
    (reduced there directly when no conversion is needed). MEAN is a SUM followed by a
    division on the device (floor division for integers).
    """
    xp = array_module(x)
    flat = xp.ascontiguousarray(x).reshape(-1)
    src, nccl_type, back, fresh = _wire(flat, op, compress, getattr(nccl, "carries_float16", True))
    # A converted copy, or the caller's own buffer, is reduced in place.
    work = src if fresh or (in_place and x.flags.c_contiguous) else xp.empty_like(src)
    wire_op = ReduceOp.SUM if op is ReduceOp.MEAN else op
    nccl.allreduce(src, work, wire_op, None, deadline, nccl_type)
    if back == "bf16":
        out = bf16_to_float32(work).astype(x.dtype, copy=False)
    elif back == "bool":
        out = work.view(xp.bool_)
    elif back == "view":
        out = work.view(x.dtype)
    elif back == "cast":
        out = work if op is ReduceOp.MEAN else work.astype(x.dtype)
    else:
        out = work
    if op is ReduceOp.MEAN:
        if out.dtype.kind in "fc":
            out /= size
        else:
            out //= size
        out = out.astype(x.dtype, copy=False)
    return out.reshape(x.shape)


def broadcast_on_device(nccl: NcclBackend, buf: Any, root: int, deadline: Deadline) -> None:
    """Overwrite the contiguous CuPy array ``buf`` with rank ``root``'s, in place."""
    nccl.broadcast(buf, root, None, deadline)


def allgather_on_device(nccl: NcclBackend, x: Any, rows: Sequence[int], deadline: Deadline) -> Any:
    """Concatenate every rank's ``x`` along axis 0; ``rows[r]`` is rank ``r``'s first dim.

    NCCL gathers equal counts, so uneven blocks are padded to the largest and compacted after.
    """
    xp = array_module(x)
    size, most = len(rows), max(rows)
    rest = x.shape[1:]
    send = xp.zeros((most, *rest), dtype=x.dtype)
    send[: x.shape[0]] = x
    recv = xp.empty((size, most, *rest), dtype=x.dtype)
    nccl.allgather(send.reshape(-1), recv.reshape(-1), deadline)
    if all(r == most for r in rows):
        return recv.reshape(size * most, *rest)
    return xp.concatenate([recv[r, : rows[r]] for r in range(size)])


def reduce_scatter_on_device(
    nccl: NcclBackend,
    x: Any,
    op: ReduceOp,
    rows: Sequence[int],
    rank: int,
    deadline: Deadline,
) -> Any:
    """Reduce ``x`` over ranks and return rank ``rank``'s ``rows[rank]`` rows (on the device)."""
    xp = array_module(x)
    size, most = len(rows), max(rows)
    rest = x.shape[1:]
    padded = xp.zeros((size, most, *rest), dtype=x.dtype)
    start = 0
    for r, count in enumerate(rows):
        padded[r, :count] = x[start : start + count]
        start += count
    work, nccl_type, back, _ = _wire(padded.reshape(-1), op, None)
    if nccl_type is not None or back not in ("", "cast", "bool"):
        raise TypeError(f"reduce_scatter on the GPU does not support dtype {x.dtype}")
    block = work.size // size
    out = xp.empty(block, dtype=work.dtype)
    wire_op = ReduceOp.SUM if op is ReduceOp.MEAN else op
    nccl.reduce_scatter(work, out, wire_op, deadline)
    if op is ReduceOp.MEAN:
        if out.dtype.kind == "f":
            out /= size
        else:
            out //= size
    out = out.view(xp.bool_) if back == "bool" else out.astype(x.dtype, copy=False)
    return out.reshape(most, *rest)[: rows[rank]]
