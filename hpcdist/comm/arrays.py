"""Array handling at the edge of the communication layer: dtypes, staging, MEAN.

numpy arrays are used directly (a contiguous copy is made only when needed). CuPy arrays that
no GPU backend carries are staged through pinned host memory, and anything else with
``__dlpack__`` is viewed through ``np.from_dlpack``. Results come back in the caller's array
type. Buffers are handed to a backend in a dtype it reduces (its ``dtypes``, see `to_wire`),
and MEAN is finished from a SUM by `mean_from_sum`, on the host and on the device.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from hpcdist.comm.reduce_op import ReduceOp
from hpcdist.utils.xp import is_device_array

__all__ = [
    "check_numeric",
    "check_reducible",
    "from_wire",
    "mean_from_sum",
    "native_view",
    "stage_to_host",
    "to_host",
    "to_wire",
]


def to_host(x: Any) -> tuple[np.ndarray, Callable[[np.ndarray], Any]]:
    """Return a numpy view or copy of ``x`` and a function that converts results back.

    Raises:
        TypeError: ``x`` is not an array-like of a numeric or bool dtype.
    """
    if isinstance(x, np.ndarray):
        arr, back = x, _identity
    elif is_device_array(x):
        import cupy

        arr, back = stage_to_host(x), cupy.asarray
    elif hasattr(x, "__dlpack__") and not isinstance(x, (list, tuple)):
        arr, back = np.from_dlpack(x), _identity
    else:
        arr, back = np.asarray(x), _identity
    check_numeric(arr.dtype)
    return arr, back


def native_view(a: Any) -> Any:
    """``a`` seen in native byte order: the same bytes, for collectives that only move bytes.

    MPI refuses buffers in non-native byte order; every rank has the same order (the header
    check compares it), so the bytes arrive as they left.
    """
    return a if a.dtype.isnative else a.view(a.dtype.newbyteorder("="))


def check_numeric(dtype: np.dtype) -> None:
    """Raise `TypeError` unless ``dtype`` is numeric or bool (strings, objects, dates are not).

    Raises:
        TypeError: Naming the dtype.
    """
    if dtype.kind not in "biufc":
        raise TypeError(f"collectives take numeric or bool arrays, got dtype {dtype}")


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


def mean_from_sum(total: Any, size: int) -> None:
    """Finish a MEAN in place: divide the SUM ``total`` (numpy or CuPy) by ``size``.

    Integers are floor-divided (MEAN of integers rounds down).
    """
    if total.dtype.kind in "fc":
        total /= size
    else:
        total //= size


# dtypes widened when a backend cannot reduce them: float16 and the 16-bit integers
_WIDER = {"e": np.float32, "h": np.int32, "H": np.int64}
_REAL = {"F": np.float32, "D": np.float64}


def to_wire(flat: Any, dtypes: frozenset[str]) -> tuple[Any, str]:
    """``flat`` (1-D, numpy or CuPy) in a dtype that a backend reducing ``dtypes`` takes.

    Returns:
        The buffer and how it was made: ``""`` (``flat`` itself), ``"view"`` (bool as uint8,
        complex as pairs of reals: a view of ``flat``) or ``"cast"`` (a copy: wider, or in
        native byte order, since backends reduce native numbers only).
    """
    char = flat.dtype.char
    if not flat.dtype.isnative:
        native = flat.dtype.newbyteorder("=")
        return flat.astype(native if char in dtypes else _WIDER.get(char, native)), "cast"
    if char in dtypes:
        return flat, ""
    if char == "?":
        return flat.view(np.uint8), "view"
    real = _REAL.get(char)
    if real is not None:
        return flat.view(real), "view"
    return flat.astype(_WIDER.get(char, np.float64)), "cast"


def from_wire(buf: Any, how: str, dtype: np.dtype) -> Any:
    """Undo `to_wire`: ``buf`` as ``dtype`` (a view, or a cast copy)."""
    if how == "view":
        return buf.view(dtype)
    if how == "cast":
        return buf.astype(dtype)
    return buf
