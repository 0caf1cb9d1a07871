"""Composition and reshaping ops, from_generator, parallel map: values, cardinality, errors."""

import gc
import threading
import time

import numpy as np
import pytest

from hpcdist.data import (
    AUTOTUNE,
    INFINITE_CARDINALITY,
    UNKNOWN_CARDINALITY,
    Dataset,
    Options,
    TensorSpec,
)
from hpcdist.data.parallel_map import THREAD_NAME
from hpcdist.data.prefetch import THREAD_NAME as PREFETCH_THREAD
from hpcdist.errors import InvalidArgumentError

WAIT_SECONDS = 5.0


def ints(dataset):
    return [int(x) for x in dataset]


def threads(prefix):
    return sum(1 for t in threading.enumerate() if t.name.startswith(prefix))


def settle(prefix, expected=0):
    deadline = time.monotonic() + WAIT_SECONDS
    while threads(prefix) != expected and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.01)
    return threads(prefix)


def test_interleave_follows_tfs_cycle_and_blocks():
    ds = Dataset.range(1, 4).interleave(
        lambda x: Dataset.from_tensors(x).repeat(int(x)), cycle_length=2, block_length=2
    )
    # TF's documented example pattern: inputs 1, 2, 3 with cycle 2 and block 2
    assert ints(ds) == [1, 2, 2, 3, 3, 3]
    assert ds.cardinality() == UNKNOWN_CARDINALITY


def test_interleave_with_parallel_reads_keeps_the_order_and_its_threads_end():
    make = lambda x: Dataset.range(int(x) * 10, int(x) * 10 + 4)  # noqa: E731
    serial = ints(Dataset.range(5).interleave(make, cycle_length=3, block_length=2))
    ds = Dataset.range(5).interleave(make, cycle_length=3, block_length=2, num_parallel_calls=3)
    assert ints(ds) == serial
    it = iter(ds)
    next(it)
    assert threads(PREFETCH_THREAD) > 0
    del it
    assert settle(PREFETCH_THREAD) == 0


def test_interleave_rejects_bad_arguments_and_non_datasets():
    with pytest.raises(ValueError, match="cycle_length"):
        Dataset.range(3).interleave(lambda x: Dataset.range(x), cycle_length=0)
    with pytest.raises(ValueError, match="block_length"):
        Dataset.range(3).interleave(lambda x: Dataset.range(x), block_length=-3)
    with pytest.raises(TypeError, match="must return a Dataset"):
        list(Dataset.range(3).interleave(lambda x: [x], cycle_length=1))


def test_flat_map_zip_concatenate_enumerate():
    assert ints(Dataset.range(4).flat_map(lambda x: Dataset.range(x))) == [0, 0, 1, 0, 1, 2]
    zipped = Dataset.zip(Dataset.range(3), Dataset.range(10, 20))
    assert [(int(a), int(b)) for a, b in zipped] == [(0, 10), (1, 11), (2, 12)]
    assert zipped.cardinality() == 3
    nested = Dataset.zip({"a": Dataset.range(2), "b": (Dataset.range(5), Dataset.range(7))})
    first = next(iter(nested))
    assert set(first) == {"a", "b"} and isinstance(first["b"], tuple)
    assert nested.cardinality() == 2
    assert Dataset.zip(Dataset.range(2).repeat(), Dataset.range(3)).cardinality() == 3
    forever = Dataset.zip(Dataset.range(2).repeat(), Dataset.range(3).repeat())
    assert forever.cardinality() == INFINITE_CARDINALITY
    unknown = Dataset.zip(Dataset.range(3).filter(lambda x: x > 0), Dataset.range(1))
    assert unknown.cardinality() == UNKNOWN_CARDINALITY
    with pytest.raises(TypeError, match="at least one"):
        Dataset.zip()
    joined = Dataset.range(3).concatenate(Dataset.range(7, 9))
    assert ints(joined) == [0, 1, 2, 7, 8] and joined.cardinality() == 5
    assert Dataset.range(3).concatenate(Dataset.range(1).repeat()).cardinality() == -1
    assert Dataset.range(3).concatenate(Dataset.range(3).filter(bool)).cardinality() == -2
    pairs = list(Dataset.range(5, 8).enumerate(start=2))
    assert [(int(i), int(x)) for i, x in pairs] == [(2, 5), (3, 6), (4, 7)]
    assert pairs[0][0].dtype == np.int64


