"""Atomic operations on integer variables, wherever they live.

A variable placed on a parameter server is a word in an RMA window: MPI's
``Fetch_and_op`` and ``Compare_and_swap`` update it atomically with respect to every other
rank's atomic operations on it. A variable in this process is updated under a lock. The global
step's reservation, the token queue and the gradient accumulators of synchronous training are
built on these two operations.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
from mpi4py import MPI

from hpcdist.strategies.ps.store import RmaStorage

__all__ = ["atomic_read", "compare_and_swap", "fetch_add"]

_lock = threading.Lock()


def _element(var: Any, index: int) -> tuple[Any, int, int, np.dtype] | None:
    """``(window, target, byte displacement, dtype)`` of element ``index`` of an RMA variable.

    Raises:
        TypeError: The variable is not of an integer dtype.
    """
    storage = var._storage[0]
    dtype = storage.dtype if isinstance(storage, RmaStorage) else storage.read().dtype
    if dtype.kind not in "iu":
        name = getattr(var, "name", "?")
        raise TypeError(f"atomic counter {name!r} must have an integer dtype, not {dtype}")
    if not isinstance(storage, RmaStorage):
        return None
    win, target = storage._located()
    return win, target, storage.offset + index * storage.dtype.itemsize, storage.dtype


def fetch_add(var: Any, delta: int, index: int = 0) -> int:
    """Add ``delta`` to element ``index`` of integer ``var``; the value before."""
    where = _element(var, index)
    if where is None:
        with _lock:
            array = var._storage[0].read().reshape(-1)
            old = int(array[index])
            array[index] = old + delta
            return old
    win, target, disp, dtype = where
    result = np.empty(1, dtype)
    win.Fetch_and_op(np.array([delta], dtype), result, target, disp, MPI.SUM)
    win.Flush(target)
    return int(result[0])


def compare_and_swap(var: Any, expected: int, new: int, index: int = 0) -> int:
    """Set element ``index`` of integer ``var`` to ``new`` if it equals ``expected``.

    Returns:
        The value found (equal to ``expected`` when the swap happened).
    """
    where = _element(var, index)
    if where is None:
        with _lock:
            array = var._storage[0].read().reshape(-1)
            old = int(array[index])
            if old == expected:
                array[index] = new
            return old
    win, target, disp, dtype = where
    result = np.empty(1, dtype)
    win.Compare_and_swap(np.array([new], dtype), np.array([expected], dtype), result, target, disp)
    win.Flush(target)
    return int(result[0])


def atomic_read(var: Any, index: int = 0) -> int:
    """Element ``index`` of integer ``var``, read atomically (``Fetch_and_op(NO_OP)``)."""
    where = _element(var, index)
    if where is None:
        with _lock:
            return int(var._storage[0].read().reshape(-1)[index])
    win, target, disp, dtype = where
    result = np.empty(1, dtype)
    win.Fetch_and_op(np.zeros(1, dtype), result, target, disp, MPI.NO_OP)
    win.Flush(target)
    return int(result[0])
