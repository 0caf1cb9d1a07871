"""strategy.reduce, gather, experimental_local_results and the replica context, 2 replicas."""

import numpy as np
import pytest

from tests.conformance.helpers import assert_documented, both, conform

REDUCE_SUM_VARIABLE = (
    "docs/differences-from-tensorflow.md: `reduce(SUM, mirrored_variable)` raises `ValueError`"
)
MEAN_OF_INTEGERS = (
    "docs/differences-from-tensorflow.md: MEAN of integer per-replica values floor-divides"
)


def per_replica(lib, s, rows=None):
    """(replica id + 1) * [1, 2], or an uneven (id + 1, 2) block of the id, on each replica."""

    def fn():
        index = lib.distribute.get_replica_context().replica_id_in_sync_group
        rid = lib.tf.cast(index, lib.tf.float32)
        if rows is None:
            return lib.tf.constant([1.0, 2.0]) * (rid + 1.0)
        return lib.tf.reshape(lib.tf.constant([1.0, 1.0, 1.0, 1.0]), (2, 2))[: rows[index]] * rid

    return s.run(fn)


@pytest.mark.parametrize("op", ["SUM", "MEAN"])  # TF's ReduceOp has no MAX or MIN
@pytest.mark.parametrize("axis", [None, 0])
def test_reduce_per_replica(op, axis):
    def case(lib):
        s = lib.mirrored()
        return s.reduce(getattr(lib.distribute.ReduceOp, op), per_replica(lib, s), axis=axis)

    conform(case)


@pytest.mark.parametrize("op", ["SUM", "MEAN"])
def test_reduce_uneven_along_axis(op):
    def case(lib):
        s = lib.mirrored()
        return s.reduce(op, per_replica(lib, s, rows=(1, 2)), axis=0)

    conform(case)


def test_reduce_of_a_non_distributed_value():
    """MEAN returns the value itself, SUM raises ValueError, SUM with axis=0 counts each replica."""

    def case(lib, op, axis):
        return lib.mirrored().reduce(op, np.array([1.0, 2.0]), axis=axis)

    assert conform(case, "MEAN", None).tolist() == [1.0, 2.0]
    assert conform(case, "SUM", None).family == "ValueError"
    assert conform(case, "SUM", 0) == 6.0
    assert conform(case, "MEAN", 0) == 1.5
    assert conform(case, "MEAN", 2).family == "ValueError"  # axis out of range


def test_reduce_of_a_non_distributed_python_number():
    conform(lambda lib: lib.mirrored().reduce("MEAN", 2.5, axis=None))


def test_reduce_of_mirrored_variable():
    def case(lib, op, axis):
        s = lib.mirrored()
        with s.scope():
            v = lib.tf.Variable([1.0, 2.0], aggregation=lib.tf.VariableAggregation.MEAN)
        return s.reduce(op, v, axis=axis)

    assert conform(case, "MEAN", None).tolist() == [1.0, 2.0]
    tf_sum, hd_sum = both(case, "SUM", None)  # a documented difference
    assert (tf_sum.family, hd_sum.family) == ("AssertionError", "ValueError"), (tf_sum, hd_sum)
    assert_documented(REDUCE_SUM_VARIABLE)
    assert conform(case, "SUM", 0) == 6.0
    assert conform(case, "MEAN", 0) == 1.5


def test_reduce_of_sync_on_read_variable_sums_the_copies():
    def case(lib):
        s = lib.mirrored()
        with s.scope():
            v = lib.tf.Variable(
                [1.0, 2.0],
                synchronization=lib.tf.VariableSynchronization.ON_READ,
                aggregation=lib.tf.VariableAggregation.SUM,
            )
        return s.reduce("SUM", v, axis=None), s.reduce("MEAN", v, axis=None)

    conform(case)


def test_gather():
    def case(lib):
        s = lib.mirrored()
        even = s.gather(per_replica(lib, s), axis=0)
        uneven = s.gather(per_replica(lib, s, rows=(1, 2)), axis=0)
        return even, uneven

    conform(case)


def test_gather_of_a_non_distributed_value_and_a_variable():
    def case(lib):
        s = lib.mirrored()
        with s.scope():
            v = lib.tf.Variable([[1.0, 2.0]])
        return s.gather(np.array([[3.0, 4.0]]), axis=0), s.gather(v, axis=0), s.gather(v, axis=1)

    conform(case)