def test_unbatch_padded_batch_rebatch():
    assert ints(Dataset.range(7).batch(3).unbatch()) == list(range(7))
    with pytest.raises(ValueError, match="scalar components"):
        list(Dataset.range(3).unbatch())
    mismatched = Dataset.from_tensors((np.zeros(2), np.zeros(3))).unbatch()
    with pytest.raises(InvalidArgumentError, match="same batch size"):
        list(mismatched)
    ragged = Dataset.range(1, 4).map(lambda x: np.full(int(x), x))
    batches = list(ragged.padded_batch(2))
    np.testing.assert_array_equal(batches[0], [[1, 0], [2, 2]])
    np.testing.assert_array_equal(batches[1], [[3, 3, 3]])
    fixed = list(ragged.padded_batch(3, padded_shapes=[5], padding_values=np.int64(-1)))
    np.testing.assert_array_equal(fixed[0][0], [1, -1, -1, -1, -1])
    assert ragged.padded_batch(2).cardinality() == 2
    as_tuple = next(iter(ragged.padded_batch(2, padded_shapes=(4,))))
    assert as_tuple.shape == (2, 4)
    assert ragged.padded_batch(2, drop_remainder=True).cardinality() == 1
    with pytest.raises(InvalidArgumentError, match="larger than its padded shape"):
        list(ragged.padded_batch(3, padded_shapes=[2]))
    strings = Dataset.from_tensor_slices(np.array([b"a", b"bb"], dtype=object)).map(
        lambda s: np.array([s] * len(s), dtype=object)
    )
    padded = next(iter(strings.padded_batch(2)))
    assert padded.tolist() == [[b"a", b""], [b"bb", b"bb"]]
    rebatched = [b.tolist() for b in Dataset.range(10).batch(4).rebatch(3)]
    assert rebatched == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    cycled = [len(b) for b in Dataset.range(10).batch(5).rebatch([1, 2])]
    assert cycled == [1, 2, 1, 2, 1, 2, 1]
    with pytest.raises(ValueError, match="positive"):
        Dataset.range(3).rebatch(0)


def test_window_sizes_shifts_strides_and_cardinality():
    def windows(ds):
        return [ints(w) for w in ds]

    assert windows(Dataset.range(7).window(3, 2)) == [[0, 1, 2], [2, 3, 4], [4, 5, 6], [6]]
    assert Dataset.range(7).window(3, 2).cardinality() == 4
    dropped = Dataset.range(10).window(3, shift=2, stride=2, drop_remainder=True)
    assert windows(dropped) == [[0, 2, 4], [2, 4, 6], [4, 6, 8]]
    assert dropped.cardinality() == 3
    assert windows(Dataset.range(10).window(2, shift=4)) == [[0, 1], [4, 5], [8, 9]]
    pair = next(iter(Dataset.zip(Dataset.range(4), Dataset.range(4)).window(2)))
    assert isinstance(pair, tuple) and [ints(p) for p in pair] == [[0, 1], [0, 1]]
    with pytest.raises(ValueError, match="shift"):
        Dataset.range(3).window(2, shift=0)


