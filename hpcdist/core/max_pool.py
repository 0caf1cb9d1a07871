"""Differentiable 2-D max pooling on `Tensor` (NHWC, ``tf.nn.max_pool2d``).

Windows that do not overlap (the usual 2x2, stride 2) are taken a few images at a time on
contiguous copies of each position's view and keep which position won for the gradient;
overlapping windows work on one strided view of the input per window position.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hpcdist.core.autodiff import record
from hpcdist.core.tensors import Tensor, as_tensor
from hpcdist.core.windows import check_padding, int_pair, padded_input, unpad, window_views
from hpcdist.utils.xp import array_module

__all__ = ["max_pool2d"]


def max_pool2d(x: Any, pool_size: Any = 2, strides: Any = None, padding: str = "valid") -> Tensor:
    """Max over each window of NHWC ``x`` (``tf.nn.max_pool2d``).

    The gradient goes to the first maximum of each window (row-major order), as TF's. Windows
    that do not overlap (the usual 2x2, stride 2) keep one byte per output saying which
    position won, and the gradient writes each position's view from it
    (`_disjoint_max_pool`). Overlapping windows work on one strided view of the input per
    window position (a running maximum forward; backward, each position takes the gradient
    still unclaimed where it holds the maximum, and what it took is subtracted from the
    unclaimed rest).

    Args:
        x: ``(batch, height, width, channels)``.
        pool_size: An int or ``(ph, pw)``.
        strides: An int or a pair; None means ``pool_size``.
        padding: ``"valid"`` or ``"same"`` (padded positions never win).

    Raises:
        ValueError: Not a 4-D input, or a bad pool size, stride or padding.
    """
    x = as_tensor(x)
    padding = check_padding(padding)
    window = int_pair(pool_size, "pool_size")
    strides = window if strides is None else int_pair(strides, "strides")
    if x.ndim != 4:
        raise ValueError(f"max_pool2d expects a 4-D input, got shape {x.shape}")
    xp = array_module(x.value)
    fill = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    padded, out_hw, top_left = padded_input(x.value, window, strides, padding, fill)
    if strides[0] >= window[0] and strides[1] >= window[1] and window[0] * window[1] < 256:
        value, first = _disjoint_max_pool(padded, window, strides, out_hw)
        padded_shape = padded.shape  # the gradient needs only which position won
        tiled = window[0] * out_hw[0], window[1] * out_hw[1]
        covered = strides == window and padded_shape[1:3] == tiled

        def disjoint_backward(g: Any) -> tuple[Any]:
            # Windows that tile the input write every position: no zero fill needed.
            gpad = (xp.empty if covered else xp.zeros)(padded_shape, g.dtype)
            _disjoint_pool_gradient(first, g, gpad, window, strides)
            return (unpad(gpad, x.shape, top_left),)

        return record(value, (x,), disjoint_backward)

    views = window_views(padded, window, strides, out_hw)
    value = views[0].copy()
    for view in views[1:]:
        xp.maximum(value, view, out=value)

    def backward(g: Any) -> tuple[Any]:
        gpad = xp.zeros(padded.shape, g.dtype)
        grad_views = window_views(gpad, window, strides, out_hw)
        rest, last = g, len(views) - 1
        for k, (view, grad_view) in enumerate(zip(views, grad_views, strict=True)):
            # ``rest`` holds the gradient of the windows whose maximum no earlier position held.
            part = rest * (view == value)
            grad_view += part
            if k == 0 and last:
                rest = rest - part
            elif k < last:
                rest -= part
        return (unpad(gpad, x.shape, top_left),)

    return record(value, (x,), backward)


#: Bytes of the padded input per slice of the batch in a pooling of disjoint windows.
_POOL_SLICE_BYTES = 512 << 10


def _pool_slices(padded: Any) -> range:
    """Start images of `_POOL_SLICE_BYTES` slices of the batch (one slice off numpy)."""
    n = padded.shape[0]
    if array_module(padded) is not np:
        return range(0, n, max(n, 1))
    return range(0, n, max(1, _POOL_SLICE_BYTES // max(padded[:1].nbytes, 1)))


def _disjoint_max_pool(
    padded: Any, window: tuple[int, int], strides: tuple[int, int], out_hw: tuple[int, int]
) -> tuple[Any, Any]:
    """The maximum of windows that do not overlap, and which position held it first.

    A few images at a time (`_POOL_SLICE_BYTES` of input on numpy), each window position's
    view is copied into a contiguous slot (numpy's binary ufuncs buffer strided operands of
    short runs, one channel vector each, which costs more than one copy); the maximum and the
    first position equal to it (row-major, as TF's gradient) are taken on the slots. The
    position is kept as one byte per output (``positions`` where no position equals the
    maximum: a NaN window, whose gradient is 0), so the gradient never reads the input again.
    """
    xp = array_module(padded)
    n, c = padded.shape[0], padded.shape[3]
    positions = window[0] * window[1]
    value = xp.empty((n, *out_hw, c), padded.dtype)
    first = xp.empty(value.shape, np.uint8)
    slices = _pool_slices(padded)
    m = min(slices.step, n)
    slots = xp.empty((positions, m, *out_hw, c), padded.dtype)
    hit, still = xp.empty((m, *out_hw, c), bool), xp.empty((m, *out_hw, c), bool)
    for start in slices:
        stop = min(n, start + slices.step)
        held, top, won = slots[:, : stop - start], value[start:stop], first[start:stop]
        hits = hit[: stop - start]
        views = window_views(padded[start:stop], window, strides, out_hw)
        for slot, view in zip(held, views, strict=True):
            slot[...] = view
        if positions == 1:
            top[...] = held[0]
        else:
            xp.maximum(held[0], held[1], out=top)
        for slot in held[2:]:
            xp.maximum(top, slot, out=top)
        # The first position equal to the maximum is the count of those before it that are not
        # (``positions`` for a NaN window). ``copyto(where=)`` or ``argmax`` take 19-26x longer.
        won.fill(0)
        before = still[: stop - start]
        before.fill(True)
        for slot in held:
            xp.equal(slot, top, out=hits)
            xp.greater(before, hits, out=before)  # no position so far held the maximum
            won += before.view(np.uint8)
    return value, first


def _disjoint_pool_gradient(
    first: Any, g: Any, gpad: Any, window: tuple[int, int], strides: tuple[int, int]
) -> None:
    """Write the gradient of windows that do not overlap into ``gpad`` (the padded input's).

    Each window position gets ``g`` where it held the maximum first (`_disjoint_max_pool`),
    slice by slice of the batch: compared and multiplied on contiguous slots, then written
    into the position's view of the gradient.
    """
    xp = array_module(g)
    n, out_hw = g.shape[0], (g.shape[1], g.shape[2])
    slices = _pool_slices(gpad)
    m = min(slices.step, n)
    part, hit = xp.empty((m, *g.shape[1:]), g.dtype), xp.empty((m, *g.shape[1:]), bool)
    for start in slices:
        stop = min(n, start + slices.step)
        took, hits = part[: stop - start], hit[: stop - start]
        won, grads = first[start:stop], g[start:stop]
        grad_views = window_views(gpad[start:stop], window, strides, out_hw)
        for index, grad_view in enumerate(grad_views):
            xp.equal(won, np.uint8(index), out=hits)
            xp.multiply(grads, hits, out=took)
            grad_view[...] = took
