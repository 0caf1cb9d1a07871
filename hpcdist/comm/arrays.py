"""Conversions at the edge of the communication layer: any array in, host numpy buffers out.

numpy arrays are used directly (a contiguous copy is made only when needed). CuPy arrays that
NCCL does not carry (see `hpcdist.comm.nccl_ops`) are staged through pinned host memory, and
anything else with ``__dlpack__`` is viewed through ``np.from_dlpack``. Results come back in the
caller's array type.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from hpcdist.comm.reduce_op import ReduceOp

__all__ = ["check_reducible", "stage_to_host", "to_host", "wire_dtype"]


def _is_cupy(x: Any) -> bool:
    return type(x).__module__.split(".", 1)[0] == "cupy"


def to_host(x: Any) -> tuple[np.ndarray, Callable[[np.ndarray], Any]]:
    """Return a numpy view or copy of ``x`` and a function that converts results back.

    Raises:
        TypeError: ``x`` is not an array-like of a numeric or bool dtype.
    """
    if isinstance(x, np.ndarray):
        arr, back = x, _identity
    elif _is_cupy(x):
        import cupy

        arr, back = stage_to_host(x), cupy.asarray
    elif hasattr(x, "__dlpack__") and not isinstance(x, (list, tuple)):
        arr, back = np.from_dlpack(x), _identity
    else:
        arr, back = np.asarray(x), _identity
    if arr.dtype.kind not in "biufc":
        raise TypeError(f"collectives take numeric or bool arrays, got dtype {arr.dtype}")
    return arr, back


def stage_to_host(x: Any) -> np.ndarray:
    """Copy a CuPy array into pinned (page-locked) host memory and return a numpy view of it.

    Pinned memory comes from CuPy's pinned pool (reused across calls) and copies at full bus
    speed. The copy is made on the current stream and waited for, so the stream is synchronised
    before the data reaches any MPI call.
    """
    import cupy

    src = cupy.ascontiguousarray(x)
    pinned = cupy.cuda.alloc_pinned_memory(max(src.nbytes, 1))
    host = np.frombuffer(pinned, src.dtype, src.size).reshape(src.shape)
    src.get(out=host, blocking=True)
    return host


def _identity(a: np.ndarray) -> np.ndarray:
    return a


def check_reducible(dtype: np.dtype, op: ReduceOp) -> str | None:
    """Return why ``op`` cannot reduce ``dtype``, or None when it can."""
    if dtype.kind == "b" and op in (ReduceOp.SUM, ReduceOp.MEAN, ReduceOp.PROD):
        return f"{op.name} of bool arrays is not defined; use MIN (all) or MAX (any)"
    if dtype.kind == "c" and op in (ReduceOp.MIN, ReduceOp.MAX):
        return f"{op.name} of complex arrays is not defined"
    return None


def wire_dtype(dtype: np.dtype, backend: str) -> np.dtype:
    """The dtype a backend reduces ``dtype`` in (MPI has no float16 and no bool arithmetic)."""
    if dtype.kind == "b":
        return np.dtype(np.uint8)
    if dtype == np.float16 and backend != "shm":
        return np.dtype(np.float32)
    return dtype
