"""A stride-1 convolution's gradients on the padded grid equal the strided formulation's."""

import numpy as np
import pytest

from hpcdist.core import conv_grid, conv_ops, windows
from tests.unit.test_conv_chunks import conv_and_grads


def case(rng, n, h, w, c, kh, kw, filters, padding, dtype):
    x = rng.standard_normal((n, h, w, c)).astype(dtype)
    kernel = (0.1 * rng.standard_normal((kh, kw, c, filters))).astype(dtype)
    oh = windows.conv_output_size(h, kh, 1, padding)
    ow = windows.conv_output_size(w, kw, 1, padding)
    weights = rng.standard_normal((n, oh, ow, filters)).astype(dtype)
    return x, kernel, weights


SHAPES = [
    # n, h, w, c, kh, kw, filters, padding
    (3, 9, 7, 4, 3, 3, 5, "same"),
    (3, 9, 7, 4, 3, 3, 5, "valid"),
    (2, 6, 6, 16, 1, 1, 16, "same"),
    (2, 8, 5, 3, 5, 3, 7, "same"),  # odd, uneven padding, a non-square kernel
    (4, 7, 9, 2, 2, 4, 3, "same"),  # even kernel sizes: the extra padding goes after
    (2, 5, 5, 1, 5, 5, 2, "valid"),  # one output position
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_grid_gradients_equal_the_strided_ones(shape, dtype, monkeypatch):
    rng = np.random.default_rng(sum(map(hash, map(str, shape))) % 1000)
    args = case(rng, *shape, dtype)
    # window matrices neither kept nor built at once: the kernel gradient on the grid too
    monkeypatch.setattr(conv_ops, "_KEEP_BYTES", 0)
    monkeypatch.setattr(conv_ops, "_CHUNK_BYTES", 1)
    monkeypatch.setattr(conv_ops, "GRID_CHANNELS", 0)
    y0, gx0, gk0 = conv_and_grads(*args, 1, shape[-1])
    monkeypatch.setattr(conv_ops, "GRID_CHANNELS", 16)
    calls = []
    for name in ("grid_input_gradient", "grid_kernel_gradient"):
        real = getattr(conv_ops, name)
        monkeypatch.setattr(
            conv_ops, name, lambda *a, _real=real, _n=name: calls.append(_n) or _real(*a)
        )
    y1, gx1, gk1 = conv_and_grads(*args, 1, shape[-1])
    assert sorted(calls) == ["grid_input_gradient", "grid_kernel_gradient"]
    assert np.array_equal(y0, y1)
    # the same products added in the same order (BLAS may round a product over another number
    # of rows differently: bitwise equal at ResNet-20's shapes, not at every shape)
    tol = 1e-6 if dtype == np.float32 else 1e-14
    np.testing.assert_allclose(gx1, gx0, rtol=tol, atol=tol)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(gk1, gk0, rtol=tol, atol=tol)


def test_grid_gradients_match_central_differences(monkeypatch):
    monkeypatch.setattr(conv_ops, "_KEEP_BYTES", 0)
    monkeypatch.setattr(conv_ops, "_CHUNK_BYTES", 1)
    rng = np.random.default_rng(3)
    x, kernel, weights = case(rng, 2, 5, 4, 3, 3, 2, 2, "same", np.float64)
    _, gx, gk = conv_and_grads(x, kernel, weights, 1, "same")

    def loss(xa, ka):
        return float(np.sum(conv_ops.conv2d(xa, ka, 1, "same").value * weights))

    eps = 1e-6
    for array, grad, other in ((x, gx, kernel), (kernel, gk, x)):
        numeric = np.zeros_like(array)
        for index in np.ndindex(array.shape):
            up, down = array.copy(), array.copy()
            up[index] += eps
            down[index] -= eps
            pair = (up, other) if array is x else (other, up)
            low = (down, other) if array is x else (other, down)
            numeric[index] = (loss(*pair) - loss(*low)) / (2 * eps)
        np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-8)


def test_the_grid_input_gradient_in_slices_is_bitwise_the_whole_batch(monkeypatch):
    rng = np.random.default_rng(4)
    x, kernel, weights = case(rng, 7, 10, 10, 8, 3, 3, 12, "same", np.float32)
    monkeypatch.setattr(conv_grid, "_SLICE_BYTES", 1)  # one image per slice
    _, sliced, _ = conv_and_grads(x, kernel, weights, 1, "same")
    monkeypatch.setattr(conv_grid, "_SLICE_BYTES", 1 << 40)
    _, whole, _ = conv_and_grads(x, kernel, weights, 1, "same")
    assert np.array_equal(sliced, whole)


@pytest.mark.parametrize(
    ("c", "filters", "strides"), [(17, 8, 1), (8, 32, 1), (8, 8, 2), (8, 8, (1, 2))]
)
def test_the_grid_is_used_only_at_stride_1_with_few_channels(c, filters, strides, monkeypatch):
    def refuse(*args):
        raise AssertionError("the grid was used")

    monkeypatch.setattr(conv_ops, "grid_input_gradient", refuse)
    monkeypatch.setattr(conv_ops, "grid_kernel_gradient", refuse)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 8, 8, c)).astype(np.float32)
    kernel = rng.standard_normal((3, 3, c, filters)).astype(np.float32)
    oh, ow = (windows.conv_output_size(8, 3, s, "same") for s in windows.int_pair(strides, "s"))
    weights = np.ones((2, oh, ow, filters), np.float32)
    _, gx, gk = conv_and_grads(x, kernel, weights, strides, "same")
    assert gx.shape == x.shape and gk.shape == kernel.shape
