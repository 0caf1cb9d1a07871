"""MultiWorkerMirroredStrategy across ranks: TF's reduce/gather/input semantics at any size."""

import numpy as np
import pytest

import hpcdist as hd
from hpcdist.strategies.input import balanced_split
from tests import strategy_cases as cases

pytestmark = pytest.mark.mpi(min_size=2)


@pytest.fixture(scope="module")
def strategy():
    return hd.MultiWorkerMirroredStrategy()


def test_topology_and_replica_ids(strategy):
    n = strategy.extended.num_workers
    assert strategy.num_replicas_in_sync == n
    ids = strategy.run(lambda: hd.get_replica_context().replica_id_in_sync_group)
    assert ids == strategy.extended.worker_index
    assert strategy.cluster_resolver.world_size == n
    assert strategy.extended.should_checkpoint == (ids == 0)


def test_reduce_axis_none_and_with_axis(strategy):
    n, r = strategy.num_replicas_in_sync, strategy.extended.worker_index
    value = strategy.run(lambda: np.full((2, 3), r + 1.0))
    assert np.allclose(strategy.reduce("sum", value, axis=None), n * (n + 1) / 2)
    assert np.allclose(strategy.reduce("mean", value, axis=None), (n + 1) / 2)
    assert np.allclose(strategy.reduce("max", value, axis=None), n)
    assert np.allclose(strategy.reduce("min", value, axis=None), 1)
    # SUM with axis = sum of the concatenation along it.
    assert np.allclose(strategy.reduce("sum", value, axis=0), 2 * n * (n + 1) / 2)
    # Uneven batches: replica r has r+1 rows of value r; MEAN is the global mean.
    uneven = strategy.run(lambda: np.full((r + 1, 2), float(r)))
    rows = [i + 1 for i in range(n)]
    expected = sum(i * c for i, c in enumerate(rows)) / sum(rows)
    assert np.allclose(strategy.reduce("mean", uneven, axis=0), expected)
    assert np.allclose(
        strategy.reduce("sum", uneven, axis=0), sum(i * c for i, c in enumerate(rows))
    )
    assert np.allclose(strategy.reduce("max", uneven, axis=0), n - 1)
    # A replica with an empty batch takes part without breaking MIN/MAX.
    maybe_empty = strategy.run(lambda: np.full((0 if r == 0 else 2,), float(r)))
    assert strategy.reduce("min", maybe_empty, axis=0) == 1.0