def test_from_generator_checks_types_and_shapes():
    def gen(n):
        for i in range(n):
            yield i, [float(i)] * 2

    signature = (TensorSpec([], np.int64), TensorSpec([2], np.float32))
    ds = Dataset.from_generator(gen, args=(3,), output_signature=signature)
    out = list(ds)
    assert [int(a) for a, _ in out] == [0, 1, 2] and out[0][1].dtype == np.float32
    assert list(ds) and ds.cardinality() == UNKNOWN_CARDINALITY  # generator called again
    legacy = Dataset.from_generator(lambda: iter([1, 2]), output_types=np.int32, output_shapes=[])
    assert [x.dtype for x in legacy] == [np.int32, np.int32]
    strings = Dataset.from_generator(
        lambda: iter(["a", b"b"]), output_signature=TensorSpec([], "string")
    )
    assert list(strings) == [b"a", b"b"]
    with pytest.raises(TypeError, match="output_signature"):
        Dataset.from_generator(gen)
    with pytest.raises(TypeError, match="callable"):
        Dataset.from_generator([1, 2], output_signature=TensorSpec([], np.int64))
    wrong_shape = Dataset.from_generator(
        lambda: iter([[1, 2, 3]]), output_signature=TensorSpec([2], np.int64)
    )
    with pytest.raises(InvalidArgumentError, match="shape"):
        list(wrong_shape)
    wrong_type = Dataset.from_generator(
        lambda: iter(["abc"]), output_signature=TensorSpec([], np.int64)
    )
    with pytest.raises(InvalidArgumentError, match="expected type"):
        list(wrong_type)
    wrong_structure = Dataset.from_generator(lambda: iter([1]), output_signature=signature)
    with pytest.raises(InvalidArgumentError, match="structure"):
        list(wrong_structure)


def slow_for_even(x):
    time.sleep(0.05 if int(x) % 2 == 0 else 0.0)
    return x


def test_parallel_map_is_ordered_when_deterministic():
    ds = Dataset.range(12).map(slow_for_even, num_parallel_calls=4, deterministic=True)
    assert ints(ds) == list(range(12))
    assert ds.cardinality() == 12
    default = Dataset.range(12).map(slow_for_even, num_parallel_calls=AUTOTUNE)
    assert ints(default) == list(range(12))


def test_parallel_map_yields_in_completion_order_when_not_deterministic():
    ds = Dataset.range(12).map(slow_for_even, num_parallel_calls=4, deterministic=False)
    out = ints(ds)
    assert sorted(out) == list(range(12))
    assert out != list(range(12))  # odd elements overtake the slow even ones
    options = Options()
    options.deterministic = False
    by_options = Dataset.range(12).with_options(options).map(slow_for_even, num_parallel_calls=4)
    assert sorted(ints(by_options)) == list(range(12))


def test_parallel_map_raises_the_functions_error_at_its_element():
    def fail_at_five(x):
        if int(x) == 5:
            raise RuntimeError("bad element 5")
        return x

    it = iter(Dataset.range(10).map(fail_at_five, num_parallel_calls=3))
    assert [int(next(it)) for _ in range(5)] == [0, 1, 2, 3, 4]
    with pytest.raises(RuntimeError, match="bad element 5"):
        next(it)
    assert settle(THREAD_NAME) == 0
    with pytest.raises(ValueError, match="num_parallel_calls"):
        Dataset.range(3).map(lambda x: x, num_parallel_calls=0)


def test_parallel_map_threads_end_when_iterators_end_or_are_dropped():
    assert settle(THREAD_NAME) == 0
    assert ints(Dataset.range(20).map(lambda x: x, num_parallel_calls=3)) == list(range(20))
    assert settle(THREAD_NAME) == 0
    iterators = [
        iter(Dataset.range(10**9).map(lambda x: x, num_parallel_calls=2)) for _ in range(3)
    ]
    for it in iterators:
        next(it)
    assert threads(THREAD_NAME) > 0
    del iterators, it
    assert settle(THREAD_NAME) == 0


def test_prefetch_autotune_and_zero():
    assert ints(Dataset.range(5).prefetch(AUTOTUNE)) == list(range(5))
    assert ints(Dataset.range(5).prefetch(0)) == list(range(5))
    with pytest.raises(ValueError, match="buffer_size"):
        Dataset.range(5).prefetch(-2)
    assert settle(PREFETCH_THREAD) == 0
