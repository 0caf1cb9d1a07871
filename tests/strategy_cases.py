"""Strategy semantics checked the same way on local replicas (one process) and on MPI ranks.

Each function takes a strategy and asserts TF's semantics in terms of
``strategy.num_replicas_in_sync``; tests/unit runs them on MirroredStrategy with CPU replicas,
tests/mpi on MultiWorkerMirroredStrategy at 2, 3 and 4 ranks.
"""

import numpy as np
import pytest

import hpcdist as hd
from hpcdist.strategies import ReplicaCopy
from hpcdist.utils.xp import to_numpy

Agg = hd.VariableAggregation
Sync = hd.VariableSynchronization


def replica_id():
    return hd.get_replica_context().replica_id_in_sync_group


def check_reduce_semantics(s):
    n = s.num_replicas_in_sync
    value = s.run(lambda: np.full((2, 3), replica_id() + 1.0))
    assert len(s.experimental_local_results(value)) == s.extended.local_replicas
    assert np.allclose(s.reduce("sum", value, axis=None), n * (n + 1) / 2)
    assert np.allclose(s.reduce("mean", value, axis=None), (n + 1) / 2)
    assert np.allclose(s.reduce("max", value, axis=None), n)
    assert np.allclose(s.reduce("sum", value, axis=0), 2 * n * (n + 1) / 2)
    uneven = s.run(lambda: np.full((replica_id() + 1, 2), float(replica_id())))
    rows = list(range(1, n + 1))
    mean = sum(i * c for i, c in enumerate(rows)) / sum(rows)
    assert np.allclose(s.reduce("mean", uneven, axis=0), mean)
    gathered = s.gather(uneven, axis=0)
    assert gathered[:, 0].tolist() == [float(i) for i in range(n) for _ in range(i + 1)]

    def replica_fn():
        ctx = hd.get_replica_context()
        rid = ctx.replica_id_in_sync_group
        total = ctx.all_reduce("sum", {"x": np.ones(2) * rid, "n": np.array(1)})
        mean = ctx.all_reduce("mean", np.array([float(rid)]))
        ids = ctx.all_gather(np.array([rid] * (rid + 1)), axis=0)
        doubled = ctx.merge_call(
            lambda strategy, v: strategy.reduce("sum", v, axis=None), args=(np.array([2]),)
        )
        return total, mean, ids, doubled

    total, mean, ids, doubled = s.run(replica_fn)
    for t in s.experimental_local_results(total):
        assert t["x"].tolist() == [n * (n - 1) / 2] * 2 and int(t["n"]) == n
    for m in s.experimental_local_results(mean):
        assert np.allclose(m, (n - 1) / 2)
    for i in s.experimental_local_results(ids):
        assert i.tolist() == [r for r in range(n) for _ in range(r + 1)]
    for d in s.experimental_local_results(doubled):
        assert int(d[0]) == 2 * n


def check_reduce_of_plain_values(s):
    """TF's rule: a non-distributed value is the same value on each of a worker's replicas."""
    n, local = s.num_replicas_in_sync, s.extended.local_replicas
    workers = n // local
    plain = np.array([1, 2], np.int32)  # the same on every worker
    mean = s.reduce("mean", plain, axis=None)
    assert mean.tolist() == [1, 2] and mean.dtype == np.int32  # the value itself, not [0.5, 1]
    assert s.reduce("max", plain, axis=None).tolist() == [1, 2]
    if local == 1:  # one replica per worker: each worker's value, summed over the workers
        assert s.reduce("sum", plain, axis=None).tolist() == [workers, 2 * workers]
    else:
        with pytest.raises(ValueError, match="cannot SUM the non-distributed value"):
            s.reduce("sum", plain, axis=None)
    assert s.reduce("sum", np.zeros(3), axis=None).tolist() == [0.0] * 3  # zeros: TF's exception
    assert s.reduce("sum", plain, axis=0) == 3 * n  # once per replica: TF gives 6 on 2 replicas
    assert s.reduce("mean", plain, axis=0) == 1.5
    assert s.reduce("mean", 2.5, axis=None) == 2.5
    # batch_reduce_to: a plain value counts as one replica's value (MEAN returns it).
    mean, total = (
        s.extended.batch_reduce_to(op, [(np.array([1.0, 2.0]), None)])[0] for op in ("mean", "sum")
    )
    assert mean.tolist() == [1.0, 2.0] and total.tolist() == [workers, 2.0 * workers]
    # Per-replica values are not affected: MEAN with an axis stays the global mean.
    rows = s.run(lambda: np.full((replica_id() + 1,), float(replica_id())))
    assert np.isclose(
        s.reduce("mean", rows, axis=0), sum(i * (i + 1) for i in range(n)) / sum(range(1, n + 1))
    )


