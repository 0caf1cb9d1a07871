"""``hd.data.Options`` / ``Dataset.with_options`` and ``Dataset.cache`` (TF's rules).

Expected behaviour is TensorFlow 2.21's, observed with the same calls on ``tf.data``.
"""

from __future__ import annotations

import numpy as np
import pytest

import hpcdist as hd
from hpcdist.data import AutoShardPolicy, Dataset, Options, auto_shard_policy_of


def test_options_fields_and_checks_follow_tf():
    options = Options()
    # TF: options.experimental_distribute.auto_shard_policy == AUTO (0) by default
    assert options.experimental_distribute.auto_shard_policy is AutoShardPolicy.AUTO
    assert options.deterministic is None and options.threading.private_threadpool_size is None
    assert Options() == Options()  # TF: True
    with pytest.raises(AttributeError, match=r"Cannot set the property bogus on Options\."):
        options.bogus = 1
    with pytest.raises(TypeError, match='"auto_shard_policy" must be of type'):
        options.experimental_distribute.auto_shard_policy = 5
    options.experimental_optimization.map_parallelization = True  # recorded
    options.threading.private_threadpool_size = 4
    assert options.experimental_threading.private_threadpool_size == 4
    assert hd.data.AUTOTUNE == -1  # tf.data.AUTOTUNE


def test_with_options_is_carried_through_transformations():
    options = Options()
    options.experimental_distribute.auto_shard_policy = AutoShardPolicy.DATA
    ds = Dataset.range(6).with_options(options)
    # TF: 2 (DATA) on the dataset and after batch(2).map(...)
    derived = ds.batch(2).map(lambda b: b * 2).shuffle(4, seed=1).repeat(2).take(3).prefetch(1)
    assert derived.options().experimental_distribute.auto_shard_policy is AutoShardPolicy.DATA
    assert auto_shard_policy_of(derived) is AutoShardPolicy.DATA
    assert list(ds) == list(range(6))  # the elements are unchanged
    assert Dataset.range(3).options() == Options()  # TF: True
    assert auto_shard_policy_of([np.zeros(2)]) is AutoShardPolicy.AUTO  # not a dataset


def test_a_later_with_options_takes_precedence():
    first = Options()
    first.experimental_distribute.auto_shard_policy = AutoShardPolicy.DATA
    second = Options()
    second.experimental_distribute.auto_shard_policy = AutoShardPolicy.OFF
    second.deterministic = False
    ds = Dataset.range(6).with_options(first)
    merged = ds.with_options(second)
    # TF: OFF (-1), deterministic False; the first dataset keeps DATA and deterministic None
    assert merged.options().experimental_distribute.auto_shard_policy is AutoShardPolicy.OFF
    assert merged.options().deterministic is False and ds.options().deterministic is None
    untouched = Options()
    untouched.threading.private_threadpool_size = 2
    kept = merged.with_options(untouched).options()
    assert kept.experimental_distribute.auto_shard_policy is AutoShardPolicy.OFF
    assert kept.threading.private_threadpool_size == 2
    with pytest.raises(TypeError, match=r"with_options needs hd\.data\.Options, got InputOptions"):
        ds.with_options(hd.data.InputOptions())


def test_cache_reads_the_source_once():
    reads = []

    def count(x):
        reads.append(int(x))
        return x

    ds = Dataset.range(3).map(count).cache()
    assert [int(x) for x in ds] == [0, 1, 2]  # TF: [0, 1, 2], cardinality 3
    assert ds.cardinality() == 3
    assert [int(x) for x in ds] == [0, 1, 2]
    assert reads == [0, 1, 2]  # the second pass came from the cache


def test_an_unfinished_pass_caches_nothing():
    reads = []
    ds = Dataset.range(4).map(lambda x: reads.append(int(x)) or x).cache()
    assert [int(x) for x in ds.take(2)] == [0, 1]
    assert [int(x) for x in ds] == [0, 1, 2, 3]
    assert [int(x) for x in ds] == [0, 1, 2, 3]
    assert reads == [0, 1, 0, 1, 2, 3]


def test_cache_then_shuffle_reshuffles_each_epoch():
    ds = Dataset.from_tensor_slices(np.arange(20)).cache().shuffle(20, seed=3)
    first, second = [int(x) for x in ds], [int(x) for x in ds]
    assert sorted(first) == sorted(second) == list(range(20)) and first != second


def test_the_policy_a_dataset_carries_reaches_distribution():
    strategy = hd.MultiWorkerMirroredStrategy()
    x = np.arange(16, dtype=np.float32).reshape(8, 2)
    dataset = hd.data.Dataset.from_tensor_slices(x).batch(4)
    options = hd.data.Options()
    options.experimental_distribute.auto_shard_policy = hd.data.AutoShardPolicy.OFF
    off = strategy.experimental_distribute_dataset(dataset.with_options(options))
    assert off._shard_across_workers is False
    assert strategy.experimental_distribute_dataset(dataset)._shard_across_workers is True
    # explicit InputOptions still win, as in TF
    forced = strategy.experimental_distribute_dataset(
        dataset.with_options(options), hd.data.InputOptions()
    )
    assert forced._shard_across_workers is True
