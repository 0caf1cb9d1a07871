"""Differentiable 2-D convolution and max pooling on `Tensor` (NHWC, TF's padding rules).

Both operations gather the input's windows with one strided slice per kernel position (numpy
or CuPy alike), so the convolution is one matrix product and its backward pass two. Padding
``"same"`` follows TF: the output has ``ceil(size / stride)`` positions and the extra padding
goes after (bottom/right) when the total is odd.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hpcdist.core.autodiff import record
from hpcdist.core.math_ops import same_device
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
    xp = array_module(x)
    out = xp.pad(x, ((0, 0), ph, pw, (0, 0)), constant_values=fill)
    return out, (oh, ow), (ph[0], pw[0])


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


def _windows(
    x: Any, window: tuple[int, int], strides: tuple[int, int], out: tuple[int, int]
) -> Any:
    """``(batch, oh, ow, kh * kw, channels)``: every window's values, kernel positions in order."""
    return array_module(x).stack(_window_views(x, window, strides, out), axis=3)


def _scatter_windows(
    cols: Any,
    padded_shape: tuple[int, ...],
    window: tuple[int, int],
    strides: tuple[int, int],
    out: tuple[int, int],
) -> Any:
    """The adjoint of `_windows`: add each window's values back where they were read."""
    grad = array_module(cols).zeros(padded_shape, cols.dtype)
    for k, view in enumerate(_window_views(grad, window, strides, out)):
        view += cols[:, :, :, k, :]
    return grad


def _unpad(grad: Any, shape: tuple[int, ...], top_left: tuple[int, int]) -> Any:
    top, left = top_left
    return grad[:, top : top + shape[1], left : left + shape[2], :]


def conv2d(x: Any, kernel: Any, strides: Any = 1, padding: str = "valid") -> Tensor:
    """2-D cross-correlation of NHWC ``x`` with an HWIO ``kernel`` (``tf.nn.conv2d``).

    Args:
        x: ``(batch, height, width, in_channels)``.
        kernel: ``(kh, kw, in_channels, filters)``.
        strides: An int or ``(sh, sw)``.
        padding: ``"valid"`` or ``"same"``.

    Raises:
        ValueError: Ranks or channel counts that do not fit, or a bad stride or padding.
    """
    x, kernel = same_device(as_tensor(x), as_tensor(kernel))
    padding = _check_padding(padding)
    strides = int_pair(strides, "strides")
    if x.ndim != 4 or kernel.ndim != 4:
        raise ValueError(
            f"conv2d expects a 4-D input and a 4-D kernel, got shapes {x.shape} and {kernel.shape}"
        )
    if x.shape[3] != kernel.shape[2]:
        raise ValueError(
            f"conv2d: the input has {x.shape[3]} channels, the kernel expects {kernel.shape[2]}"
        )
    window = (kernel.shape[0], kernel.shape[1])
    padded, out_hw, top_left = _padded(x.value, window, strides, padding, 0.0)
    cols = _windows(padded, window, strides, out_hw)
    n, oh, ow = x.shape[0], out_hw[0], out_hw[1]
    flat_cols = cols.reshape(n * oh * ow, window[0] * window[1] * x.shape[3])
    flat_kernel = kernel.value.reshape(-1, kernel.shape[3])
    value = (flat_cols @ flat_kernel).reshape(n, oh, ow, kernel.shape[3])

    def backward(g: Any) -> tuple[Any, Any]:
        g2 = g.reshape(n * oh * ow, kernel.shape[3])
        gk = (flat_cols.T @ g2).reshape(kernel.shape) if kernel.trace else None
        gx = None
        if x.trace:
            gcols = (g2 @ flat_kernel.T).reshape(cols.shape)
            gpad = _scatter_windows(gcols, padded.shape, window, strides, out_hw)
            gx = _unpad(gpad, x.shape, top_left)
        return gx, gk

    return record(value, (x, kernel), backward)


def max_pool2d(x: Any, pool_size: Any = 2, strides: Any = None, padding: str = "valid") -> Tensor:
    """Max over each window of NHWC ``x`` (``tf.nn.max_pool2d``).

    The gradient goes to the first maximum of each window (row-major order), as TF's. Both
    directions work on one strided view of the input per window position (a running maximum
    forward; backward, each position takes the gradient where it holds the maximum and no
    earlier position did), so no window array is built.

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

    def backward(g: Any) -> tuple[Any]:
        gpad = xp.zeros(padded.shape, g.dtype)
        grad_views = _window_views(gpad, window, strides, out_hw)
        taken = xp.zeros(value.shape, bool)
        last = len(views) - 1
        for k, (view, grad_view) in enumerate(zip(views, grad_views, strict=True)):
            hit = view == value
            if k:
                hit &= ~taken
            if k < last:
                taken |= hit
            grad_view += xp.where(hit, g, 0)
        return (_unpad(gpad, x.shape, top_left),)

    return record(value, (x,), backward)
