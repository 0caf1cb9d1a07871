"""Strategy semantics checked the same way on local replicas (one process) and on MPI ranks.

Each function takes a strategy and asserts TF's semantics in terms of
``strategy.num_replicas_in_sync``; tests/unit runs them on MirroredStrategy with CPU replicas,
tests/mpi on MultiWorkerMirroredStrategy at 2, 3 and 4 ranks.
"""

import numpy as np
import pytest

import hpcdist as hd

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
        v_sum.assign_add(1.0)
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
    assert v_first.numpy() == 7.0
    v_sum.assign(6.0)  # cross-replica assign of SUM divides by N
    assert np.allclose(v_sum.numpy(), 6.0)
    assert all(np.allclose(c, 6.0 / n) for c in v_sum.values)
    with pytest.raises(ValueError, match="aggregation NONE"):
        v_none.numpy()


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
