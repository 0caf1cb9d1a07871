"""MirroredStrategy with local CPU replicas: TF's semantics in one process."""

import importlib.util

import numpy as np
import pytest

import hpcdist as hd
from hpcdist.cluster.gpus import visible_gpu_count
from tests import strategy_cases as cases

DEVICES = [["cpu:0", "cpu:1"], ["cpu:0", "cpu:1", "cpu:2"]]


@pytest.fixture(params=DEVICES, ids=lambda d: f"{len(d)}-replicas")
def strategy(request):
    return hd.MirroredStrategy(request.param)


def test_reduce_semantics(strategy):
    cases.check_reduce_semantics(strategy)


def test_mirrored_variable_table(strategy):
    cases.check_mirrored_variable_table(strategy)


def test_sync_on_read_table(strategy):
    cases.check_sync_on_read_table(strategy)


def test_variable_errors(strategy):
    cases.check_variable_errors(strategy)


def test_distributed_dataset(strategy):
    cases.check_distributed_dataset(strategy)


def test_reduce_of_plain_values(strategy):
    cases.check_reduce_of_plain_values(strategy)


def test_reduce_of_variables(strategy):
    cases.check_reduce_of_variables(strategy)


def test_datasets_from_function_uneven(strategy):
    cases.check_datasets_from_function_uneven(strategy)


def test_plain_value_reduce_matches_tf_on_one_and_two_replicas():
    # Values measured with TF 2.21 (MirroredStrategy on 1 and 2 logical CPUs).
    two, one = hd.MirroredStrategy(["cpu:0", "cpu:1"]), hd.MirroredStrategy(["cpu:0"])
    x = np.array([1, 2])
    assert two.reduce("mean", x, axis=None).tolist() == [1, 2]
    with pytest.raises(ValueError, match=r"non-distributed value \[1 2\] over the 2 local"):
        two.reduce("sum", x, axis=None)
    assert two.reduce("sum", x, axis=0) == 6 and two.reduce("mean", x, axis=0) == 1.5
    assert two.reduce("sum", np.zeros(2), axis=None).tolist() == [0.0, 0.0]
    for op in ("sum", "mean"):
        assert one.reduce(op, x, axis=None).tolist() == [1, 2]
    assert one.reduce("sum", x, axis=0) == 3 and one.reduce("mean", x, axis=0) == 1.5
    out = two.reduce("mean", x, axis=None)
    assert out is not x  # a new array, as every reduce result


def test_all_reduce_of_one_object_passed_by_every_replica(strategy):
    # TF 2.21: a tensor made outside run and all-reduced by every replica comes back as is.
    shared = np.array([1.0, 2.0])
    for op in ("sum", "mean"):
        out = strategy.run(lambda op=op: hd.get_replica_context().all_reduce(op, shared))
        assert [o.tolist() for o in strategy.experimental_local_results(out)] == [
            [1.0, 2.0]
        ] * strategy.num_replicas_in_sync
    out = strategy.run(lambda: hd.get_replica_context().all_gather(shared, axis=0))
    assert all(o.tolist() == [1.0, 2.0] for o in strategy.experimental_local_results(out))


def test_local_results_of_variables_on_one_replica():
    s = hd.MirroredStrategy(["cpu:0"])
    with s.scope():
        v = s.Variable([1.0, 2.0], name="w")
        r = s.Variable(0.0, synchronization=hd.VariableSynchronization.ON_READ)
    for var in (v, r):
        (copy,) = s.experimental_local_results(var)
        assert copy is not var and copy.name == var.name and copy.device == "cpu:0"
    with pytest.raises(ValueError, match="cannot SUM mirrored variable 'w'"):
        s.reduce("sum", v, axis=None)  # TF refuses even on one replica


def test_datasets_from_function_partial_steps_like_tf():
    two = hd.MirroredStrategy(["cpu:0", "cpu:1"])
    three = hd.MirroredStrategy(["cpu:0", "cpu:1", "cpu:2"])

    def batches(s, dataset_fn):
        return [
            [b.tolist() for b in s.experimental_local_results(step)]
            for step in s.distribute_datasets_from_function(dataset_fn)
        ]

    # 3 batches over 2 replicas: the last step gives replica 1 an empty batch.
    assert batches(two, lambda ctx: hd.data.Dataset.range(6).batch(2)) == [
        [[0, 1], [2, 3]],
        [[4, 5], []],
    ]
    assert batches(two, lambda ctx: hd.data.Dataset.range(5).batch(2)) == [
        [[0, 1], [2, 3]],
        [[4], []],
    ]
    assert batches(three, lambda ctx: hd.data.Dataset.range(8).batch(2)) == [
        [[0, 1], [2, 3], [4, 5]],
        [[6, 7], [], []],
    ]
    assert batches(two, lambda ctx: hd.data.Dataset.range(2).batch(2)) == [[[0, 1], []]]
    assert batches(two, lambda ctx: hd.data.Dataset.range(0).batch(2)) == []
    # Elements without a batch dimension cannot be emptied: TF ends at the partial step.
    assert batches(two, lambda ctx: hd.data.Dataset.range(3)) == [[0, 1]]

    def dicts(ctx):
        x = np.ones((6, 4, 2), np.float16)
        return hd.data.Dataset.from_tensor_slices({"x": x, "y": np.arange(6)}).batch(2)

    *_, last = two.distribute_datasets_from_function(dicts)
    empty = two.experimental_local_results(last)[1]
    assert empty["x"].shape == (0, 4, 2) and empty["x"].dtype == np.float16
    assert empty["y"].shape == (0,) and empty["y"].dtype == np.arange(1).dtype

    it = iter(two.distribute_datasets_from_function(lambda ctx: hd.data.Dataset.range(6).batch(2)))
    assert [it.get_next_as_optional().has_value() for _ in range(3)] == [True, True, False]
    with pytest.raises(StopIteration):
        next(it)


