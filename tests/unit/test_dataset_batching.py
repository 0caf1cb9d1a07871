"""Batches of in-memory rows: slices and gathers give what stacking element by element gives.

The reference is the element-by-element path itself: a ``map`` that returns its element
unchanged ends the row plan (a map must see elements), so ``source.map(same).batch(k)`` stacks
elements one by one while ``source.batch(k)`` slices the arrays.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest

import hpcdist as hd
from hpcdist.data import Dataset
from hpcdist.data.batching import shuffle_order
from hpcdist.data.nest import flatten

Point = collections.namedtuple("Point", ["x", "y"])


def same(*element):
    return element if len(element) > 1 else element[0]


def elementwise(ds: Dataset) -> Dataset:
    """The same elements, through the element-by-element path (no row plan after a map)."""
    return ds.map(same)


def flat(ds) -> list:
    return [flatten(b) for b in ds]


def assert_same_batches(fast, slow) -> None:
    got, want = flat(fast), flat(slow)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert len(g) == len(w)
        for a, b in zip(g, w, strict=True):
            # str arrays keep the source's width (stacking narrowed it to the batch's longest)
            same_dtype = (
                a.dtype.kind == b.dtype.kind if a.dtype.kind in "SU" else a.dtype == b.dtype
            )
            assert same_dtype and a.shape == b.shape
            np.testing.assert_array_equal(a, b)


def reference_order(n: int, buffer_size: int, rng: np.random.Generator) -> list[int]:
    """`Dataset.shuffle`'s element-by-element algorithm over the elements 0..n-1."""
    buffer: list[int] = []
    out = []
    for element in range(n):
        if len(buffer) < buffer_size:
            buffer.append(element)
            continue
        i = int(rng.integers(len(buffer)))
        out.append(buffer[i])
        buffer[i] = element
    while buffer:
        out.append(buffer.pop(int(rng.integers(len(buffer)))))
    return out


@pytest.mark.parametrize(
    ("n", "buffer_size"), [(0, 5), (1, 1), (7, 1), (7, 3), (5, 10), (100, 10), (1000, 999)]
)
@pytest.mark.parametrize("seed", [0, 1, 12345])
def test_shuffle_order_draws_what_one_draw_per_element_draws(n, buffer_size, seed):
    got = shuffle_order(n, buffer_size, np.random.default_rng(seed))
    assert got.tolist() == reference_order(n, buffer_size, np.random.default_rng(seed))


x = np.arange(103 * 3, dtype=np.float32).reshape(103, 3)
y = np.arange(103, dtype=np.int64)
SOURCES = {
    "array": lambda: Dataset.from_tensor_slices(x),
    "tuple": lambda: Dataset.from_tensor_slices((x, y)),
    "dict": lambda: Dataset.from_tensor_slices({"y": y, "x": x, "b": y % 2 == 0}),
    "nested": lambda: Dataset.from_tensor_slices((x, {"label": y, "name": y.astype(str)})),
    "namedtuple": lambda: Dataset.from_tensor_slices(Point(x, y)),
}
PIPELINES = {
    "plain": lambda d: d,
    "shuffle": lambda d: d.shuffle(10, seed=4),
    "shuffle-all": lambda d: d.shuffle(1000, seed=4),
    "shard": lambda d: d.shard(3, 1),
    "take": lambda d: d.take(40),
    "skip": lambda d: d.skip(17),
    "repeat": lambda d: d.repeat(3),
    "repeat-take": lambda d: d.repeat().take(250),
    "shuffle-repeat": lambda d: d.shuffle(20, seed=1).repeat(2),
    "repeat-shuffle": lambda d: d.repeat(2).shuffle(50, seed=2),
    "repeat-shard": lambda d: d.repeat(2).shard(4, 3),
    "shuffle-shard-skip": lambda d: d.shuffle(30, seed=9).shard(2, 0).skip(5),
    "take0": lambda d: d.take(0),
}


