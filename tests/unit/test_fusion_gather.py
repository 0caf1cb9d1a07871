"""Tensor fusion on one node: chunks of the tensors gathered into the segment, and its plan."""

from __future__ import annotations

import numpy as np
import pytest

import hpcdist as hd
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


@pytest.mark.parametrize("chunk", [1, 7, 1000])
def test_scatter_writes_each_range_back_into_the_members(chunk: int) -> None:
    rng = np.random.default_rng(1)
    members = [np.zeros(int(n), np.float64) for n in rng.integers(0, 200, 30)]
    members[4] = np.zeros((5, 6))
    gather = _Members(members)
    total = gather.starts[-1]
    src = np.arange(total, dtype=np.float64)
    starts = list(range(0, total, chunk))
    for lo in starts[::-1]:
        gather.scatter(src[lo : min(total, lo + chunk)], lo, min(total, lo + chunk))
    np.testing.assert_array_equal(np.concatenate([m.reshape(-1) for m in members]), src)
    assert members[4].shape == (5, 6) and members[4][1, 0] == gather.starts[4] + 6


def test_grouped_allreduce_in_place_on_one_rank() -> None:
    comm = hd.comm.world()
    if comm.size != 1:
        pytest.skip("one-rank semantics")
    xs = [np.arange(6.0).reshape(2, 3), np.arange(4, dtype=np.int32)[::2], np.ones(0)]
    want = [x.copy() for x in xs]
    got = comm.grouped_allreduce_(xs, "mean")
    assert all(g is x for g, x in zip(got, xs, strict=True))
    for x, w in zip(xs, want, strict=True):
        np.testing.assert_array_equal(x, w)
    frozen = np.ones(3)
    frozen.flags.writeable = False
    with pytest.raises(TypeError, match=r"writeable numpy .* array 1 is read-only"):
        comm.grouped_allreduce_([np.ones(2), frozen])
    buf = np.ones(10)
    with pytest.raises(ValueError, match="arrays 0 and 2 overlap"):
        comm.grouped_allreduce_([buf[:5], np.ones(3), buf[4:]])
