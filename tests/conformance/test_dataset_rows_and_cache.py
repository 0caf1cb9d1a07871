"""Batches of in-memory rows and the file cache, against TensorFlow 2.21's tf.data.

Unshuffled pipelines are compared element for element (hpcdist builds their batches by
slicing the arrays); shuffled ones by their batch shapes and the rows they hold (the two
libraries' random streams differ, see docs/differences-from-tensorflow.md). The file cache is
compared by what each side reads on later passes: a pass stopped early leaves no cache on
either side, and a complete pass is replayed without reading the source again.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.conformance.helpers import HD, TF, conform

x = np.arange(23 * 2, dtype=np.float32).reshape(23, 2)
y = np.arange(23, dtype=np.int64)

PIPELINES = {
    "batch": lambda d: d.from_tensor_slices((x, y)).batch(5),
    "batch-drop": lambda d: d.from_tensor_slices((x, y)).batch(5, drop_remainder=True),
    "dict": lambda d: d.from_tensor_slices({"x": x, "y": y}).batch(4),
    "shard": lambda d: d.from_tensor_slices(x).shard(3, 2).batch(3),
    "take-skip": lambda d: d.from_tensor_slices(y).skip(4).take(13).batch(6),
    "repeat": lambda d: d.from_tensor_slices(y).repeat(2).batch(10),
    "repeat-take": lambda d: d.from_tensor_slices(y).repeat().take(50).batch(7),
    "repeat-shard": lambda d: d.from_tensor_slices(y).repeat(3).shard(4, 1).batch(5),
    "batch-larger": lambda d: d.from_tensor_slices(y).batch(100),
}


@pytest.mark.parametrize("name", list(PIPELINES))
def test_sliced_batches_are_tf_batches(name):
    def case(lib):
        ds = PIPELINES[name](lib.data.Dataset)
        return int(ds.cardinality()), list(ds.as_numpy_iterator())

    conform(case)


@pytest.mark.parametrize("drop", [False, True])
def test_shuffled_batches_hold_the_same_rows_in_the_same_shapes(drop):
    def case(lib):
        ds = lib.data.Dataset.from_tensor_slices((x, y)).shuffle(7, seed=1)
        batches = list(ds.batch(5, drop_remainder=drop).as_numpy_iterator())
        shapes = [(a.shape, b.shape) for a, b in batches]
        labels = sorted(int(v) for _, b in batches for v in b)
        if drop:  # which rows are dropped depends on the random stream
            labels = len(set(labels))
        rows_match = all(np.array_equal(a, x[b]) for a, b in batches)
        return int(ds.batch(5, drop_remainder=drop).cardinality()), shapes, labels, rows_match

    conform(case)


def test_the_file_cache_replays_a_complete_pass_and_drops_a_partial_one(tmp_path):
    def case(lib):
        (tmp_path / lib.name).mkdir()  # TF does not create it (NotFoundError); hpcdist does
        prefix = str(tmp_path / lib.name / "cache")
        reads = []

        def source():
            def note(v):
                reads.append(1)
                return v

            if lib is TF:  # a Python side effect per element needs py_function under TF
                mapped = lib.data.Dataset.range(6).map(
                    lambda v: TF.tf.py_function(note, [v], TF.tf.int64)
                )
            else:
                mapped = lib.data.Dataset.range(6).map(note)
            return mapped.cache(prefix)

        ds = source()
        partial = [int(v) for v in ds.take(2)]
        after_partial = len(reads)
        full = [int(v) for v in ds]
        after_full = len(reads)
        replay = [int(v) for v in source()]  # a new pipeline: the next run
        return partial, after_partial, full, after_full, replay, len(reads)

    expected, got = case(TF), case(HD)
    assert expected == ([0, 1], 2, list(range(6)), 8, list(range(6)), 8)
    assert got == expected