def test_datasets_from_function_restores_past_the_partial_step():
    s = hd.MirroredStrategy(["cpu:0", "cpu:1"])
    dist = s.distribute_datasets_from_function(lambda ctx: hd.data.Dataset.range(10).batch(2))
    it = iter(dist)
    next(it)
    state = it.checkpoint_state()
    rest = [[b.tolist() for b in s.experimental_local_results(x)] for x in it]
    assert rest == [[[4, 5], [6, 7]], [[8, 9], []]]
    again = iter(dist)
    again.restore_state(state)
    assert [[b.tolist() for b in s.experimental_local_results(x)] for x in again] == rest
    done = iter(dist)
    done.restore_state({"steps": np.int64(3)})  # past the end of the source: just exhausted
    assert list(done) == []


def test_replicas_run_in_order_and_get_their_arguments(strategy):
    order = []
    per_replica = strategy.experimental_distribute_values_from_function(
        lambda ctx: np.array([ctx.replica_id_in_sync_group * 10])
    )

    def fn(x, scale=1):
        rid = hd.get_replica_context().replica_id_in_sync_group
        order.append(rid)
        return x * scale

    out = strategy.run(fn, args=(per_replica,), kwargs={"scale": 2})
    assert order == list(range(strategy.num_replicas_in_sync))
    assert [v[0] for v in out.values] == [20 * i for i in range(strategy.num_replicas_in_sync)]


def test_replica_error_propagates_and_releases_the_others(strategy):
    def fn():
        rid = hd.get_replica_context().replica_id_in_sync_group
        if rid == 1:
            raise KeyError("replica 1 failed")
        return hd.get_replica_context().all_reduce("sum", np.ones(1))

    with pytest.raises(KeyError, match="replica 1 failed"):
        strategy.run(fn)
    assert strategy.run(lambda: 1) is not None  # still usable


def test_cross_device_ops_agree():
    values = hd.PerReplica([np.arange(5.0) * (i + 1) for i in range(5)])
    a = hd.ReductionToOneDevice().reduce("sum", values)
    b = hd.HierarchicalCopyAllReduce().reduce("sum", values)
    assert np.allclose(a.values[0], b.values[0]) and np.allclose(a.values[0], np.arange(5) * 15)
    assert np.allclose(hd.ReductionToOneDevice().reduce("mean", values).values[1], np.arange(5) * 3)
    pairs = hd.HierarchicalCopyAllReduce().batch_reduce("max", [(values, None), (values, None)])
    assert np.allclose(pairs[1].values[0], np.arange(5) * 5)
    s = hd.MirroredStrategy(["cpu:0", "cpu:1"], cross_device_ops=hd.HierarchicalCopyAllReduce())
    assert np.allclose(s.reduce("sum", s.run(lambda: np.ones(2)), axis=None), 2)
    if importlib.util.find_spec("cupy") is None:
        with pytest.raises(hd.errors.UnavailableError, match=r"CuPy"):
            hd.NcclAllReduce()
    else:  # host values are reduced on the host
        out = hd.NcclAllReduce().reduce("sum", values)
        assert np.allclose(out.values[0], np.arange(5) * 15)


def test_bad_devices():
    with pytest.raises(ValueError, match="distinct"):
        hd.MirroredStrategy(["cpu:0", "/CPU:0"])
    with pytest.raises(ValueError, match="cpu:0"):
        hd.MirroredStrategy(["tpu:0"])
    count = visible_gpu_count()
    with pytest.raises(ValueError, match=rf"devices .*'gpu:{count}'.* sees {count} GPU\(s\)"):
        hd.MirroredStrategy([f"gpu:{i}" for i in range(count + 1)])
    with pytest.raises(ValueError, match=rf"compute_devices .*'gpu:{count}'.* {count} GPU"):
        hd.CentralStorageStrategy(compute_devices=[f"gpu:{count}"])
    with pytest.raises(ValueError, match=rf"parameter_device .*'gpu:{count}'.* {count} GPU"):
        hd.CentralStorageStrategy(parameter_device=f"gpu:{count}")
    # default: every visible GPU, else cpu:0
    assert hd.MirroredStrategy().num_replicas_in_sync == max(1, visible_gpu_count())


@pytest.mark.parametrize("from_function", [False, True])
def test_distributed_iterators_cannot_rewind(from_function):
    s = hd.MirroredStrategy(["cpu:0", "cpu:1"])
    dataset = hd.data.Dataset.range(8).batch(2)
    dist = (
        s.distribute_datasets_from_function(lambda ctx: dataset)
        if from_function
        else s.experimental_distribute_dataset(dataset)
    )
    it = iter(dist)
    next(it)
    next(it)
    with pytest.raises(ValueError, match="cannot rewind a distributed iterator from step 2 to 1"):
        it.restore_state({"steps": np.int64(1)})