def test_local_results_of_per_replica_values():
    def case(lib):
        s = lib.mirrored()
        value = per_replica(lib, s)
        nested = s.run(lambda: {"a": lib.tf.constant(1.0), "b": (lib.tf.constant([2.0]), 3)})
        return (
            s.experimental_local_results(value),
            s.experimental_local_results(nested),
            s.experimental_local_results(np.array([5.0])),
            s.experimental_local_results(7.0),
        )

    out = conform(case)
    assert len(out[0]) == 2 and out[0][1].tolist() == [2.0, 4.0]


def test_local_results_of_a_mirrored_variable_one_per_replica():
    def case(lib):
        s = lib.mirrored()
        with s.scope():
            v = lib.tf.Variable([1.0, 2.0], name="w")
        copies = s.experimental_local_results(v)
        copies[1].assign([5.0, 6.0])  # a component variable: that copy only
        names = [c.name.removesuffix(":0") for c in copies]
        return len(copies), names, [c.numpy() for c in copies], v.numpy()

    n, names, values, value = conform(case)
    assert n == 2 and names == ["w", "w/replica_1"]
    assert [x.tolist() for x in values] == [[1.0, 2.0], [5.0, 6.0]] and value.tolist() == [1.0, 2.0]


def test_local_results_of_a_sync_on_read_variable():
    def case(lib):
        s = lib.mirrored()
        with s.scope():
            v = lib.tf.Variable(
                3.0,
                synchronization=lib.tf.VariableSynchronization.ON_READ,
                aggregation=lib.tf.VariableAggregation.SUM,
            )
        return [c.numpy() for c in s.experimental_local_results(v)], v.read_value()

    assert conform(case)[1] == 6.0


def test_replica_context_inside_run():
    def case(lib):
        s = lib.mirrored()

        def fn():
            ctx = lib.distribute.get_replica_context()
            rid = lib.tf.cast(ctx.replica_id_in_sync_group, lib.tf.float32)
            x = lib.tf.constant([1.0, 2.0]) * (rid + 1.0)
            return (
                ctx.replica_id_in_sync_group,
                ctx.num_replicas_in_sync,
                ctx.all_reduce("SUM", x),
                ctx.all_reduce("MEAN", x),
                ctx.all_gather(lib.tf.reshape(x, (1, 2)), axis=0),
                lib.distribute.in_cross_replica_context(),
            )

        return [list(s.experimental_local_results(x)) for x in s.run(fn)]

    conform(case)


def test_contexts_outside_run():
    def case(lib):
        s = lib.mirrored()
        outside = (lib.distribute.has_strategy(), lib.distribute.in_cross_replica_context())
        with s.scope():
            inside = (
                lib.distribute.has_strategy(),
                lib.distribute.in_cross_replica_context(),
                lib.distribute.get_replica_context() is None,
                lib.distribute.get_strategy() is s,
                s.num_replicas_in_sync,
            )
        return outside, inside

    conform(case)


def test_run_with_args_that_are_not_a_sequence():
    conform(lambda lib: lib.mirrored().run(lambda x: x, args=1.0))


def test_tf_device_strings():
    """A ported MirroredStrategy(["/cpu:0", "/cpu:1"]) keeps its device strings."""

    def case(lib):
        s = lib.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        return s.num_replicas_in_sync

    assert conform(case) == 2


def test_mean_of_integer_values_is_a_documented_difference():
    """Replicas hold [1, 2] and [2, 3] (int32): TF's MEAN is float64 [1.5, 2.5], hpcdist's int32."""
    assert_documented(MEAN_OF_INTEGERS)

    def case(lib):
        s = lib.mirrored()

        def fn():
            rid = lib.distribute.get_replica_context().replica_id_in_sync_group
            return lib.tf.constant([1, 2]) + lib.tf.cast(rid, lib.tf.int32)

        value = s.run(fn)
        return s.reduce("MEAN", value, axis=None), s.reduce("SUM", value, axis=None)

    expected, got = both(case)
    assert expected[0].dtype == np.float64 and expected[0].tolist() == [1.5, 2.5]
    assert got[0].dtype == np.int32 and got[0].tolist() == [1, 2]
    assert expected[1].tolist() == got[1].tolist() == [3, 5]  # SUM agrees