def check_mirrored_variable_table(s):
    n = s.num_replicas_in_sync
    with s.scope():
        v_sum = s.Variable(1.0, aggregation=Agg.SUM)
        v_mean = s.Variable(1.0, aggregation=Agg.MEAN)
        v_first = s.Variable(1.0, aggregation=Agg.ONLY_FIRST_REPLICA)
        v_none = s.Variable(1.0)
    assert isinstance(v_sum, hd.MirroredVariable) and v_sum.synchronization is Sync.ON_WRITE

    def update():
        rid = float(replica_id())
        v_sum.assign_add(np.array(1.0))  # an array made in each replica: a per-replica value
        v_mean.assign(rid)
        v_first.assign(rid + 10)
        return v_sum.read_value()

    seen = s.run(update)
    assert v_sum.numpy() == 1.0 + n  # deltas summed over replicas
    assert np.allclose(v_mean.numpy(), (n - 1) / 2)  # values averaged
    assert v_first.numpy() == 10.0  # replica 0's value
    for x in s.experimental_local_results(seen):
        assert x == 1.0 + n  # every replica sees the aggregated value
    for copy in v_sum.values:
        assert copy == 1.0 + n
    # hpcdist's rule: NONE in replica context with several replicas raises instead of diverging.
    with pytest.raises(ValueError, match="aggregation NONE"):
        s.run(lambda: v_none.assign(float(replica_id())))
    v_none.assign(5.0)  # cross-replica: fine
    assert v_none.numpy() == 5.0
    v_sum.assign_sub(1.0)
    assert v_sum.numpy() == float(n)
    # A Python constant is the same object on every replica: a non-distributed value (TF's
    # regroup). SUM of it over several local replicas raises, as in TF; MEAN keeps it.
    if s.extended.local_replicas > 1:
        with pytest.raises(ValueError, match="cannot SUM the non-distributed value"):
            s.run(lambda: v_sum.assign_add(1.0))
        assert v_sum.numpy() == float(n)
    else:  # one replica per worker: each worker's constant, summed over the workers
        s.run(lambda: v_sum.assign_add(1.0))
        assert v_sum.numpy() == 2.0 * n
        v_sum.assign(float(n))
    s.run(lambda: v_mean.assign_add(5.0))
    assert np.allclose(v_mean.numpy(), (n - 1) / 2 + 5.0)
    s.run(lambda: v_sum.assign_sub(np.array(1.0)))
    assert v_sum.numpy() == 0.0
    check_variable_local_results(s, v_sum)


def check_variable_local_results(s, v):
    """TF: a mirrored strategy's variable gives one component variable per local replica."""
    local = s.extended.local_replicas
    copies = s.experimental_local_results(v)
    if not s.variables_per_replica:  # central storage: one variable (TF's AggregatingVariable)
        assert len(copies) == 1 and copies[0] is v
        return
    assert len(copies) == local and all(isinstance(c, ReplicaCopy) for c in copies)
    again = s.experimental_local_results(v)
    assert all(a is b for a, b in zip(copies, again, strict=True))  # the same objects each time
    assert [c.name for c in copies] == [v.name] + [f"{v.name}/replica_{i}" for i in range(1, local)]
    assert [c.device for c in copies] == list(s.extended.worker_devices)
    for c, array in zip(copies, v.values, strict=True):
        assert c is not v and np.array_equal(c.numpy(), to_numpy(array))  # GPU: a CuPy array
    pairs = s.experimental_local_results((v, 3.0))
    assert len(pairs) == local
    assert all(p[0] is c and p[1] == 3.0 for p, c in zip(pairs, copies, strict=True))


def check_sync_on_read_table(s):
    n = s.num_replicas_in_sync
    with s.scope():
        v_sum = s.Variable(1.0, synchronization=Sync.ON_READ, aggregation=Agg.SUM)
        v_mean = s.Variable(2.0, synchronization=Sync.ON_READ, aggregation=Agg.MEAN)
        v_first = s.Variable(0.0, synchronization=Sync.ON_READ, aggregation=Agg.ONLY_FIRST_REPLICA)
        v_none = s.Variable(1.0, synchronization=Sync.ON_READ, aggregation=Agg.NONE)
    assert isinstance(v_sum, hd.SyncOnReadVariable) and not v_sum.trainable
    assert v_sum.numpy() == n * 1.0  # first read: N x the initial value

    def update():
        rid = float(replica_id())
        v_sum.assign_add(1.0)
        v_mean.assign(rid)
        v_first.assign(rid + 7)
        return v_sum.read_value()  # this replica's copy, no communication

    local = s.run(update)
    for x in s.experimental_local_results(local):
        assert x == 2.0
    assert v_sum.numpy() == 2.0 * n
    assert np.allclose(v_mean.numpy(), (n - 1) / 2)
    # TF's: this worker's first copy, written by its first local replica (no communication)
    first_local = min(float(r) for r in s.experimental_local_results(s.run(replica_id)))
    assert v_first.numpy() == first_local + 7.0
    v_sum.assign(6.0)  # cross-replica assign of SUM divides by N
    assert np.allclose(v_sum.numpy(), 6.0)
    assert all(np.allclose(c, 6.0 / n) for c in v_sum.values)
    with pytest.raises(ValueError, match="aggregation NONE"):
        v_none.numpy()
    check_variable_local_results(s, v_sum)
    if s.variables_per_replica:
        copies = s.experimental_local_results(v_sum)
        copies[-1].assign(np.array(1.0))  # that copy only, as assigning a TF component
        assert np.allclose([c.numpy() for c in copies], [6.0 / n] * (len(copies) - 1) + [1.0])
        workers = n // len(copies)  # each worker changed its last copy
        assert np.isclose(v_sum.numpy(), 6.0 + workers * (1.0 - 6.0 / n))
        # reduce sees the copies: SUM adds them (TF), as reading the variable does.
        assert np.isclose(s.reduce("sum", v_sum, axis=None), v_sum.numpy())


