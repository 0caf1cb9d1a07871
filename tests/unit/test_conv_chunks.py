"""conv2d on a batch whose window matrix is built in slices equals it image by image."""

import numpy as np
import pytest

import hpcdist as hd
from hpcdist.core import conv_ops, windows


def conv_and_grads(x, kernel, weights, strides, padding):
    xv, kv = hd.Variable(x), hd.Variable(kernel)
    with hd.GradientTape() as tape:
        y = conv_ops.conv2d(xv, kv, strides, padding)
        loss = hd.nn.ops.reduce_sum(y * weights)
    gx, gk = tape.gradient(loss, [xv, kv])
    return y.value, np.asarray(gx), np.asarray(gk)


@pytest.mark.parametrize(("strides", "padding"), [(1, "same"), (2, "same"), (1, "valid")])
def test_sliced_window_matrix_matches_image_by_image(strides, padding):
    rng = np.random.default_rng(0)
    # 64 images of 32x32x16 under a 3x3 kernel: a window matrix of 38 MB at stride 1 and 9 MB
    # at stride 2 (both sliced), at most 0.6 MB per image (built at once)
    n = 64
    x = rng.standard_normal((n, 32, 32, 16)).astype(np.float32)
    kernel = (0.1 * rng.standard_normal((3, 3, 16, 8))).astype(np.float32)
    oh = windows.conv_output_size(32, 3, strides, padding)
    weights = rng.standard_normal((n, oh, oh, 8)).astype(np.float32)
    y, gx, gk = conv_and_grads(x, kernel, weights, strides, padding)
    parts = [
        conv_and_grads(x[i : i + 1], kernel, weights[i : i + 1], strides, padding) for i in range(n)
    ]
    np.testing.assert_allclose(y, np.concatenate([p[0] for p in parts]), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gx, np.concatenate([p[1] for p in parts]), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gk, sum(p[2] for p in parts), rtol=1e-4, atol=1e-3)


def test_the_padded_copy_is_not_kept_for_backward():
    # 64 images of 32x32x16 ("same": a 4.5 MB padded copy) -> 2 MB of output. What the forward
    # leaves allocated (tracemalloc sees numpy's buffers) is the output, not the padded copy:
    # backward pads each slice again.
    import tracemalloc

    rng = np.random.default_rng(0)
    x = hd.Variable(rng.standard_normal((64, 32, 32, 16)).astype(np.float32))
    kernel = hd.Variable((0.1 * rng.standard_normal((3, 3, 16, 8))).astype(np.float32))
    tracemalloc.start()
    try:
        with hd.GradientTape() as tape:
            before = tracemalloc.get_traced_memory()[0]
            y = conv_ops.conv2d(x, kernel, 1, "same")
            kept = tracemalloc.get_traced_memory()[0] - before
            loss = hd.nn.ops.reduce_sum(y)
        out_bytes = y.value.nbytes
        assert out_bytes <= kept < out_bytes + (1 << 20), (kept, out_bytes)
        gx, gk = tape.gradient(loss, [x, kernel])
    finally:
        tracemalloc.stop()
    assert np.asarray(gx).shape == x.shape and np.asarray(gk).shape == kernel.shape


@pytest.mark.parametrize(("strides", "padding"), [(1, "same"), (2, "same"), (2, "valid")])
def test_the_input_gradient_taken_in_slices_is_bitwise_the_whole_batch_at_once(
    strides, padding, monkeypatch
):
    # _input_gradient takes the batch a few images at a time (cache blocking); each element
    # still adds the kernel positions in the same order, so the result is exactly the same
    rng = np.random.default_rng(1)
    x = rng.standard_normal((9, 16, 16, 8)).astype(np.float32)
    kernel = (0.1 * rng.standard_normal((3, 3, 8, 12))).astype(np.float32)
    oh = windows.conv_output_size(16, 3, strides, padding)
    weights = rng.standard_normal((9, oh, oh, 12)).astype(np.float32)
    monkeypatch.setattr(conv_ops, "GRID_CHANNELS", 0)  # the strided formulation at stride 1 too
    monkeypatch.setattr(conv_ops, "_GRAD_SLICE_BYTES", 1)  # one image per slice
    _, sliced, _ = conv_and_grads(x, kernel, weights, strides, padding)
    monkeypatch.setattr(conv_ops, "_GRAD_SLICE_BYTES", 1 << 40)  # the whole batch at once
    _, whole, _ = conv_and_grads(x, kernel, weights, strides, padding)
    assert np.array_equal(sliced, whole)
