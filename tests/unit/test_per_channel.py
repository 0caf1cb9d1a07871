"""`per_channel`: a per-channel vector against (rows, channels) arrays, as numpy broadcasts it."""

import numpy as np
import pytest

from hpcdist.core.per_channel import LONG_ROW, per_channel


@pytest.mark.parametrize(
    ("rows", "channels"),
    [(32768, 16), (8192, 32), (2048, 64), (1000, 3), (997, 16), (1, 8), (0, 4), (6, 5000)],
)
@pytest.mark.parametrize("ufunc", [np.add, np.subtract, np.multiply, np.maximum])
def test_results_are_the_broadcast_ones_bit_for_bit(rows, channels, ufunc):
    rng = np.random.default_rng(rows + channels)
    a = rng.standard_normal((rows, channels)).astype(np.float32)
    v = rng.standard_normal(channels).astype(np.float32)
    want = ufunc(a, v)
    got = per_channel(ufunc, a, v)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    in_place = a.copy()
    assert per_channel(ufunc, in_place, v, out=in_place) is in_place
    np.testing.assert_array_equal(in_place, want)


def test_mixed_dtypes_promote_as_numpy_does():
    a = np.arange(4096 * 8, dtype=np.float32).reshape(4096, 8)
    v = np.linspace(0.1, 0.8, 8)  # float64
    got = per_channel(np.multiply, a, v)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, a * v)


def test_strided_arrays_and_outputs_are_left_to_the_ufunc():
    base = np.random.default_rng(0).standard_normal((4096, 32)).astype(np.float32)
    a, v = base[:, :16], np.ones(16, np.float32)
    np.testing.assert_array_equal(per_channel(np.add, a, v), a + v)
    out = np.zeros((4096, 32), np.float32)[:, 16:]
    per_channel(np.add, base[:, 16:], v, out=out)
    np.testing.assert_array_equal(out, base[:, 16:] + v)
    contiguous = np.ascontiguousarray(base[:, 16:])  # into a strided output: written, not lost
    out[...] = 0
    assert per_channel(np.add, contiguous, v, out=out) is out
    np.testing.assert_array_equal(out, contiguous + v)


def test_an_array_that_is_not_two_dimensional_is_named():
    with pytest.raises(ValueError, match=r"\(rows, channels\) array, got shape \(2, 3, 4\)"):
        per_channel(np.add, np.zeros((2, 3, 4)), np.zeros(4))


def test_long_rows_split_the_array_by_a_divisor_of_its_rows():
    """A (32768, 16) array is worked as rows of LONG_ROW elements: 32 of them."""
    a = np.ones((32768, 16), np.float32)
    calls = []

    def recording(x, y, out=None):
        calls.append((x.shape, y.shape))
        return np.add(x, y, out=out)

    per_channel(recording, a, np.ones(16, np.float32))
    assert calls == [((32768 * 16 // LONG_ROW, LONG_ROW), (LONG_ROW,))]
    calls.clear()
    per_channel(recording, np.ones((997, 16), np.float32), np.ones(16, np.float32))
    assert calls[-1] == ((1, 997 * 16), (997 * 16,))  # 997 rows: one row of them all
    per_channel(recording, np.ones((1031, 16), np.float32), np.ones(16, np.float32))
    assert calls[-1] == ((1031, 16), (16,))  # a prime above LONG_ROW / 16: as it is
