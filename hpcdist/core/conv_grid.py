"""A stride-1 convolution's gradients on the padded input's grid (numpy).

With few channels (ResNet-20's first stage: 16 in, 16 out, 32x32) the window gathers and the
strided adds of `hpcdist.core.conv_ops` cost more than the products. On the **grid** the output
gradient is placed at the top left of an array shaped like the padded input, and everything is
flattened to ``(positions, channels)``: output position ``q`` reads padded-input position
``q + i * padded_width + j`` through kernel position ``(i, j)``. Each kernel position is then one
product over contiguous rows and one contiguous add, with no window array and no strided view;
the grid's extra rows hold zeros and contribute nothing.

Timed alone against the strided formulation, float32, one thread, 7 interleaved rounds: the
input gradient 0.71x at ``(32, 32, 32, 16)`` and 0.78x at ``(128, 32, 32, 16)`` (each element
adds the same products in the same order: bitwise the same there), the kernel gradient 0.82x
and 0.66x; with 32 or more channels the kernel gradient is slower (1.3-1.7x) and the input
gradient gains little or loses (0.92x at 32 channels, 1.12x at 64), so `conv2d` uses the grid up
to `GRID_CHANNELS` channels only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["GRID_CHANNELS", "grid_input_gradient", "grid_kernel_gradient", "on_grid"]

#: A stride-1 convolution with at most this many input and output channels takes its
#: gradients on the grid.
GRID_CHANNELS = 16

#: Bytes of a slice of the batch's product in `grid_input_gradient` (kept in cache across the
#: kernel positions).
_SLICE_BYTES = 256 << 10


def on_grid(g: Any, padded_shape: tuple[int, ...]) -> Any:
    """``(n, oh, ow, F)`` ``g`` at the top left of a zero ``(n, hp, wp, F)`` grid, flattened."""
    n, hp, wp, _ = padded_shape
    _, oh, ow, filters = g.shape
    grid = np.zeros((n, hp, wp, filters), g.dtype)
    grid[:, :oh, :ow] = g
    return grid.reshape(-1, filters)


def grid_input_gradient(grid: Any, kernel: Any, padded_shape: tuple[int, ...]) -> Any:
    """The gradient of the padded input, ``padded_shape``, from the gridded output gradient.

    A few images at a time (`_SLICE_BYTES` of product), kernel positions in row-major order:
    ``grid[rows] @ kernel[i, j].T`` added at the rows shifted by ``i * wp + j``.
    """
    n, hp, wp, c = padded_shape
    kh, kw, _, filters = kernel.shape
    total, per_image = grid.shape[0], hp * wp
    grad = np.zeros((total, c), grid.dtype)
    step = max(1, _SLICE_BYTES // max(per_image * max(c, filters) * grid.itemsize, 1))
    part = np.empty((min(step, n) * per_image, c), grid.dtype)
    transposed = [kernel[i, j].T for i in range(kh) for j in range(kw)]
    for start in range(0, n, step):
        first, last = start * per_image, min(n, start + step) * per_image
        rows, slot = grid[first:last], part[: last - first]
        for index, k in enumerate(transposed):
            shift = (index // kw) * wp + index % kw
            np.matmul(rows, k, out=slot)
            stop = min(last + shift, total)  # past the end: products of the grid's zero rows
            grad[first + shift : stop] += slot[: stop - first - shift]
    return grad.reshape(padded_shape)


def grid_kernel_gradient(padded: Any, grid: Any, kernel_shape: tuple[int, ...]) -> Any:
    """The kernel's gradient: per position ``(i, j)``, shifted input rows ``.T @ grid``."""
    kh, kw, c, _ = kernel_shape
    rows = padded.reshape(-1, c)
    total, wp = rows.shape[0], padded.shape[2]
    grad = np.empty(kernel_shape, grid.dtype)
    for i in range(kh):
        for j in range(kw):
            shift = i * wp + j
            np.matmul(rows[shift:].T, grid[: total - shift], out=grad[i, j])
    return grad
