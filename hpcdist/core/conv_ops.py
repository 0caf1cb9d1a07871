"""Differentiable 2-D convolution and max pooling on `Tensor` (NHWC, TF's padding rules).

The convolution gathers the input's windows (im2col by strided views, numpy or CuPy alike) and
is one matrix product forward, slice by slice of the batch when the window matrix is large;
backward, the kernel gradient is one product per slice (large window matrices are gathered
again rather than kept) and the input gradient one product per kernel position added into a
strided view (no window-gradient array); with few channels at stride 1, both gradients are
taken on the padded input's grid instead (`hpcdist.core.conv_grid`).
A depthwise convolution adds one strided view per kernel position (`depthwise_conv2d`).
Max pooling works on one strided view per window position. Padding
``"same"`` follows TF: the output has ``ceil(size / stride)`` positions and the extra padding
goes after (bottom/right) when the total is odd.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hpcdist.core.autodiff import record
from hpcdist.core.conv_grid import GRID_CHANNELS, grid_input_gradient, grid_kernel_gradient, on_grid
from hpcdist.core.math_ops import same_device
from hpcdist.core.reductions import sum_rows
from hpcdist.core.tensors import Tensor, as_tensor
from hpcdist.utils.xp import array_module

__all__ = ["conv2d", "conv_output_size", "int_pair", "max_pool2d", "same_padding"]


def int_pair(value: Any, what: str) -> tuple[int, int]:
    """``(a, b)`` from an int or a pair of positive ints.

    Raises:
        ValueError: Not one or two positive integers.
    """
    pair = (value, value) if isinstance(value, (int, np.integer)) else tuple(value)
    if len(pair) != 2 or any(int(v) < 1 for v in pair):
        raise ValueError(f"{what} must be a positive int or a pair of them, got {value!r}")
    return int(pair[0]), int(pair[1])


def _check_padding(padding: str) -> str:
    padding = str(padding).lower()
    if padding not in ("valid", "same"):
        raise ValueError(f"padding must be 'valid' or 'same', got {padding!r}")
    return padding


def conv_output_size(size: int, window: int, stride: int, padding: str) -> int:
    """Output positions along one axis (TF's rule)."""
    if _check_padding(padding) == "same":
        return -(-size // stride)
    return max((size - window) // stride + 1, 0)


def same_padding(size: int, window: int, stride: int) -> tuple[int, int]:
    """``(before, after)`` padding of ``"same"`` along one axis (the odd one goes after)."""
    out = -(-size // stride)
    total = max((out - 1) * stride + window - size, 0)
    return total // 2, total - total // 2


def _padded(
    x: Any, window: tuple[int, int], strides: tuple[int, int], padding: str, fill: float
) -> tuple[Any, tuple[int, int], tuple[int, int]]:
    """The padded input, the output size and the top/left padding."""
    _, h, w, _ = x.shape
    oh = conv_output_size(h, window[0], strides[0], padding)
    ow = conv_output_size(w, window[1], strides[1], padding)
    if padding == "valid":
        return x, (oh, ow), (0, 0)
    ph, pw = same_padding(h, window[0], strides[0]), same_padding(w, window[1], strides[1])
    if ph == (0, 0) and pw == (0, 0):
        return x, (oh, ow), (0, 0)
    return _pad_hw(x, ph, pw, fill), (oh, ow), (ph[0], pw[0])


def _pad_hw(x: Any, ph: tuple[int, int], pw: tuple[int, int], fill: float) -> Any:
    """``x`` padded with ``fill`` along height and width: ``np.pad``'s result.

    The border is filled, then the interior copied, into an uninitialised array: 0.32 against
    ``np.pad``'s 0.47 ms for ResNet-20's first stage at batch 32 (``(32, 32, 32, 16)`` float32),
    0.06 against 0.14 ms at ``(32, 8, 8, 64)``.
    """
    n, h, w, c = x.shape
    top, left = ph[0], pw[0]
    out = array_module(x).empty((n, h + ph[0] + ph[1], w + pw[0] + pw[1], c), x.dtype)
    out[:, :top] = fill
    out[:, top + h :] = fill
    rows = out[:, top : top + h]
    rows[:, :, :left] = fill
    rows[:, :, left + w :] = fill
    rows[:, :, left : left + w] = x
    return out


def _window_views(
    x: Any, window: tuple[int, int], strides: tuple[int, int], out: tuple[int, int]
) -> list[Any]:
    """One strided view of ``x`` per kernel position, in row-major order (no copy)."""
    sh, sw = strides
    oh, ow = out
    return [
        x[:, i : i + sh * (oh - 1) + 1 : sh, j : j + sw * (ow - 1) + 1 : sw, :]
        for i in range(window[0])
        for j in range(window[1])
    ]


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
        return xp.stack(_window_views(x, window, strides, out), axis=3).reshape(rows, width)
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
        views = _window_views(grad[start:stop], window, strides, out)
        for view, k in zip(views, transposed, strict=True):
            xp.matmul(rows, k, out=slot)
            view += slot.reshape(stop - start, out[0], out[1], c)
    return grad


def _unpad(grad: Any, shape: tuple[int, ...], top_left: tuple[int, int]) -> Any:
    top, left = top_left
    return grad[:, top : top + shape[1], left : left + shape[2], :]


def _conv_arguments(
    op: str, x: Any, kernel: Any, strides: Any, padding: str
) -> tuple[Tensor, Tensor, tuple[int, int], str]:
    """``x`` and ``kernel`` as tensors on one device, the strides and padding, all checked.

    Raises:
        ValueError: Not 4-D, channel counts that differ, a bad stride or padding.
    """
    x, kernel = same_device(as_tensor(x), as_tensor(kernel))
    padding = _check_padding(padding)
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
    padded, out_hw, top_left = _padded(x.value, window, strides, padding, 0.0)
    n, oh, ow = x.shape[0], out_hw[0], out_hw[1]
    flat_kernel = kernel.value.reshape(-1, filters)
    chunks = _image_chunks(padded, window, out_hw)
    per_image = oh * ow
    xp = array_module(padded)
    value = xp.empty((n * per_image, filters), xp.result_type(padded, flat_kernel))
    kept_cols = None
    for start, stop in chunks:
        cols = _im2col(padded[start:stop], window, strides, out_hw)
        xp.matmul(cols, flat_kernel, out=value[start * per_image : stop * per_image])
        if len(chunks) == 1:
            kept_cols = cols  # small enough to keep for the kernel gradient
    if bias is not None:
        value += bias.value
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
            return (kept_cols.T @ g2).reshape(kernel.shape)
        if on is not None:
            images = _padded(x.value, window, strides, padding, 0.0)[0]
            return grid_kernel_gradient(images, on, kernel.shape)
        grad = xp.zeros(flat_kernel.shape, g2.dtype)
        part = xp.empty(flat_kernel.shape, g2.dtype)
        for start, stop in chunks:
            images = x.value[start:stop]
            if copied:
                images = _padded(images, window, strides, padding, 0.0)[0]
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
            gx = _unpad(gpad, x.shape, top_left)
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
    padded, out_hw, top_left = _padded(x.value, window, strides, padding, 0.0)
    xp = array_module(padded)
    n, (oh, ow) = x.shape[0], out_hw
    views = _window_views(padded, window, strides, out_hw)
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
            grad_views = _window_views(gpad, window, strides, out_hw)
            for index, grad_view in enumerate(grad_views):
                i, j = divmod(index, kw)
                if m == 1:
                    grad_view += g5[..., 0] * k[i, j, :, 0]
                else:
                    grad_view += xp.einsum("nhwcm,cm->nhwc", g5, k[i, j])
            gx = _unpad(gpad, x.shape, top_left)
        if bias is None:
            return gx, gk
        return gx, gk, (sum_rows(g.reshape(-1, c * m)) if bias.trace else None)

    return record(value, inputs, backward)


def max_pool2d(x: Any, pool_size: Any = 2, strides: Any = None, padding: str = "valid") -> Tensor:
    """Max over each window of NHWC ``x`` (``tf.nn.max_pool2d``).

    The gradient goes to the first maximum of each window (row-major order), as TF's. Both
    directions work on one strided view of the input per window position (a running maximum
    forward; backward, each position takes the gradient still unclaimed where it holds the
    maximum, and what it took is subtracted from the unclaimed rest), so no window array or
    argmax is built; windows that do not overlap write their gradient views directly.

    Args:
        x: ``(batch, height, width, channels)``.
        pool_size: An int or ``(ph, pw)``.
        strides: An int or a pair; None means ``pool_size``.
        padding: ``"valid"`` or ``"same"`` (padded positions never win).

    Raises:
        ValueError: Not a 4-D input, or a bad pool size, stride or padding.
    """
    x = as_tensor(x)
    padding = _check_padding(padding)
    window = int_pair(pool_size, "pool_size")
    strides = window if strides is None else int_pair(strides, "strides")
    if x.ndim != 4:
        raise ValueError(f"max_pool2d expects a 4-D input, got shape {x.shape}")
    xp = array_module(x.value)
    fill = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    padded, out_hw, top_left = _padded(x.value, window, strides, padding, fill)
    views = _window_views(padded, window, strides, out_hw)
    value = views[0].copy()
    for view in views[1:]:
        xp.maximum(value, view, out=value)

    disjoint = strides[0] >= window[0] and strides[1] >= window[1]
    covered = strides == window and padded.shape[1:3] == (
        window[0] * out_hw[0],
        window[1] * out_hw[1],
    )

    def backward(g: Any) -> tuple[Any]:
        # Windows that tile the input write every position: no zero fill needed.
        gpad = (xp.empty if covered else xp.zeros)(padded.shape, g.dtype)
        grad_views = _window_views(gpad, window, strides, out_hw)
        rest, last = g, len(views) - 1
        for k, (view, grad_view) in enumerate(zip(views, grad_views, strict=True)):
            # ``rest`` holds the gradient of the windows whose maximum no earlier position held.
            hit = view == value
            if disjoint:
                part = xp.multiply(rest, hit, out=grad_view)
            else:
                part = rest * hit
                grad_view += part
            if k == 0 and last:
                rest = rest - part
            elif k < last:
                rest -= part
        return (_unpad(gpad, x.shape, top_left),)

    return record(value, (x,), backward)
