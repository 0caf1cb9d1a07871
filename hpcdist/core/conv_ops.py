"""Differentiable 2-D convolutions on `Tensor` (NHWC, TF's padding rules).

The convolution gathers the input's windows (im2col by strided views, numpy or CuPy alike) and
is one matrix product forward, slice by slice of the batch when the window matrix is large;
backward, the kernel gradient is one product per slice (large window matrices are gathered
again rather than kept) and the input gradient one product per kernel position added into a
strided view (no window-gradient array); with few channels at stride 1, both gradients are
taken on the padded input's grid instead (`hpcdist.core.conv_grid`).
A depthwise convolution adds one strided view per kernel position (`depthwise_conv2d`).
Sizes, padding and the views are `hpcdist.core.windows`'; max pooling is
`hpcdist.core.max_pool`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hpcdist.core.autodiff import record
from hpcdist.core.conv_grid import GRID_CHANNELS, grid_input_gradient, grid_kernel_gradient, on_grid
from hpcdist.core.math_ops import same_device
from hpcdist.core.per_channel import per_channel
from hpcdist.core.reductions import sum_rows
from hpcdist.core.tensors import Tensor, as_tensor
from hpcdist.core.windows import (
    check_padding,
    int_pair,
    padded_input,
    unpad,
    window_views,
)
from hpcdist.utils.xp import array_module

__all__ = ["conv2d", "depthwise_conv2d"]


# Below this many input channels the window gather copies one strided view per kernel position
# (long contiguous runs per copy); from it on, one copy of a 6-D strided view is faster.
_VIEW_GATHER_CHANNELS = 8


def _im2col(x: Any, window: tuple[int, int], strides: tuple[int, int], out: tuple[int, int]) -> Any:
    """``(batch * oh * ow, kh * kw * channels)``: every window's values, kernel positions in order.

    One copy of the input's windows (numpy or CuPy alike): a stack of strided views for few
    channels, else one contiguous copy of the ``(batch, oh, ow, kh, kw, channels)`` view.
    """
    xp = array_module(x)
    n, _, _, c = x.shape
    rows, width = n * out[0] * out[1], window[0] * window[1] * c
    if c < _VIEW_GATHER_CHANNELS:
        return xp.stack(window_views(x, window, strides, out), axis=3).reshape(rows, width)
    sn, sh, sw, sc = x.strides
    view = xp.lib.stride_tricks.as_strided(
        x,
        shape=(n, out[0], out[1], window[0], window[1], c),
        strides=(sn, sh * strides[0], sw * strides[1], sh, sw, sc),
    )
    return xp.ascontiguousarray(view).reshape(rows, width)


# A window matrix up to _KEEP_BYTES is built at once and kept for the kernel gradient. A larger
# one is built (and multiplied) _CHUNK_BYTES at a time: each slice of the batch stays in cache
# between its gather and its product, and a large batch never holds every window at once (the
# kernel gradient gathers them again, slice by slice).
_KEEP_BYTES = 8 << 20
_CHUNK_BYTES = 4 << 20


def _image_chunks(
    padded: Any, window: tuple[int, int], out: tuple[int, int]
) -> list[tuple[int, int]]:
    """``(start, stop)`` image ranges: all at once up to `_KEEP_BYTES`, else `_CHUNK_BYTES` each."""
    n = padded.shape[0]
    per_image = out[0] * out[1] * window[0] * window[1] * padded.shape[3] * padded.itemsize
    if n * per_image <= _KEEP_BYTES:
        return [(0, n)] if n else []
    step = max(1, _CHUNK_BYTES // max(per_image, 1))
    return [(s, min(s + step, n)) for s in range(0, n, step)]


#: Bytes of a slice of the batch's product in the input gradient (`_input_gradient`).
_GRAD_SLICE_BYTES = 128 << 10


def _input_gradient(
    g2: Any,
    kernel: Any,
    padded_shape: tuple[int, ...],
    strides: tuple[int, int],
    out: tuple[int, int],
) -> Any:
    """The gradient of the padded input: per kernel position, one GEMM added where it read.

    ``g2`` is the output gradient as ``(batch * oh * ow, filters)``; kernel position ``(i, j)``
    contributes ``g2 @ kernel[i, j].T`` to the strided view of the positions it read. Nine
    ``(rows, filters) @ (filters, channels)`` products into one reused buffer replace the
    ``(rows, kh * kw * channels)`` window-gradient array and its scatter. On numpy the batch
    is taken a few images at a time (`_GRAD_SLICE_BYTES` of product), so that a slice's
    products, its gradient and its part of ``g2`` stay in cache across the nine positions
    (each element still adds the positions in the same order).
    """
    xp = array_module(g2)
    n, c = padded_shape[0], padded_shape[3]
    per_image = out[0] * out[1]
    grad = xp.zeros(padded_shape, g2.dtype)
    if xp is np:
        row_bytes = per_image * max(c, g2.shape[1]) * g2.itemsize
        step = max(1, _GRAD_SLICE_BYTES // max(row_bytes, 1))
    else:
        step = max(n, 1)  # a GPU gains nothing from slicing: one product per position
    part = xp.empty((min(step, n) * per_image, c), g2.dtype)
    window = (kernel.shape[0], kernel.shape[1])
    transposed = [kernel[i, j].T for i in range(window[0]) for j in range(window[1])]
    for start in range(0, n, step):
        stop = min(n, start + step)
        rows = g2[start * per_image : stop * per_image]
        slot = part[: rows.shape[0]]
        views = window_views(grad[start:stop], window, strides, out)
        for view, k in zip(views, transposed, strict=True):
            xp.matmul(rows, k, out=slot)
            view += slot.reshape(stop - start, out[0], out[1], c)
    return grad


def _conv_arguments(
    op: str, x: Any, kernel: Any, strides: Any, padding: str
) -> tuple[Tensor, Tensor, tuple[int, int], str]:
    """``x`` and ``kernel`` as tensors on one device, the strides and padding, all checked.

    Raises:
        ValueError: Not 4-D, channel counts that differ, a bad stride or padding.
    """
    x, kernel = same_device(as_tensor(x), as_tensor(kernel))
    padding = check_padding(padding)
    strides = int_pair(strides, "strides")
    if x.ndim != 4 or kernel.ndim != 4:
        raise ValueError(
            f"{op} expects a 4-D input and a 4-D kernel, got shapes {x.shape} and {kernel.shape}"
        )
    if x.shape[3] != kernel.shape[2]:
        raise ValueError(
            f"{op}: the input has {x.shape[3]} channels, the kernel expects {kernel.shape[2]}"
        )
    return x, kernel, strides, padding


def _conv_bias(
    op: str, bias: Any, x: Tensor, kernel: Tensor, size: int
) -> tuple[Tensor | None, tuple[Tensor, ...]]:
    """The bias as a tensor beside ``x`` (None stays None) and the op's inputs for the tape.

    Raises:
        ValueError: The bias is not ``(size,)``.
    """
    if bias is None:
        return None, (x, kernel)
    bias = same_device(as_tensor(bias), x)[0]
    if bias.shape != (size,):
        raise ValueError(f"{op}: bias must have shape ({size},), got {bias.shape}")
    return bias, (x, kernel, bias)


def conv2d(
    x: Any, kernel: Any, strides: Any = 1, padding: str = "valid", bias: Any = None
) -> Tensor:
    """2-D cross-correlation of NHWC ``x`` with an HWIO ``kernel`` (``tf.nn.conv2d``).

    One window gather and one matrix product forward; backward, one product for the kernel
    gradient and one per kernel position for the input gradient (see `_input_gradient`).

    Args:
        x: ``(batch, height, width, in_channels)``.
        kernel: ``(kh, kw, in_channels, filters)``.
        strides: An int or ``(sh, sw)``.
        padding: ``"valid"`` or ``"same"``.
        bias: Optional ``(filters,)`` added to every position (``tf.nn.bias_add``), in place.

    Raises:
        ValueError: Ranks or channel counts that do not fit, or a bad stride or padding.
    """
    x, kernel, strides, padding = _conv_arguments("conv2d", x, kernel, strides, padding)
    filters = kernel.shape[3]
    bias, inputs = _conv_bias("conv2d", bias, x, kernel, filters)
    window = (kernel.shape[0], kernel.shape[1])
    padded, out_hw, top_left = padded_input(x.value, window, strides, padding, 0.0)
    n, oh, ow = x.shape[0], out_hw[0], out_hw[1]
    flat_kernel = kernel.value.reshape(-1, filters)
    chunks = _image_chunks(padded, window, out_hw)
    per_image = oh * ow
    xp = array_module(padded)
    value = xp.empty((n * per_image, filters), xp.result_type(padded, flat_kernel))
    kept_cols = None
    for start, stop in chunks:
        cols = _im2col(padded[start:stop], window, strides, out_hw)
        part = value[start * per_image : stop * per_image]
        xp.matmul(cols, flat_kernel, out=part)
        if bias is not None:  # while the slice is in cache
            per_channel(xp.add, part, bias.value, out=part)
        if len(chunks) == 1:
            kept_cols = cols  # small enough to keep for the kernel gradient
    value = value.reshape(n, oh, ow, filters)

    # The padded copy is not kept for backward (the input is, by the tape): the kernel gradient
    # pads each slice of the batch again as it gathers its windows.
    padded_shape, copied = padded.shape, padded is not x.value
    del padded

    # Few channels, stride 1: the gradients on the padded grid (`hpcdist.core.conv_grid`), built
    # only when one of them will use it (the input's, or the kernel's without kept windows).
    grid = xp is np and strides == (1, 1) and max(x.shape[3], filters) <= GRID_CHANNELS
    grid = grid and (x.trace or kept_cols is None)

    def kernel_gradient(g2: Any, on: Any) -> Any:
        if kept_cols is not None:
            return xp.matmul(kept_cols.T, g2).reshape(kernel.shape)
        if on is not None:
            images = padded_input(x.value, window, strides, padding, 0.0)[0]
            return grid_kernel_gradient(images, on, kernel.shape)
        grad = xp.zeros(flat_kernel.shape, g2.dtype)
        part = xp.empty(flat_kernel.shape, g2.dtype)
        for start, stop in chunks:
            images = x.value[start:stop]
            if copied:
                images = padded_input(images, window, strides, padding, 0.0)[0]
            cols = _im2col(images, window, strides, out_hw)
            xp.matmul(cols.T, g2[start * per_image : stop * per_image], out=part)
            grad += part
        return grad.reshape(kernel.shape)

    def backward(g: Any) -> tuple[Any, ...]:
        g2 = g.reshape(n * per_image, filters)
        on = on_grid(g, padded_shape) if grid else None
        gk = kernel_gradient(g2, on) if kernel.trace else None
        gx = None
        if x.trace:
            if on is not None:
                gpad = grid_input_gradient(on, kernel.value, padded_shape)
            else:
                gpad = _input_gradient(g2, kernel.value, padded_shape, strides, out_hw)
            gx = unpad(gpad, x.shape, top_left)
        if bias is None:
            return gx, gk
        return gx, gk, (sum_rows(g2) if bias.trace else None)

    return record(value, inputs, backward)


def depthwise_conv2d(
    x: Any, kernel: Any, strides: Any = 1, padding: str = "valid", bias: Any = None
) -> Tensor:
    """Per-channel 2-D cross-correlation of NHWC ``x`` (``tf.nn.depthwise_conv2d``).

    Channel ``c`` is filtered by ``kernel[:, :, c, m]`` for each of the ``M`` multipliers; the
    output channel ``c * M + m`` holds it (TF's order). With one small matrix per channel there
    is no GEMM to win: each kernel position adds its strided view of the input times its
    ``(C, M)`` slice of the kernel, forward and backward alike (no window array).

    Args:
        x: ``(batch, height, width, channels)``.
        kernel: ``(kh, kw, channels, multiplier)``.
        strides: An int or ``(sh, sw)``.
        padding: ``"valid"`` or ``"same"``.
        bias: Optional ``(channels * multiplier,)``.

    Raises:
        ValueError: Ranks or channel counts that do not fit, or a bad stride or padding.
    """
    x, kernel, strides, padding = _conv_arguments("depthwise_conv2d", x, kernel, strides, padding)
    kh, kw, c, m = kernel.shape
    bias, inputs = _conv_bias("depthwise_conv2d", bias, x, kernel, c * m)
    window = (kh, kw)
    padded, out_hw, top_left = padded_input(x.value, window, strides, padding, 0.0)
    xp = array_module(padded)
    n, (oh, ow) = x.shape[0], out_hw
    views = window_views(padded, window, strides, out_hw)
    k = kernel.value
    value = xp.zeros((n, oh, ow, c, m), xp.result_type(padded, k))
    part = xp.empty_like(value)
    for index, view in enumerate(views):
        i, j = divmod(index, kw)
        xp.multiply(view[..., None], k[i, j], out=part)
        value += part
    value = value.reshape(n, oh, ow, c * m)
    if bias is not None:
        value += bias.value

    def backward(g: Any) -> tuple[Any, ...]:
        g5 = g.reshape(n, oh, ow, c, m)
        gk = None
        if kernel.trace:
            gk = xp.empty(k.shape, g.dtype)
            for index, view in enumerate(views):
                i, j = divmod(index, kw)
                gk[i, j] = xp.einsum("nhwc,nhwcm->cm", view, g5)
        gx = None
        if x.trace:
            gpad = xp.zeros(padded.shape, g.dtype)
            grad_views = window_views(gpad, window, strides, out_hw)
            for index, grad_view in enumerate(grad_views):
                i, j = divmod(index, kw)
                if m == 1:
                    grad_view += g5[..., 0] * k[i, j, :, 0]
                else:
                    grad_view += xp.einsum("nhwcm,cm->nhwc", g5, k[i, j])
            gx = unpad(gpad, x.shape, top_left)
        if bias is None:
            return gx, gk
        return gx, gk, (sum_rows(g.reshape(-1, c * m)) if bias.trace else None)

    return record(value, inputs, backward)
