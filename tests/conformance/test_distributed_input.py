"""Distributed datasets and InputContext on two replicas."""

import numpy as np
import pytest

from tests.conformance.helpers import assert_documented, both, conform

PIPELINE_ID_CHECKED = (
    "docs/differences-from-tensorflow.md: `InputContext` rejects an `input_pipeline_id` outside "
    "`[0, num_input_pipelines)`"
)
PADS_DROP_REMAINDER = (
    "docs/differences-from-tensorflow.md: `distribute_datasets_from_function` pads a partial "
    "last step for `batch(n, drop_remainder=True)` too."
)


def dist_fn(s, dataset_fn):
    return s.distribute_datasets_from_function(dataset_fn)


def input_context(lib):
    """tf.distribute.InputContext; hpcdist's lives in hpcdist.data (see the porting test)."""
    return lib.distribute.InputContext if lib.name == "tf" else lib.data.InputContext


def test_input_context_and_options_port_by_the_distribute_rule():
    """docs/porting.md: `tf.distribute[.experimental].X` is `hd.X`."""

    def case(lib):
        return {n: hasattr(lib.distribute, n) for n in ("InputContext", "InputOptions", "ReduceOp")}

    conform(case)


def steps(lib, s, dist):
    """Each step's per-replica batches, as lists."""
    return [list(s.experimental_local_results(batch)) for batch in dist]


@pytest.mark.parametrize(("n", "batch"), [(8, 4), (10, 4), (7, 3), (5, 5), (3, 4)])
def test_distribute_dataset_splits_global_batches(n, batch):
    def case(lib):
        s = lib.mirrored()
        ds = lib.data.Dataset.from_tensor_slices(np.arange(n, dtype=np.int64)).batch(batch)
        return steps(lib, s, s.experimental_distribute_dataset(ds))

    conform(case)


def test_distribute_dataset_of_tuples_and_dicts():
    def case(lib):
        s = lib.mirrored()
        x = np.arange(12, dtype=np.float32).reshape(6, 2)
        y = np.arange(6, dtype=np.int32)
        ds = lib.data.Dataset.from_tensor_slices({"x": x, "y": y}).batch(4)
        return steps(lib, s, s.experimental_distribute_dataset(ds))

    conform(case)


def test_distribute_dataset_drop_remainder():
    def case(lib):
        s = lib.mirrored()
        ds = lib.data.Dataset.range(10).batch(4, drop_remainder=True)
        return steps(lib, s, s.experimental_distribute_dataset(ds))

    conform(case)


def test_run_over_a_distributed_dataset():
    def case(lib):
        s = lib.mirrored()
        ds = lib.data.Dataset.from_tensor_slices(np.arange(8, dtype=np.float32)).batch(4)
        totals = []
        for batch in s.experimental_distribute_dataset(ds):
            per_replica = s.run(lambda b: lib.tf.reduce_sum(b), args=(batch,))
            totals.append(s.reduce("SUM", per_replica, axis=None))
        return totals

    assert [float(t) for t in conform(case)] == [6.0, 22.0]


def test_iterator_ends_with_stop_iteration():
    def case(lib):
        s = lib.mirrored()
        it = iter(s.experimental_distribute_dataset(lib.data.Dataset.range(4).batch(4)))
        first = list(s.experimental_local_results(next(it)))
        next(it)
        return first

    assert conform(case).family == "StopIteration"


def test_datasets_from_function_uneven_three_batches_over_two_replicas():
    def case(lib):
        s = lib.mirrored()

        def dataset_fn(ctx):
            x = np.arange(12, dtype=np.float32).reshape(6, 2)
            return lib.data.Dataset.from_tensor_slices(x).batch(2)

        return steps(lib, s, s.distribute_datasets_from_function(dataset_fn))

    out = conform(case)
    assert len(out) == 2 and out[1][1].shape == (0, 2)  # replica 1 gets an empty last batch


def test_datasets_from_function_sees_the_input_context():
    def case(lib):
        s = lib.mirrored()
        seen = []

        def dataset_fn(ctx):
            seen.append(
                (
                    ctx.num_input_pipelines,
                    ctx.input_pipeline_id,
                    ctx.num_replicas_in_sync,
                    ctx.get_per_replica_batch_size(8),
                )
            )
            batch = ctx.get_per_replica_batch_size(8)
            return (
                lib.data.Dataset.range(16)
                .shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
                .batch(batch)
            )

        out = steps(lib, s, s.distribute_datasets_from_function(dataset_fn))
        return seen, out

    conform(case)


@pytest.mark.parametrize(
    ("pipelines", "pipeline_id", "replicas", "global_batch"),
    [
        (1, 0, 2, 8),
        (2, 1, 4, 8),
        (2, 0, 2, 7),
        (1, 0, 1, 5),
        (4, 3, 4, 12),
    ],
)
def test_input_context(pipelines, pipeline_id, replicas, global_batch):
    def case(lib):
        ctx = input_context(lib)(
            num_input_pipelines=pipelines,
            input_pipeline_id=pipeline_id,
            num_replicas_in_sync=replicas,
        )
        attrs = (ctx.num_input_pipelines, ctx.input_pipeline_id, ctx.num_replicas_in_sync)
        return attrs, ctx.get_per_replica_batch_size(global_batch)

    conform(case)


def test_input_context_defaults():
    def case(lib):
        ctx = input_context(lib)()
        return ctx.num_input_pipelines, ctx.input_pipeline_id, ctx.num_replicas_in_sync

    conform(case)


@pytest.mark.parametrize(
    ("pipelines", "pipeline_id", "replicas"),
    [(2, 2, 2), (2, 3, 2), (2, 3, 4), (2, 5, 4), (0, 0, 1)],
)
def test_input_context_pipeline_id_out_of_range(pipelines, pipeline_id, replicas):
    """TF accepts an input_pipeline_id >= num_input_pipelines; hpcdist raises (documented)."""
    assert_documented(PIPELINE_ID_CHECKED)

    def case(lib):
        ctx = input_context(lib)(
            num_input_pipelines=pipelines,
            input_pipeline_id=pipeline_id,
            num_replicas_in_sync=replicas,
        )
        return ctx.input_pipeline_id, ctx.get_per_replica_batch_size(4 * replicas)

    expected, got = both(case)
    assert expected == (pipeline_id, 4)  # TF keeps the id as given
    assert got.family == "ValueError"


def test_drop_remainder_partial_step_is_a_documented_difference():
    """3 batches of 2 (drop_remainder) over 2 replicas: TF drops the partial step, hpcdist pads."""
    assert_documented(PADS_DROP_REMAINDER)

    def case(lib):
        s = lib.mirrored()

        def dataset_fn(ctx):
            return lib.data.Dataset.range(6).batch(2, drop_remainder=True)

        return [
            [np.asarray(b).tolist() for b in step] for step in steps(lib, s, dist_fn(s, dataset_fn))
        ]

    expected, got = both(case)
    assert expected == [[[0, 1], [2, 3]]]
    assert got == [[[0, 1], [2, 3]], [[4, 5], []]]
