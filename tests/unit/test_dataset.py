"""hpcdist.data against tf.data's documented behaviour."""

import threading
import time

import numpy as np
import pytest

import hpcdist as hd
from hpcdist.data import (
    INFINITE_CARDINALITY,
    UNKNOWN_CARDINALITY,
    AutoShardPolicy,
    Dataset,
    InputContext,
    InputOptions,
)


def values(ds):
    return [np.asarray(x).tolist() for x in ds]


def test_sources():
    assert values(Dataset.range(5)) == [0, 1, 2, 3, 4]
    assert values(Dataset.range(2, 8, 3)) == [2, 5]
    assert values(Dataset.from_tensors([1, 2])) == [[1, 2]]
    ds = Dataset.from_tensor_slices((np.arange(3), np.arange(6).reshape(3, 2)))
    first = next(iter(ds))
    assert isinstance(first, tuple) and first[0] == 0 and first[1].tolist() == [0, 1]
    d = next(iter(Dataset.from_tensor_slices({"x": [1.0, 2.0], "y": [3, 4]})))
    assert set(d) == {"x", "y"} and d["y"] == 3
    with pytest.raises(ValueError, match="same first dimension"):
        Dataset.from_tensor_slices((np.arange(3), np.arange(4)))
    with pytest.raises(ValueError, match="at least one axis"):
        Dataset.from_tensor_slices(np.float32(1))


def test_batch_and_remainder():
    assert values(Dataset.range(7).batch(3)) == [[0, 1, 2], [3, 4, 5], [6]]
    assert values(Dataset.range(7).batch(3, drop_remainder=True)) == [[0, 1, 2], [3, 4, 5]]
    assert Dataset.range(7).batch(3).cardinality() == 3
    assert Dataset.range(7).batch(3, drop_remainder=True).cardinality() == 2
    x, y = next(iter(Dataset.from_tensor_slices((np.ones((5, 2)), np.arange(5))).batch(4)))
    assert x.shape == (4, 2) and y.tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="batch_size"):
        Dataset.range(3).batch(0)


def test_negative_counts_follow_tf():
    # TF 2.21: skip(-1) skips everything (cardinality 0); take(-1) keeps everything
    # (cardinality 5); repeat(-1) repeats forever. Other negative counts iterate the same way
    # (TF reports take(-2).cardinality() as -2, i.e. unknown; hpcdist reports the 5 it yields).
    for count in (-1, -2, -7):
        assert values(Dataset.range(5).skip(count)) == []
        assert Dataset.range(5).skip(count).cardinality() == 0
        assert values(Dataset.range(5).take(count)) == [0, 1, 2, 3, 4]
        assert Dataset.range(5).take(count).cardinality() == 5
        ds = Dataset.range(3).repeat(count)
        assert ds.cardinality() == INFINITE_CARDINALITY
        assert values(ds.take(7)) == [0, 1, 2, 0, 1, 2, 0]
    # TF 2.21: infinite and unknown inputs keep their cardinality under skip(-1)/take(-1).
    assert Dataset.range(3).repeat().skip(-1).cardinality() == INFINITE_CARDINALITY
    assert Dataset.range(3).repeat().take(-1).cardinality() == INFINITE_CARDINALITY
    unknown = Dataset.range(3).filter(lambda x: True)
    assert unknown.skip(-1).cardinality() == UNKNOWN_CARDINALITY
    assert values(unknown.skip(-1)) == []
    assert Dataset.range(0).repeat(-2).cardinality() == 0
    # TF 2.21 rejects a negative shard index or a non-positive number of shards.
    for num_shards, index in ((2, -1), (2, 2), (0, 0), (-1, 0)):
        with pytest.raises(ValueError, match="num_shards"):
            Dataset.range(5).shard(num_shards, index)


