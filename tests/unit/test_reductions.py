"""`hpcdist.core.reductions`: row and column sums equal numpy's (BLAS where it applies), and the
last-axis maximum is numpy's bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest

from hpcdist.core import reductions
from hpcdist.core.autodiff import unbroadcast
from hpcdist.core.reductions import sum_columns, sum_rows, sum_rows_of_product


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32, np.int64])
@pytest.mark.parametrize("shape", [(1, 1), (7, 3), (4096, 16), (0, 5), (5, 0)])
@pytest.mark.parametrize(("fn", "axis"), [(sum_rows, 0), (sum_columns, 1)], ids=["rows", "columns"])
def test_sums_equal_numpy_sums_over_their_axis(dtype, shape, fn, axis):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(shape) * 4 + 2).astype(dtype)
    got = fn(x)
    want = x.astype(np.float64).sum(axis=axis)
    assert got.shape == (shape[1 - axis],) and got.dtype == x.sum(axis=axis).dtype
    rtol = {np.float16: 1e-2, np.float32: 1e-5}.get(dtype, 1e-12)
    np.testing.assert_allclose(
        got, want, rtol=rtol, atol=rtol * np.abs(x).sum(axis=axis).max(initial=0)
    )


def test_sum_rows_is_more_accurate_than_a_row_by_row_float32_sum():
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((131072, 16)) * 2 + 3).astype(np.float32)
    exact = x.astype(np.float64).sum(axis=0)
    blas = np.abs(sum_rows(x) - exact).max()
    assert blas <= np.abs(x.sum(axis=0) - exact).max()
    assert blas / np.abs(exact).max() < 1e-5


def test_sum_rows_of_views_and_products():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((64, 10)).astype(np.float32)
    y = rng.standard_normal((64, 10)).astype(np.float32)
    np.testing.assert_allclose(sum_rows(x[::2]), x[::2].sum(axis=0), rtol=1e-5)
    np.testing.assert_allclose(sum_rows(x.T.copy().T), x.sum(axis=0), rtol=1e-5)
    np.testing.assert_allclose(sum_columns(x[:, ::3]), x[:, ::3].sum(axis=1), rtol=1e-5)
    np.testing.assert_allclose(sum_rows_of_product(x, y), (x * y).sum(axis=0), rtol=1e-4, atol=1e-5)
    # the cached ones vector is read-only: a result never aliases it
    out = sum_rows(x)
    out += 1
    np.testing.assert_allclose(sum_rows(x), out - 1, rtol=1e-5)


def test_unbroadcast_over_leading_axes_and_inner_axes():
    rng = np.random.default_rng(4)
    g = rng.standard_normal((3, 5, 4, 6)).astype(np.float32)
    np.testing.assert_allclose(unbroadcast(g, (6,)), g.sum(axis=(0, 1, 2)), rtol=1e-5)
    np.testing.assert_allclose(unbroadcast(g, (4, 6)), g.sum(axis=(0, 1)), rtol=1e-5)
    np.testing.assert_allclose(
        unbroadcast(g, (5, 1, 6)), g.sum(axis=(0, 2), keepdims=True)[0], rtol=1e-5
    )
    np.testing.assert_allclose(
        unbroadcast(g, (1, 1)), g.sum(axis=(0, 1, 2)).sum(keepdims=True)[None], rtol=1e-5
    )
    assert unbroadcast(np.zeros((0, 6), np.float32), (6,)).shape == (6,)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32])
@pytest.mark.parametrize(
    "shape", [(5, 2), (3, 3), (4, 7), (2, 16), (6, 17), (1, 64), (3, 65), (2, 3, 1)]
)
def test_max_last_axis_is_numpys_max_bit_for_bit(shape, dtype):
    """Folded halves give ``max(axis=-1, keepdims=True)``: odd lengths, NaN and -inf included."""
    rng = np.random.default_rng(sum(shape))
    x = (rng.standard_normal(shape) * 10).astype(dtype)
    if np.dtype(dtype).kind == "f":
        x[..., 0] = -np.inf
        x.reshape(-1)[-1] = np.nan
    got = reductions.max_last_axis(x)
    expected = x.max(axis=-1, keepdims=True)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(reductions.max_last_axis(x.T.copy().T), expected)


def test_max_last_axis_raises_as_max_on_an_empty_axis():
    with pytest.raises(ValueError):
        reductions.max_last_axis(np.zeros((3, 0)))
