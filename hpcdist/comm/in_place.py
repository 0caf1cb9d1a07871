"""The input check of in-place fused all-reduces: writeable arrays that share no memory.

A ``grouped_allreduce_`` writes each result into its own input, so two inputs that share
memory would make the results depend on the order of the writes. Host arrays that own their
memory cannot overlap, which the common case shows at the cost of one pass; otherwise the
arrays' byte ranges are swept in address order and numpy's exact test settles the pairs whose
ranges meet. CuPy arrays are swept the same way, from their device addresses, strides and
item sizes, without running a kernel or reading device memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.lib.array_utils import byte_bounds

from hpcdist.utils.xp import is_device_array

__all__ = ["check_in_place", "type_name"]


def check_in_place(xs: Sequence[Any]) -> None:
    """Raise unless every array of ``xs`` can take its result in place, alone.

    Args:
        xs: The arrays of a ``grouped_allreduce_``: writeable numpy, or CuPy.

    Raises:
        TypeError: An array that is neither writeable numpy nor CuPy.
        ValueError: Two arrays that share memory (the results would depend on the order).
    """
    for i, x in enumerate(xs):
        if is_device_array(x):  # carried by the device, or staged and copied back
            continue
        if not (type(x) is np.ndarray and x.flags.writeable):
            got = "array {i} is read-only" if type(x) is np.ndarray else "got {t} at index {i}"
            raise TypeError(
                "grouped_allreduce_ works in place on writeable numpy or CuPy arrays only, "
                + got.format(i=i, t=type_name(x))
            )
    host = [i for i, x in enumerate(xs) if type(x) is np.ndarray]
    if len({id(xs[i]) for i in host}) != len(host) or any(xs[i].base is not None for i in host):
        # only views or repeated arrays can overlap (arrays that own their memory cannot)
        spans = [(*byte_bounds(xs[i]), i) for i in host if xs[i].size]
        _refuse_overlaps(xs, spans, np.shares_memory)
    device = [i for i, x in enumerate(xs) if is_device_array(x) and x.size]
    if len(device) > 1:  # (a CuPy array without a base may still share memory: check all)
        _refuse_overlaps(xs, [(*_device_bounds(xs[i]), i) for i in device], _device_shares)


def _dense(x: Any) -> bool:
    return x.flags.c_contiguous or x.flags.f_contiguous


def _device_bounds(x: Any) -> tuple[int, int]:
    """The device addresses ``[low, high)`` a CuPy array's elements lie in."""
    low = high = x.data.ptr
    if _dense(x):
        return low, low + x.nbytes
    for n, stride in zip(x.shape, x.strides, strict=True):
        if stride < 0:
            low += (n - 1) * stride
        else:
            high += (n - 1) * stride
    return low, high + x.itemsize


class _Layout:
    """A CuPy array's address, shape and strides as a numpy array interface (never read)."""

    def __init__(self, x: Any) -> None:
        self.__array_interface__ = {
            "data": (x.data.ptr, False),
            "shape": x.shape,
            "strides": x.strides,
            "typestr": x.dtype.str,
            "version": 3,
        }


def _device_shares(a: Any, b: Any) -> bool:
    """Whether two CuPy arrays share a byte: numpy's exact test on their layouts alone.

    No kernel runs and no device memory is read (``cupy.shares_memory`` would compare element
    addresses on the device, and misses views of different item sizes sharing bytes).
    """
    return bool(np.shares_memory(np.asarray(_Layout(a)), np.asarray(_Layout(b))))


def _refuse_overlaps(xs: Sequence[Any], spans: list[tuple[int, int, int]], shares: Any) -> None:
    """Raise ValueError naming the first two arrays (by index) that share memory.

    Args:
        xs: The arrays.
        spans: ``(low, high, index)``: the address range of each array to check.
        shares: The exact test, asked only when two ranges meet and one of the arrays is not
            contiguous (two contiguous ones then overlap).
    """
    open_: list[tuple[int, int, int]] = []  # spans that reach past the current start
    pairs = []
    for low, high, j in sorted(spans):
        open_ = [span for span in open_ if span[1] > low]
        for _, _, i in open_:
            if (_dense(xs[i]) and _dense(xs[j])) or shares(xs[i], xs[j]):
                pairs.append((min(i, j), max(i, j)))
        open_.append((low, high, j))
    if pairs:
        i, j = min(pairs)
        raise ValueError(
            f"grouped_allreduce_ needs arrays that share no memory, but arrays {i} and {j} overlap"
        )


def type_name(x: Any) -> str:
    """``x``'s type as a user would write it (``cupy.ndarray``, ``list``)."""
    kind = type(x)
    top = kind.__module__.split(".")[0]
    return kind.__name__ if top == "builtins" else f"{top}.{kind.__name__}"
