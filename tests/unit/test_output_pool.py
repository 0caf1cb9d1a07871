"""`OutputPool`: large out-of-place outputs are reused only once nothing else refers to them."""

from __future__ import annotations

import numpy as np

from hpcdist.comm.outputs import MIN_POOLED_BYTES, OutputPool


def test_a_dropped_output_is_reused_a_held_one_never() -> None:
    pool = OutputPool()
    like = np.ones(MIN_POOLED_BYTES // 4, np.float32)
    first = pool.take(like.size, like.dtype)
    first_id = id(first)
    held = pool.take(like.size, like.dtype)
    assert held is not first  # both are in use
    del first
    again = pool.take(like.size, like.dtype)
    assert id(again) == first_id  # dropped, so handed out again
    view = again[:3]
    del again
    assert id(pool.take(like.size, like.dtype)) != first_id  # a live view keeps it in use
    del view
    buffer = memoryview(held)
    held_id = id(held)
    del held
    assert id(pool.take(like.size, like.dtype)) != held_id  # an exported buffer keeps it in use
    del buffer


def test_small_outputs_are_not_pooled_and_the_pool_is_bounded() -> None:
    pool = OutputPool(max_bytes=3 * MIN_POOLED_BYTES, max_arrays=8)
    small = np.ones(16, np.float64)
    assert pool.take(small.size, small.dtype) is not pool.take(small.size, small.dtype)
    like = np.ones(MIN_POOLED_BYTES // 8, np.float64)
    kept = [pool.take(like.size, like.dtype) for _ in range(5)]  # all in use: five arrays made
    assert len({id(a) for a in kept}) == 5
    assert pool._bytes <= 3 * MIN_POOLED_BYTES  # the oldest were let go
    other = pool.take(MIN_POOLED_BYTES // 4, np.float32)
    assert other.dtype == np.float32 and other.size == MIN_POOLED_BYTES // 4