def test_local_results_gather_and_all_gather(strategy):
    r, n = strategy.extended.worker_index, strategy.num_replicas_in_sync
    value = strategy.run(lambda: np.full((r + 1, 2), r))
    assert len(strategy.experimental_local_results(value)) == 1
    gathered = strategy.gather(value, axis=0)
    assert gathered[:, 0].tolist() == [i for i in range(n) for _ in range(i + 1)]
    cols = strategy.gather(strategy.run(lambda: np.full((2, r + 1), r)), axis=1)
    assert cols.shape == (2, n * (n + 1) // 2)

    def replica_fn():
        ctx = hd.get_replica_context()
        total = ctx.all_reduce(
            "sum", {"a": np.ones(2), "b": np.array(ctx.replica_id_in_sync_group)}
        )
        ids = ctx.all_gather(
            np.array([ctx.replica_id_in_sync_group] * (ctx.replica_id_in_sync_group + 1)), axis=0
        )
        return total, ids

    total, ids = strategy.run(replica_fn)
    assert total["a"].tolist() == [n, n] and int(total["b"]) == n * (n - 1) // 2
    assert ids.tolist() == [i for i in range(n) for _ in range(i + 1)]


def test_bad_arguments_raise_on_every_rank(strategy):
    with pytest.raises(ValueError, match="SUM, MEAN, MIN and MAX"):
        strategy.reduce("prod", np.ones(2), axis=None)
    with pytest.raises(ValueError, match="out of range"):
        strategy.reduce("sum", np.ones(2), axis=3)
    # Only the last rank passes a bad axis: every rank raises, none hangs.
    r, n = strategy.extended.worker_index, strategy.num_replicas_in_sync
    value = np.ones((2, 2)) if r != n - 1 else np.ones(2)
    with pytest.raises(ValueError):
        strategy.reduce("sum", value, axis=1)
    with pytest.raises(ValueError, match="tuple or list"):
        strategy.run(lambda x: x, args=5)
    assert np.allclose(strategy.reduce("sum", np.ones(1), axis=None), n)


def test_balanced_split():
    assert balanced_split(7, 3) == [(0, 3), (3, 5), (5, 7)]
    assert balanced_split(2, 4) == [(0, 1), (1, 2), (2, 2), (2, 2)]


def test_distributed_dataset_splits_global_batches_and_stops_together(strategy):
    n, r = strategy.num_replicas_in_sync, strategy.extended.worker_index
    global_batch = 2 * n + 1
    total = 3 * global_batch + n - 1  # the last global batch is short: some replicas get nothing
    ds = hd.data.Dataset.from_tensor_slices((np.arange(total), np.arange(total) * 10)).batch(
        global_batch
    )
    seen = []
    steps = 0
    for x, y in strategy.experimental_distribute_dataset(ds):
        assert (y == x * 10).all()
        seen.extend(x.tolist())
        steps += 1
    assert steps == 4
    everything = strategy.gather(np.array(seen, dtype=np.int64), axis=0)
    assert sorted(everything.tolist()) == list(range(total))  # each example exactly once
    first = balanced_split(global_batch, n)[r]
    assert seen[: first[1] - first[0]] == list(range(first[0], first[1]))


def test_uneven_sources_stop_on_the_same_step(strategy):
    r = strategy.extended.worker_index

    def dataset_fn(ctx):
        assert (
            ctx.input_pipeline_id == r and ctx.num_input_pipelines == strategy.num_replicas_in_sync
        )
        return hd.data.Dataset.range(3 + ctx.input_pipeline_id).batch(1)  # rank-dependent length

    n = strategy.num_replicas_in_sync
    steps = 0
    for batch in strategy.distribute_datasets_from_function(dataset_fn):
        assert strategy.reduce("sum", np.ones(1), axis=None)[0] == n
        # TF: a worker that ran out gets empty batches until every worker has
        assert batch.tolist() == ([steps] if steps < 3 + r else [])
        steps += 1
    assert steps == 3 + n - 1  # the longest dataset, on every rank


def test_workers_without_data_get_empty_batches_of_the_right_shape(strategy):
    r = strategy.extended.worker_index

    def dataset_fn(ctx):  # only rank 0 has data: the others never see an element
        rows = 4 if ctx.input_pipeline_id == 0 else 0
        x = np.ones((rows, 3), np.float32)
        return hd.data.Dataset.from_tensor_slices((x, np.arange(rows, dtype=np.int32))).batch(2)

    steps = 0
    for x, y in strategy.distribute_datasets_from_function(dataset_fn):
        if r == 0:
            assert x.shape == (2, 3) and y.tolist() == [2 * steps, 2 * steps + 1]
        else:  # values measured with TF 2.21 MultiWorkerMirroredStrategy on 2 workers
            assert x.shape == (0, 3) and x.dtype == np.float32
            assert y.shape == (0,) and y.dtype == np.int32
        steps += 1
    assert steps == 2


def test_unbatched_elements_are_padded_with_zeros_across_workers(strategy):
    r = strategy.extended.worker_index

    def dataset_fn(ctx):  # scalars: TF pads them with a zero of their dtype across workers
        return hd.data.Dataset.range(2 + ctx.input_pipeline_id)

    got = [int(v) for v in strategy.distribute_datasets_from_function(dataset_fn)]
    n = strategy.num_replicas_in_sync
    assert got == list(range(2 + r)) + [0] * (n - 1 - r)


def test_plain_values_and_variables_follow_tf(strategy):
    n, r = strategy.num_replicas_in_sync, strategy.extended.worker_index
    # A plain value is each worker's value: reduced over the workers (TF's MWMS).
    value = np.array([1.0, 2.0]) * (r + 1)
    total = sum(range(1, n + 1))
    assert strategy.reduce("sum", value, axis=None).tolist() == [total, 2 * total]
    assert np.allclose(strategy.reduce("mean", value, axis=None), [total / n, 2 * total / n])
    assert strategy.reduce("sum", value, axis=0) == 3 * total
    assert np.isclose(strategy.reduce("mean", value, axis=0), 3 * total / (2 * n))
    with strategy.scope():
        w = strategy.Variable([1.0, 2.0], name="w", aggregation=hd.VariableAggregation.MEAN)
    (copy,) = strategy.experimental_local_results(w)  # TF: the component, not the variable
    assert copy is not w and copy.name == "w" and copy.numpy().tolist() == [1.0, 2.0]
    with pytest.raises(ValueError, match="cannot SUM mirrored variable 'w'"):
        strategy.reduce("sum", w, axis=None)
    assert strategy.reduce("mean", w, axis=None).tolist() == [1.0, 2.0]


@pytest.mark.parametrize(
    "case",
    [
        cases.check_reduce_semantics,
        cases.check_reduce_of_plain_values,
        cases.check_reduce_of_variables,
        cases.check_datasets_from_function_uneven,
        cases.check_mirrored_variable_table,
        cases.check_sync_on_read_table,
        cases.check_variable_errors,
        cases.check_distributed_dataset,
    ],
    ids=lambda f: f.__name__.removeprefix("check_"),
)
def test_shared_strategy_semantics(strategy, case):
    case(strategy)


def test_variables_take_the_chiefs_initial_value(strategy):
    r = strategy.extended.worker_index
    with strategy.scope():
        v = strategy.Variable(np.full(3, float(r)))
        w = strategy.Variable(lambda: np.random.default_rng(r).random(4))
    assert (v.numpy() == 0).all()
    assert np.allclose(w.numpy(), np.random.default_rng(0).random(4))


def test_central_storage_one_copy_per_node():
    from mpi4py import MPI

    from hpcdist.strategies.shared_storage import SharedStorage

    comm = hd.comm.world()
    if comm.num_nodes > 1:
        pytest.skip("several nodes: CentralStorageStrategy spans one node (tested to raise below)")
    s = hd.CentralStorageStrategy()
    n = s.num_replicas_in_sync
    assert n == comm.size
    with s.scope():
        v = s.Variable(np.zeros(4), aggregation=hd.VariableAggregation.SUM)
    assert isinstance(v.storage, SharedStorage)
    s.run(lambda: v.assign_add(np.ones(4)))
    assert (v.numpy() == n).all()
    # Really one copy: a write by the leader straight into memory is seen by every rank.
    MPI.COMM_WORLD.Barrier()
    if comm.rank == 0:
        v.values[0][0] = 123.0
    MPI.COMM_WORLD.Barrier()
    assert v.numpy()[0] == 123.0
    MPI.COMM_WORLD.Barrier()
    for case in (
        cases.check_mirrored_variable_table,
        cases.check_sync_on_read_table,
        cases.check_reduce_of_plain_values,
        cases.check_reduce_of_variables,
    ):
        case(s)


def test_central_storage_refuses_several_nodes():
    comm = hd.comm.world()
    if comm.num_nodes == 1:
        pytest.skip("one node: nothing to refuse")
    with pytest.raises(ValueError, match="span"):
        hd.CentralStorageStrategy()


def test_auto_shard_off_gives_every_worker_the_whole_batch(strategy):
    options = hd.data.InputOptions(auto_shard_policy=hd.data.AutoShardPolicy.OFF)
    ds = hd.data.Dataset.range(10).batch(4)
    batches = [b.tolist() for b in strategy.experimental_distribute_dataset(ds, options)]
    assert batches == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    with pytest.raises(TypeError, match="InputOptions"):
        strategy.experimental_distribute_dataset(ds, {"auto_shard_policy": "OFF"})


@pytest.mark.parametrize("resolver", [42, "worker", {"worker": ["a:1"]}])
def test_cluster_resolver_must_be_a_resolver(resolver):
    with pytest.raises(TypeError, match=r"cluster_resolver must be .*ClusterResolver") as info:
        hd.MultiWorkerMirroredStrategy(cluster_resolver=resolver)
    assert f"got {resolver!r} ({type(resolver).__name__})" in str(info.value)


@pytest.mark.parametrize(
    "value", ["mpi", "RING", hd.CommunicationImplementation.MPI, hd.CommunicationOptions()]
)
def test_communication_options_takes_options_or_an_implementation(value):
    strategy = hd.MultiWorkerMirroredStrategy(communication_options=value)
    expected = value if isinstance(value, hd.CommunicationOptions) else None
    options = strategy.communication_options
    assert isinstance(options, hd.CommunicationOptions)
    if expected is not None:
        assert options is expected
    else:
        assert options.implementation.value == str(getattr(value, "value", value)).lower()
    n = strategy.num_replicas_in_sync
    assert np.allclose(strategy.reduce("sum", strategy.run(lambda: np.ones(3)), axis=None), n)


def test_communication_options_of_another_type_is_a_type_error():
    with pytest.raises(TypeError, match=r"communication_options must be .*Options.*got 42"):
        hd.MultiWorkerMirroredStrategy(communication_options=42)
    with pytest.raises(ValueError, match="unknown implementation 'carrier-pigeon'"):
        hd.MultiWorkerMirroredStrategy(communication_options="carrier-pigeon")
