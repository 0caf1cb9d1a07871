"""Partitioners: ports of TF's sharded_variable_test partitioner tests, plus validation."""

import numpy as np
import pytest

import hpcdist as hd
from hpcdist.strategies.ps.partitioners import validate_partitions

P = hd.partitioners


def test_fixed_shards_partitioner():
    assert P.FixedShardsPartitioner(num_shards=2)((10, 3), np.float32) == [2, 1]
    assert P.FixedShardsPartitioner(num_shards=4)((3, 5), np.float32) == [3, 1]


def test_min_size_partitioner():
    assert P.MinSizePartitioner(min_shard_bytes=4, max_shards=2)((6, 1), np.float32) == [2, 1]
    assert P.MinSizePartitioner(min_shard_bytes=4, max_shards=10)((6, 1), np.float32) == [6, 1]
    # 256 KiB default: a 1 MiB float32 table is at most 4 shards, capped by max_shards=1.
    assert P.MinSizePartitioner()((1024, 256), np.float32) == [1, 1]
    assert P.MinSizePartitioner(max_shards=8)((1024, 256), np.float32) == [4, 1]


def test_max_size_partitioner():
    assert P.MaxSizePartitioner(max_shard_bytes=4)((6, 1), np.float32) == [6, 1]
    assert P.MaxSizePartitioner(max_shard_bytes=4, max_shards=2)((6, 1), np.float32) == [2, 1]
    assert P.MaxSizePartitioner(max_shard_bytes=1024)((6, 1), np.float32) == [1, 1]
    assert P.MaxSizePartitioner(max_shard_bytes=8)((6, 3), np.float64) == [6, 1]


@pytest.mark.parametrize(
    "make",
    [
        lambda: P.FixedShardsPartitioner(0),
        lambda: P.MinSizePartitioner(min_shard_bytes=0),
        lambda: P.MinSizePartitioner(max_shards=0),
        lambda: P.MaxSizePartitioner(max_shard_bytes=0),
        lambda: P.MaxSizePartitioner(max_shard_bytes=4, max_shards=0),
    ],
)
def test_bad_arguments(make):
    with pytest.raises(ValueError, match="positive"):
        make()


def test_axis_out_of_range():
    with pytest.raises(ValueError, match="axis 1"):
        P.FixedShardsPartitioner(2)((10,), np.float32, axis=1)


def test_validate_accepts_first_axis_splits():
    assert validate_partitions([3, 1], (10, 4), "v") == 3
    assert validate_partitions((1,), (5,), "v") == 1
    assert validate_partitions(np.array([2, 1, 1]), (4, 2, 2), "v") == 2


@pytest.mark.parametrize(
    "answer", [[2, 2], [0, 1], [-1, 1], [1], [1, 1, 1], "ab", None, [2.5, 1], [11, 1], []]
)
def test_validate_rejects_nonsense(answer):
    with pytest.raises(ValueError, match="partitioner"):
        validate_partitions(answer, (10, 4), "table")


def test_string_elements_count_bytes_per_string():
    assert P.MinSizePartitioner(64, max_shards=10, bytes_per_string=8)((20,), object) == [3]
    assert P.MaxSizePartitioner(32, bytes_per_string=8)((20,), np.str_) == [5]
    assert P.MaxSizePartitioner(32)((20,), object) == [10]  # 16 bytes per string by default
