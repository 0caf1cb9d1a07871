"""Tensor fusion on one node: chunks of the tensors gathered into the segment, and its plan."""

from __future__ import annotations

import numpy as np
import pytest

from hpcdist.comm import fusion
from hpcdist.comm.shm_backend import _Members


@pytest.mark.parametrize("chunk", [1, 3, 7, 64, 1000, 10_000])
def test_chunks_in_any_order_reproduce_the_concatenation(chunk: int) -> None:
    rng = np.random.default_rng(0)
    members = [rng.standard_normal(int(n)).astype(np.float32) for n in rng.integers(0, 300, 40)]
    members[0] = np.zeros(0, np.float32)
    members[5] = rng.standard_normal((6, 7)).astype(np.float32)
    members[9] = rng.standard_normal(50).astype(np.float32)[::3]  # strided
    members[-1] = np.zeros((0, 4), np.float32)
    want = np.concatenate([m.reshape(-1) for m in members])
    gather = _Members(members)
    got = np.full(want.size, np.nan, np.float32)
    starts = list(range(0, want.size, chunk))
    for lo in starts[1::2] + starts[::2]:  # odd chunks first: access is random
        hi = min(want.size, lo + chunk)
        gather.copy(got[lo:hi], lo, hi)
    np.testing.assert_array_equal(got, want)


def test_pieces_are_views_of_the_members_and_cover_the_range() -> None:
    members = [np.arange(5.0), np.arange(3.0).reshape(3, 1), np.arange(0.0), np.arange(4.0)]
    before = [m.copy() for m in members]
    gather = _Members(members)
    pieces = list(gather.pieces(3, 10))
    assert [(p.tolist(), at) for p, at in pieces] == [
        ([3.0, 4.0], 3),
        ([0.0, 1.0, 2.0], 5),
        ([0.0, 1.0], 8),
    ]
    assert np.shares_memory(pieces[0][0], members[0]) and pieces[2][0].base is members[3]
    assert list(gather.pieces(12, 12)) == []
    out = np.empty(12)
    gather.copy(out, 0, 12)
    assert out.tolist() == [0, 1, 2, 3, 4, 0, 1, 2, 0, 1, 2, 3]
    for m, b in zip(members, before, strict=True):
        np.testing.assert_array_equal(m, b)


def test_whole_keeps_a_dtype_in_one_pack_and_the_others_follow_tfs_rule() -> None:
    arrays = [np.ones(100, np.float32), np.ones(100, bool), np.ones(100, np.float32)]
    arrays += [np.ones(100, bool), np.ones(300, np.float32)]
    seen = []

    def whole(dtype: np.dtype, nbytes: int) -> bool:
        seen.append((dtype, nbytes))
        return dtype == np.float32

    assert fusion.plan_packs(arrays, 500, whole) == [[0, 2, 4], [1, 3]]
    assert seen == [(np.dtype(np.float32), 2000), (np.dtype(bool), 200)]
    assert fusion.plan_packs(arrays, 500) == [[0, 2], [4], [1, 3]]