@pytest.mark.parametrize("pipeline", sorted(PIPELINES))
@pytest.mark.parametrize("source", sorted(SOURCES))
@pytest.mark.parametrize(("batch_size", "drop"), [(8, False), (8, True), (1, False), (500, False)])
def test_sliced_batches_equal_stacked_elements(source, pipeline, batch_size, drop):
    fast = PIPELINES[pipeline](SOURCES[source]()).batch(batch_size, drop_remainder=drop)
    slow = elementwise(PIPELINES[pipeline](SOURCES[source]())).batch(batch_size, drop)
    assert fast.cardinality() == slow.cardinality()
    assert_same_batches(fast, slow)
    assert_same_batches(fast, slow)  # the second epoch reshuffles the same way on both
    if fast.cardinality() >= 0:
        assert len(list(fast)) == fast.cardinality()


def test_the_structure_of_a_batch_is_the_elements_structure():
    batch = next(iter(SOURCES["namedtuple"]().batch(4)))
    assert type(batch) is Point and batch.x.shape == (4, 3) and batch.y.tolist() == [0, 1, 2, 3]
    keyed = next(iter(SOURCES["dict"]().batch(2)))
    assert list(keyed) == ["y", "x", "b"]  # the caller's key order, as before
    assert keyed["b"].dtype == bool and keyed["x"].dtype == np.float32


def test_batches_are_copies_not_views_of_the_source():
    data = np.zeros((10, 2))
    first = next(iter(Dataset.from_tensor_slices(data).batch(4)))
    first += 1
    assert not data.any()


def test_unbatched_elements_and_maps_see_elements():
    ds = Dataset.from_tensor_slices((x, y)).shuffle(10, seed=4)
    elements = list(ds)
    assert len(elements) == 103 and elements[0][0].shape == (3,)
    batches = list(ds.batch(103))  # one batch: the same order as the elements
    assert sorted(batches[0][1].tolist()) == list(range(103))
    doubled = list(Dataset.from_tensor_slices(y).map(lambda v: v * 2).batch(50))
    assert [b.shape for b in doubled] == [(50,), (50,), (3,)]
    assert doubled[2].tolist() == [200, 202, 204]


def test_shuffle_orders_are_pinned():
    # The orders of the element-by-element implementation (hpcdist before sliced batches),
    # for two epochs: batches and elements follow them exactly.
    pinned = [[0, 1, 3, 5, 7, 2, 8, 9, 6, 4], [1, 0, 3, 6, 7, 2, 9, 5, 4, 8]]
    hd.random.set_seed(None)  # the orders of an operation seed alone (an earlier test may set one)
    ds = Dataset.from_tensor_slices(np.arange(10)).shuffle(4, seed=7)
    assert [b.tolist() for b in ds.batch(3)] == [
        pinned[0][:3],
        pinned[0][3:6],
        pinned[0][6:9],
        pinned[0][9:],
    ]
    assert next(iter(ds.batch(10))).tolist() == pinned[1]
    again = Dataset.from_tensor_slices(np.arange(10)).shuffle(4, seed=7)
    assert [int(v) for v in again] == pinned[0]
    assert [int(v) for v in again] == pinned[1]


def test_a_distributed_iterator_restores_its_position_on_sliced_batches():
    def pipeline() -> Dataset:
        return Dataset.from_tensor_slices((x, y)).shuffle(50, seed=3).batch(8)

    strategy = hd.MultiWorkerMirroredStrategy()
    it = iter(strategy.experimental_distribute_dataset(pipeline()))
    for _ in range(4):
        next(it)
    state = it.checkpoint_state()
    expected = [strategy.experimental_local_results(next(it)) for _ in range(3)]
    resumed = iter(strategy.experimental_distribute_dataset(pipeline()))
    resumed.restore_state(state)
    for want in expected:
        got = strategy.experimental_local_results(next(resumed))
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g[0], w[0])
            np.testing.assert_array_equal(g[1], w[1])