def check_reduce_of_variables(s):
    with s.scope():
        w = s.Variable(np.array([1.0, 2.0]), aggregation=Agg.MEAN)
    n = s.num_replicas_in_sync
    assert s.reduce("mean", w, axis=None).tolist() == [1.0, 2.0]
    assert s.reduce("sum", w, axis=0) == 3.0 * n  # one copy per replica (TF: 6 on 2 replicas)
    assert s.reduce("mean", w, axis=0) == 1.5
    if s.variables_per_replica:  # TF refuses to SUM a mirrored variable's identical copies
        with pytest.raises(ValueError, match="cannot SUM mirrored variable"):
            s.reduce("sum", w, axis=None)
        assert s.gather(w, axis=0).tolist() == [1.0, 2.0] * n
    elif s.extended.local_replicas > 1:  # central storage: a non-distributed value
        with pytest.raises(ValueError, match="cannot SUM the non-distributed value"):
            s.reduce("sum", w, axis=None)


def check_variable_errors(s):
    with s.scope():
        with pytest.raises(ValueError, match="synchronization NONE"):
            s.Variable(1.0, synchronization=Sync.NONE)
        with pytest.raises(ValueError, match="MEAN is not supported for integer"):
            s.Variable(np.arange(3), aggregation=Agg.MEAN)
        v = s.Variable(lambda: np.zeros((2, 2), np.float32), name="w")
    assert v.shape == (2, 2) and v.dtype == np.float32 and v.name == "w"
    assert (np.asarray(v) == 0).all() and (v + 1 == 1).all()


def check_distributed_dataset(s):
    n = s.num_replicas_in_sync
    global_batch = 2 * n + 1
    total = 3 * global_batch + n - 1
    ds = hd.data.Dataset.from_tensor_slices(np.arange(total)).batch(global_batch)
    seen, steps = [], 0
    for batch in s.experimental_distribute_dataset(ds):
        for part in s.experimental_local_results(batch):
            seen.extend(part.tolist())
        steps += 1
    assert steps == 4
    everything = s.gather(np.array(seen, dtype=np.int64), axis=0)
    assert sorted(everything.tolist()) == list(range(total))


def check_datasets_from_function_uneven(s):
    """TF's partial batches: replicas that ran out get empty batches until all have."""
    local, w = s.extended.local_replicas, s.extended.worker_index
    workers = s.num_replicas_in_sync // local
    counts = [local + 1 + i for i in range(workers)]  # batches per worker: uneven everywhere
    steps = max(-(-c // local) for c in counts)

    def dataset_fn(ctx):
        rows = 2 * counts[ctx.input_pipeline_id]
        x = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)
        return hd.data.Dataset.from_tensor_slices((x, np.arange(rows, dtype=np.int32))).batch(2)

    seen = 0
    for step, (x, y) in enumerate(s.distribute_datasets_from_function(dataset_fn)):
        xs, ys = s.experimental_local_results(x), s.experimental_local_results(y)
        assert len(xs) == len(ys) == local
        for i, (xi, yi) in enumerate(zip(xs, ys, strict=True)):
            index = step * local + i  # this worker's element for the replica
            if index < counts[w]:
                assert yi.tolist() == [2 * index, 2 * index + 1] and xi.shape == (2, 3)
                seen += 1
            else:  # an empty batch with the trailing shape and dtype
                assert xi.shape == (0, 3) and xi.dtype == np.float32
                assert yi.shape == (0,) and yi.dtype == np.int32
        # every worker takes part in every step's collectives
        assert s.reduce("sum", s.run(lambda b: np.array(b.shape[0]), args=(y,)), axis=None) >= 1
    assert step + 1 == steps and seen == counts[w]