def test_repeat_take_skip_cardinality():
    assert values(Dataset.range(2).repeat(3)) == [0, 1, 0, 1, 0, 1]
    assert Dataset.range(2).repeat().cardinality() == INFINITE_CARDINALITY
    assert values(Dataset.range(2).repeat().take(5)) == [0, 1, 0, 1, 0]
    assert Dataset.range(2).repeat().take(5).cardinality() == 5
    assert Dataset.range(0).repeat().cardinality() == 0
    assert values(Dataset.range(0).repeat()) == []
    assert values(Dataset.range(5).skip(3)) == [3, 4]
    assert Dataset.range(5).filter(lambda x: x % 2 == 0).cardinality() == UNKNOWN_CARDINALITY
    assert values(Dataset.range(5).filter(lambda x: x % 2 == 0)) == [0, 2, 4]
    # The seeds' Keras example: from_tensors(...).repeat(100).batch(10) has 10 batches.
    ds = Dataset.from_tensors(([1.0], [1.0])).repeat(100).batch(10)
    assert ds.cardinality() == 10 and len(list(ds)) == 10


def test_shuffle_is_a_permutation_seeded_and_reshuffled():
    ds = Dataset.range(100).shuffle(10, seed=3)
    a, b = values(ds), values(ds)
    assert sorted(a) == list(range(100))
    assert a != list(range(100))
    assert a != b  # reshuffled each iteration
    assert values(Dataset.range(100).shuffle(10, seed=3)) == a  # same seed, same order
    fixed = Dataset.range(20).shuffle(20, seed=1, reshuffle_each_iteration=False)
    assert values(fixed) == values(fixed)
    # A buffer of 1 does not shuffle.
    assert values(Dataset.range(5).shuffle(1, seed=0)) == [0, 1, 2, 3, 4]


def test_unseeded_shuffle_is_reproducible_after_set_seed_and_random_without_it():
    def two_orders() -> list[list[int]]:
        hd.random.set_seed(11)
        return [values(Dataset.range(40).shuffle(40)) for _ in range(2)]

    try:
        first, again = two_orders(), two_orders()
        assert first == again  # same program order, same global seed: same shuffles
        assert first[0] != first[1]  # each shuffle draws its own operation seed
        hd.random.set_seed(11)
        assert hd.random.get_seed(None) == (11, 1942955373)  # TF's number (conformance suite)
        hd.random.set_seed(None)
        assert hd.random.get_seed(None) == (None, None)
        assert hd.random.get_seed(5) == (87654321, 5)  # TF's DEFAULT_GRAPH_SEED
        unseeded = {tuple(values(Dataset.range(40).shuffle(40))) for _ in range(3)}
        assert len(unseeded) == 3  # no global seed: a fresh order each time
    finally:
        hd.random.set_seed(None)


def test_shard():
    assert values(Dataset.range(10).shard(3, 1)) == [1, 4, 7]
    assert Dataset.range(10).shard(3, 0).cardinality() == 4
    assert Dataset.range(10).shard(3, 2).cardinality() == 3
    with pytest.raises(ValueError, match="index"):
        Dataset.range(10).shard(3, 3)


def test_map_unpacks_tuples():
    ds = Dataset.from_tensor_slices((np.arange(3), np.arange(3) * 10)).map(lambda a, b: a + b)
    assert values(ds) == [0, 11, 22]
    assert values(Dataset.range(3).map(lambda x: {"double": x * 2}))[2] == {"double": 4}


def test_prefetch_runs_ahead_on_a_thread_and_propagates_errors():
    produced = []

    def slow(x):
        produced.append((int(x), threading.current_thread().name))
        return x

    ds = Dataset.range(4).map(slow).prefetch(2)
    it = iter(ds)
    assert next(it) == 0
    time.sleep(0.2)
    assert len(produced) >= 3  # ran ahead while we slept
    assert all(name != threading.current_thread().name for _, name in produced)
    assert values(ds) == [0, 1, 2, 3]

    def boom(x):
        if x == 2:
            raise RuntimeError("bad element")
        return x

    with pytest.raises(RuntimeError, match="bad element"):
        list(Dataset.range(4).map(boom).prefetch(1))


def test_input_context_and_options():
    ctx = InputContext(num_input_pipelines=2, input_pipeline_id=1, num_replicas_in_sync=4)
    assert ctx.get_per_replica_batch_size(64) == 16
    with pytest.raises(ValueError, match="not divisible"):
        ctx.get_per_replica_batch_size(10)
    with pytest.raises(ValueError, match="input_pipeline_id"):
        InputContext(2, 2, 1)
    assert InputOptions().auto_shard_policy is AutoShardPolicy.AUTO
    assert AutoShardPolicy.OFF.value == -1
