import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcdist import CommunicationImplementation, CommunicationOptions, ReduceOp
from hpcdist.comm import fusion
from hpcdist.comm.checks import Header, mismatch_error
from hpcdist.comm.compression import get_codec, unit_roundoff


def test_tf_packing_rule():
    # TF's group_by_size: a new pack starts once the last one holds more than bytes_per_pack.
    assert fusion.group_by_size([4, 4, 4, 4], 0) == [[0, 1, 2, 3]]
    assert fusion.group_by_size([4, 4, 4, 4], 4) == [[0, 1], [2, 3]]
    assert fusion.group_by_size([4, 4, 4, 4], 7) == [[0, 1], [2, 3]]
    assert fusion.group_by_size([4, 4, 4, 4], 8) == [[0, 1, 2], [3]]
    assert fusion.group_by_size([100, 1, 1], 10) == [[0], [1, 2]]
    assert fusion.group_by_size([], 10) == []


def test_packs_never_mix_dtypes_and_keep_order():
    arrays = [np.ones(2, np.float32), np.ones(3, np.int64), np.ones(4, np.float32)]
    plan = fusion.plan_packs(arrays, 0)
    assert plan == [[0, 2], [1]]
    packed = fusion.pack([arrays[i] for i in plan[0]])
    assert packed.shape == (6,)
    parts = fusion.unpack(packed * 2, [arrays[0], arrays[2]])
    assert [p.shape for p in parts] == [(2,), (4,)]
    assert all((p == 2).all() for p in parts)


@given(st.lists(st.integers(0, 1000), max_size=50), st.integers(0, 3000))
def test_packing_covers_every_tensor_once_in_order(sizes, threshold):
    packs = fusion.group_by_size(sizes, threshold)
    assert [i for p in packs for i in p] == list(range(len(sizes)))
    for pack in packs[:-1]:
        assert threshold == 0 or sum(sizes[i] for i in pack[:-1]) <= threshold


@pytest.mark.parametrize("name", ["fp16", "bf16"])
def test_codec_round_trip_error(name):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(10000).astype(np.float32) * 100
    codec = get_codec(name)
    y = codec.decode(codec.encode(x), np.float32)
    assert np.all(np.abs(y - x) <= unit_roundoff(name) * np.abs(x) + 1e-30)


def test_bf16_rounds_to_nearest_even_and_keeps_specials():
    codec = get_codec("bf16")
    x = np.array([1.0, 1.0 + 2**-8, 1.0 + 3 * 2**-8, np.inf, -np.inf, np.nan, 3e38], np.float32)
    y = codec.decode(codec.encode(x), np.float32)
    assert y[0] == 1.0
    assert y[1] == 1.0  # tie goes to even
    assert y[2] == 1.0 + 4 * 2**-8
    assert np.isposinf(y[3]) and np.isneginf(y[4]) and np.isnan(y[5])
    assert np.isfinite(y[6])


def test_ops_and_options_parse_names():
    assert ReduceOp.parse("mean") is ReduceOp.MEAN
    assert ReduceOp.parse(" Max ") is ReduceOp.MAX
    with pytest.raises(ValueError, match="SUM, MEAN, MIN, MAX, PROD"):
        ReduceOp.parse("median")
    opts = CommunicationOptions(implementation="SHM", compression="FP16")
    assert opts.implementation is CommunicationImplementation.SHM
    assert opts.compression == "fp16"
    with pytest.raises(ValueError, match="compression"):
        CommunicationOptions(compression="int8")
    with pytest.raises(ValueError, match="bytes_per_pack"):
        CommunicationOptions(bytes_per_pack=-1)
    with pytest.raises(ValueError, match="timeout_seconds"):
        CommunicationOptions(timeout_seconds=0)
    with pytest.raises(ValueError, match="implementation"):
        CommunicationOptions(implementation="pigeon")
    merged = CommunicationOptions(bytes_per_pack=10).merge(CommunicationOptions(timeout_seconds=3))
    assert (merged.bytes_per_pack, merged.timeout_seconds) == (10, 3)


def test_header_describes_and_mismatch_groups_ranks():
    a = Header(7, 1, ReduceOp.SUM.code, ord("f"), (4, 3))
    b = Header(7, 1, ReduceOp.SUM.code, ord("f"), (4, 4))
    assert a.describe() == "allreduce #7 SUM float32[4, 3]"
    assert a.fingerprint() != b.fingerprint()
    table = np.array([a.words, b.words, a.words], dtype=np.int64)
    err = mismatch_error(table)
    assert "ranks 0,2 sent allreduce #7 SUM float32[4, 3]" in str(err)
    assert "rank 1 sent allreduce #7 SUM float32[4, 4]" in str(err)
    long = Header(1, 1, 1, ord("d"), (1,) * 9)
    assert len(long.words) == len(a.words)
