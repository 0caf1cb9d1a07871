"""Output arrays of out-of-place collectives, reused once their callers have dropped them.

A fresh large output costs more than the reduction itself on these machines: the first touch
of new memory page-faults (about 2 s of kernel time per GiB). `OutputPool` keeps the last few
large outputs and hands one out again when nothing outside the pool refers to it any more (its
reference count says so; a view of it, a memoryview or an exported buffer all hold a
reference). ``y = comm.allreduce(x)`` in a loop then alternates between two buffers instead of
faulting in a new one each step; tensor fusion packs into them too.
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict

import numpy as np

__all__ = ["MIN_POOLED_BYTES", "OutputPool"]

#: Outputs smaller than this are allocated fresh (they come from the allocator's free lists).
MIN_POOLED_BYTES = 256 << 10
# Reference count of an array held only by the pool, seen from inside `take`: the pool's
# dict entry, the loop variable, and getrefcount's own argument.
_FREE_REFS = 3


class OutputPool:
    """Reusable numpy outputs, by byte size and dtype.

    Args:
        max_bytes: Bytes the pool may keep (least recently handed out dropped first).
        max_arrays: Arrays the pool may keep.
    """

    def __init__(self, max_bytes: int = 512 << 20, max_arrays: int = 8) -> None:
        self.max_bytes, self.max_arrays = max_bytes, max_arrays
        self._arrays: OrderedDict[int, np.ndarray] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def take(self, size: int, dtype: np.dtype) -> np.ndarray:
        """A 1-d array of ``size`` elements of ``dtype`` that no caller holds (undefined data)."""
        dtype = np.dtype(dtype)
        if size * dtype.itemsize < MIN_POOLED_BYTES:
            return np.empty(size, dtype)
        with self._lock:
            return self._take(size, dtype)

    def _take(self, size: int, dtype: np.dtype) -> np.ndarray:
        for key in list(self._arrays):
            arr = self._arrays[key]
            if arr.size == size and arr.dtype == dtype and sys.getrefcount(arr) <= _FREE_REFS:
                self._arrays.move_to_end(key)
                return arr
        arr = np.empty(size, dtype)
        self._arrays[id(arr)] = arr
        self._bytes += arr.nbytes
        while self._arrays and (
            self._bytes > self.max_bytes or len(self._arrays) > self.max_arrays
        ):
            _, old = self._arrays.popitem(last=False)
            self._bytes -= old.nbytes
        return arr

    def clear(self) -> None:
        """Drop every kept array."""
        self._arrays.clear()
        self._bytes = 0
