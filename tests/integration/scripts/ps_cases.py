"""Parameter-server cases, run by tests/integration/test_parameter_server.py.

``HPCDIST_NUM_PS=2 mpiexec -n 5 python ps_cases.py OUT_DIR``: rank 0 coordinates, ranks 1-2 are
ps, ranks 3-4 workers. Every function named ``case_*`` runs on the coordinator against the one
strategy of the job; each prints ``CASE <name> PASS`` or ``CASE <name> FAIL <reason>``. The
coordinator tests port TF's cluster_coordinator_test (basic, nested fetch, error reporting and
cancellation).
"""

import contextlib
import sys
import threading
import time
from pathlib import Path

import numpy as np
from case_runner import run_cases

import hpcdist as hd
from hpcdist.errors import CancelledError, OutOfRangeError, WorkerPreemptedError
from hpcdist.strategies.ps import functions


class SettablePartitioner:
    """A partitioner whose answer a case can change (one strategy serves every case)."""

    def __init__(self):
        self.answer = None

    def __call__(self, shape, dtype):
        if self.answer is None:
            return [1] * len(shape)
        if callable(self.answer):
            return self.answer(shape, dtype)
        return self.answer


PARTITIONER = SettablePartitioner()
strategy = hd.ParameterServerStrategy(variable_partitioner=PARTITIONER)
coordinator = hd.ClusterCoordinator(strategy)
OUT = Path(sys.argv[1])


class FunctionError(ValueError):
    pass


def check(cond, message="check failed"):
    if not cond:
        raise AssertionError(message)


def raises(exc_type, fn, *args, match=None):
    try:
        fn(*args)
    except exc_type as exc:
        if match is not None and match not in str(exc):
            raise AssertionError(f"{exc_type.__name__} without {match!r}: {exc}") from exc
        return exc
    raise AssertionError(f"{exc_type.__name__} not raised")


def variable(value, **kwargs):
    with strategy.scope():
        return strategy.Variable(value, **kwargs)


def sharded(value, shards, **kwargs):
    PARTITIONER.answer = hd.partitioners.FixedShardsPartitioner(shards)
    try:
        return variable(value, **kwargs)
    finally:
        PARTITIONER.answer = None


# -- coordinator: TF's tests ----------------------------------------------------------------


def case_basic_five_schedules():
    v = variable(0, dtype=np.int32)

    def f():
        v.assign_add(2)
        return v.read_value()

    for _ in range(5):
        coordinator.schedule(f)
    coordinator.join()
    check(int(v.numpy()) == 10, f"after five schedules: {v.numpy()}")
    for _ in range(5):
        coordinator.schedule(f)
    coordinator.join()
    check(int(v.numpy()) == 20, f"after ten schedules: {v.numpy()}")


def case_nested_fetch():
    def f():
        return {"a": np.arange(3), "b": [np.float32(2.5), (np.ones((2, 2)), 7)]}

    result = coordinator.schedule(f)
    got = coordinator.fetch({"r": result, "plain": 1})
    check(got["plain"] == 1)
    check(np.array_equal(got["r"]["a"], np.arange(3)))
    check(got["r"]["b"][0] == np.float32(2.5) and got["r"]["b"][1][1] == 7)
    check(np.array_equal(result.get()["b"][1][0], np.ones((2, 2))))
    check(result.status is hd.RemoteValueStatus.READY)


def case_returns_tensors_and_variables_as_numpy():
    v = variable(np.array([1.0, 2.0], np.float32))
    rv = coordinator.schedule(lambda: (v, hd.nn.constant(3.0) * 2))
    value, tensor = rv.fetch()
    check(isinstance(value, np.ndarray) and np.array_equal(value, [1.0, 2.0]))
    check(float(tensor) == 6.0)


def case_remote_value_not_ready_then_ready():
    gate = variable(0, dtype=np.int32)

    def wait_for_gate():
        deadline = time.time() + 20
        while int(gate.numpy()) == 0 and time.time() < deadline:
            time.sleep(0.01)
        return 5

    rv = coordinator.schedule(wait_for_gate)
    time.sleep(0.2)
    check(rv.status is hd.RemoteValueStatus.NOT_READY, f"status {rv.status}")
    gate.assign(1)
    check(rv.fetch() == 5 and rv.status is hd.RemoteValueStatus.READY)


def _error_function():
    raise FunctionError("intentional failure in a scheduled function")


def _normal_function():
    return 1


def case_join_raises_error_then_clears():  # testJoinRaiseError, testErrorWillbeCleared
    for _ in range(3):
        coordinator.schedule(_normal_function)
    rv = coordinator.schedule(_error_function)
    err = raises(FunctionError, coordinator.join, match="intentional failure")
    check("raised on worker" in "".join(getattr(err, "__notes__", [])), "no worker note")
    check(rv.status is hd.RemoteValueStatus.ABORTED)
    raises(FunctionError, rv.fetch)
    coordinator.join()  # cleared: raised once
    for _ in range(3):
        coordinator.schedule(_normal_function)
    coordinator.schedule(_error_function)
    raises(FunctionError, coordinator.join)
    coordinator.join()


def case_schedule_raises_error():  # testScheduleRaiseError
    for _ in range(3):
        coordinator.schedule(_normal_function)
    coordinator.schedule(_error_function)
    deadline = time.time() + 30

    def keep_scheduling():
        while time.time() < deadline:
            coordinator.schedule(_normal_function)
            time.sleep(0.001)

    raises(FunctionError, keep_scheduling)
    coordinator.join()


def case_schedule_raises_with_multiple_failures():  # testScheduleRaiseErrorWithMultipleFailure
    for _ in range(3):
        coordinator.schedule(_normal_function)
    coordinator.schedule(_error_function)
    deadline = time.time() + 30

    def keep_failing():
        while time.time() < deadline:
            coordinator.schedule(_error_function)
            time.sleep(0.001)

    raises(FunctionError, keep_failing)
    with contextlib.suppress(FunctionError):  # another failure may be pending: raised once
        coordinator.join()
    coordinator.join()


def case_error_in_done():  # testErrorInDone
    coordinator.schedule(_error_function)
    deadline = time.time() + 30

    def poll():
        while not coordinator.done() and time.time() < deadline:
            time.sleep(0.01)

    raises(FunctionError, poll)
    check(coordinator.done())


def case_cancellation():  # testCancellation: queued closures are cancelled
    ran = variable(0, dtype=np.int64)

    def slow():
        time.sleep(0.05)
        ran.assign_add(1)

    gate = variable(0, dtype=np.int32)

    def blocker():
        deadline = time.time() + 20
        while int(gate.numpy()) == 0:
            if time.time() > deadline:
                raise AssertionError("the gate never opened")
            time.sleep(0.01)
        ran.assign_add(1)

    # Both workers held until everything is queued, so that the error comes back only after
    # (schedule may raise an earlier function's error as soon as it has arrived).
    blockers = [coordinator.schedule(blocker) for _ in range(2)]
    coordinator.schedule(_error_function)
    later = [coordinator.schedule(slow) for _ in range(40)]
    gate.assign(1)
    raises(FunctionError, coordinator.join)
    check(all(b.status is hd.RemoteValueStatus.READY for b in blockers), "blockers")
    ran.assign_add(-2)
    statuses = [rv.status for rv in later]
    check(all(s is not hd.RemoteValueStatus.NOT_READY for s in statuses), "unfinished")
    cancelled = 0
    for rv in later:
        if rv.status is hd.RemoteValueStatus.ABORTED:
            raises(CancelledError, rv.fetch)
            cancelled += 1
    check(cancelled > 0, "nothing was cancelled")
    check(int(ran.numpy()) == len(later) - cancelled, f"ran {ran.numpy()}, cancelled {cancelled}")
    for _ in range(3):
        coordinator.schedule(_normal_function)
    coordinator.join()


def case_preempted_closure_runs_again_elsewhere():
    attempts = variable(0, dtype=np.int64)
    first_worker = variable(-1, dtype=np.int64)

    def flaky():
        if int(attempts.assign_add(1)) == 1:
            first_worker.assign(strategy.extended.worker_index)
            raise WorkerPreemptedError("worker preempted (simulated)")
        return strategy.extended.worker_index

    rv = coordinator.schedule(flaky)
    final = rv.fetch()
    coordinator.join()
    check(int(attempts.numpy()) == 2, f"attempts {attempts.numpy()}")
    check(final != int(first_worker.numpy()), f"re-run on the same worker {final}")


def case_remote_value_argument_rejected():
    rv = coordinator.schedule(_normal_function)
    raises(TypeError, coordinator.schedule, lambda x: x, (rv,), match="RemoteValue")
    raises(TypeError, coordinator.schedule, lambda x: x, ([{"a": rv}],), match="fetch()")
    coordinator.join()


def case_sys_exit_in_function_is_an_error_not_a_lost_worker():
    def leave():
        sys.exit(3)

    raises(RuntimeError, coordinator.schedule(leave).fetch, match="sys.exit(3)")
    raises(RuntimeError, coordinator.join)
    check(coordinator.schedule(_normal_function).fetch() == 1)
    results = [coordinator.schedule(lambda: strategy.extended.worker_index) for _ in range(6)]
    coordinator.join()
    check({rv.fetch() for rv in results} <= {0, 1})


def case_unpicklable_function_rejected():
    lock = threading.Lock()
    raises(TypeError, coordinator.schedule, lambda: lock.locked(), match="cannot send function")
    raises(TypeError, coordinator.schedule, _normal_function, (lock,), match="the arguments")


def case_coordinator_needs_ps_strategy():
    raises(ValueError, hd.ClusterCoordinator, hd.get_strategy(), match="ParameterServerStrategy")
    raises(ValueError, hd.ClusterCoordinator, hd.OneDeviceStrategy("cpu:0"))
    check(hd.ClusterCoordinator(strategy) is coordinator, "not a singleton")


def case_variable_created_on_worker_rejected():
    def make():
        return strategy.Variable(1.0)

    raises(RuntimeError, coordinator.schedule(make).fetch, match="coordinator only")
    raises(RuntimeError, coordinator.join)


# -- per-worker datasets ----------------------------------------------------------------------


def case_per_worker_datasets_and_iterators():
    def dataset_fn(ctx):
        data = hd.data.Dataset.range(80).shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        return data.map(lambda i: (i, np.int64(ctx.input_pipeline_id))).batch(4)

    def per_worker_dataset_fn():
        return strategy.distribute_datasets_from_function(dataset_fn)

    per_worker = coordinator.create_per_worker_dataset(per_worker_dataset_fn)
    iterator = iter(per_worker)
    raises(TypeError, next, iterator)

    def step(it):
        values, worker = next(it)
        check(int(worker[0]) == strategy.extended.worker_index)
        return values

    # 10 batches per worker: 8 steps cannot exhaust one, however they are spread.
    results = [coordinator.schedule(step, args=(iterator,)) for _ in range(8)]
    coordinator.join()
    seen = np.concatenate([rv.fetch() for rv in results])
    check(len(seen) == 32 and len(set(seen.tolist())) == 32, f"duplicates: {sorted(seen)}")

    # 20 batches in all: 13 more steps exhaust a worker's data: OutOfRangeError, raised once
    # (by join, or by a schedule once the error has come back: a worker can run out early).
    def exhaust():
        for _ in range(13):
            coordinator.schedule(step, args=(iterator,))
        coordinator.join()

    raises(OutOfRangeError, exhaust)
    coordinator.join()


def case_dataset_fn_creating_variables_rejected():
    def dataset_fn():
        strategy.Variable(0.0)
        return hd.data.Dataset.range(3)

    raises(ValueError, coordinator.create_per_worker_dataset, dataset_fn, match="dataset_fn")
    coordinator.join()


def case_dataset_object_per_worker():
    per_worker = coordinator.create_per_worker_dataset(hd.data.Dataset.range(5).batch(5))
    it = iter(per_worker)
    rv = coordinator.schedule(lambda i: next(i), args=(it,))
    check(np.array_equal(rv.fetch(), np.arange(5)))


def case_per_worker_datasets_over_tfrecord_files():
    directory = Path(sys.argv[1]) / "ps_records"
    directory.mkdir(exist_ok=True)
    for k in range(4):  # file k holds 10 * k .. 10 * k + 4
        with hd.io.TFRecordWriter(str(directory / f"part-{k}.tfrecord")) as writer:
            for j in range(5):
                writer.write(str(10 * k + j).encode())
    pattern = str(directory / "part-*.tfrecord")

    def dataset_fn(ctx):
        names = hd.data.Dataset.list_files(pattern, shuffle=False)
        names = names.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        records = names.interleave(hd.data.TFRecordDataset, cycle_length=2)
        return records.map(lambda r: np.int64(int(r))).batch(1)

    per_worker = coordinator.create_per_worker_dataset(
        lambda: strategy.distribute_datasets_from_function(dataset_fn)
    )
    iterator = iter(per_worker)

    def step(it):
        return int(next(it)[0]), strategy.extended.worker_index

    # 10 records per worker (files w and w + 2): 8 steps cannot exhaust one.
    results = [coordinator.schedule(step, args=(iterator,)) for _ in range(8)]
    coordinator.join()
    seen = [rv.fetch() for rv in results]
    values = [v for v, _ in seen]
    check(len(set(values)) == 8, f"duplicates: {seen}")
    check(all((v // 10) % 2 == w for v, w in seen), f"a worker read another's file: {seen}")


# -- variables in RMA windows ----------------------------------------------------------------


def case_concurrent_accumulates_are_exact():
    counter = variable(np.zeros(1000, np.float64))
    ints = variable(np.zeros(7, np.int32))

    def add():
        for _ in range(10):
            counter.assign_add(np.ones(1000))
            ints.assign_add(np.arange(7, dtype=np.int32))

    for _ in range(60):
        coordinator.schedule(add)
    coordinator.join()
    check(np.all(counter.numpy() == 600.0), f"lost updates: {np.unique(counter.numpy())}")
    check(np.array_equal(ints.numpy(), 600 * np.arange(7)), f"ints {ints.numpy()}")


def case_round_robin_placement():
    vs = [variable(np.float32(i)) for i in range(4)]
    tasks = [int(v.device.split("task:")[1].split("/")[0]) for v in vs]
    check(tasks[0] != tasks[1] and tasks[0] == tasks[2] and tasks[1] == tasks[3], f"{tasks}")


def case_segments_grow_while_workers_run():
    # HPCDIST_PS_SEGMENT_BYTES=65536 in this job: these need new segments.
    big = variable(np.arange(50_000, dtype=np.float64))  # 400 kB: a segment of its own
    smalls = [variable(np.full(1000, i, np.float64)) for i in range(40)]

    def read_all():
        return float(big.numpy().sum()), [float(s.numpy()[0]) for s in smalls]

    total, firsts = coordinator.schedule(read_all).fetch()
    check(total == float(np.arange(50_000).sum()) and firsts == [float(i) for i in range(40)])
    # Both workers busy in functions while a new segment (a collective) is created: it waits
    # for them to finish, then everybody has it.
    busy = [coordinator.schedule(time.sleep, args=(0.3,)) for _ in range(2)]
    late = variable(np.arange(30_000, dtype=np.float64))
    check(all(rv.fetch() is None for rv in busy))
    got = coordinator.schedule(lambda: float(late.numpy().sum())).fetch()
    check(got == float(np.arange(30_000).sum()), f"late variable read {got}")


def case_assign_and_read_from_workers():
    v = variable(np.zeros((3, 4), np.float32))
    coordinator.schedule(lambda: v.assign(np.full((3, 4), 2.5))).fetch()
    check(np.all(v.numpy() == 2.5))
    got = coordinator.schedule(lambda: v.assign_sub(np.ones((3, 4)))).fetch()
    check(np.all(got == 1.5) and np.all(v.numpy() == 1.5))


def case_dtypes():
    for dtype in (np.int32, np.int64, np.float32, np.float64):
        v = variable(np.arange(5, dtype=dtype))
        coordinator.schedule(lambda v=v: v.assign_add(np.ones(5, v.dtype))).fetch()
        check(v.numpy().dtype == dtype and np.array_equal(v.numpy(), np.arange(5) + 1))
    raises(TypeError, variable, np.zeros(3, np.float16), match="MPI cannot add")


# -- sharded variables ----------------------------------------------------------------------


def case_sharded_layout_tf_rule():
    v = sharded(np.arange(20, dtype=np.float32).reshape(10, 2), 3)
    check(isinstance(v, hd.ShardedVariable))
    check([s.shape for s in v.variables] == [(4, 2), (3, 2), (3, 2)], f"{v}")
    check(v.shape == (10, 2) and np.array_equal(v.numpy(), np.arange(20).reshape(10, 2)))
    devices = [s.device for s in v.variables]
    check(devices[0] != devices[1] and devices[0] == devices[2], f"{devices}")
    capped = sharded(np.zeros((2, 3), np.float32), 5)  # FixedShards: min(num_shards, rows)
    check(len(capped.variables) == 2)
    scalar = sharded(np.float32(1.0), 4)
    check(isinstance(scalar, hd.strategies.PSVariable), "a scalar cannot be sharded")


def case_sharded_updates_and_sparse_ops():
    base = np.arange(30, dtype=np.float64).reshape(10, 3)
    v = sharded(base, 3)
    v.assign_add(np.ones((10, 3)))
    check(np.array_equal(v.numpy(), base + 1))
    ids = np.array([[9, 0], [4, 4]])
    check(np.array_equal(v.sparse_read(ids), (base + 1)[ids]))

    def scatter():
        v.scatter_add([3, 3, 7, 0], np.ones((4, 3)))

    for _ in range(5):
        coordinator.schedule(scatter)
    coordinator.join()
    expect = base + 1
    np.add.at(expect, [3, 3, 7, 0] * 5, np.ones((20, 3)))
    check(np.array_equal(v.numpy(), expect), "scatter_add")
    v.scatter_update([1, 8], np.full((2, 3), -1.0))
    expect[[1, 8]] = -1.0
    check(np.array_equal(v.numpy(), expect), "scatter_update")
    v.assign(np.zeros((10, 3)))
    check(not v.numpy().any())
    raises(ValueError, v.sparse_read, [10], match="[0, 10)")
    raises(TypeError, v.scatter_add, [0.5], np.ones((1, 3)))


def case_partitioner_nonsense_rejected():
    for answer in ([2, 2], [0, 1], [1], "ab", [2.5, 1], [11, 1]):
        PARTITIONER.answer = answer
        try:
            raises(ValueError, variable, np.zeros((10, 4), np.float32), match="partitioner")
        finally:
            PARTITIONER.answer = None


def case_embedding_lookup_sparse_gradient_and_update():
    table_value = np.random.default_rng(0).standard_normal((12, 4)).astype(np.float32)
    table = sharded(table_value, 3)
    ids = np.array([[1, 5], [5, 11]])
    with hd.nn.GradientTape() as tape:
        rows = hd.nn.embedding_lookup(table, ids)
        loss = hd.nn.ops.reduce_sum(rows * rows)
    check(np.allclose(rows.numpy(), table_value[ids]))
    grad = tape.gradient(loss, table)
    check(isinstance(grad, hd.nn.IndexedSlices), f"dense gradient {type(grad)}")
    check(sorted(set(grad.indices.tolist())) == [1, 5, 11], f"rows {grad.indices}")
    dense = np.zeros_like(table_value)
    np.add.at(dense, ids.reshape(-1), 2 * table_value[ids].reshape(-1, 4))
    check(np.allclose(grad.numpy(), dense))
    with strategy.scope():
        opt = hd.nn.optimizers.SGD(0.1, momentum=0.9)
        opt.build([table])

    def step():
        with hd.nn.GradientTape() as tape:
            loss = hd.nn.ops.reduce_sum(hd.nn.embedding_lookup(table, ids) ** 2)
        opt.apply_gradients([(tape.gradient(loss, table), table)])

    coordinator.schedule(step).fetch()
    velocity = -0.1 * dense
    expect = table_value + velocity
    check(np.allclose(table.numpy(), expect, atol=1e-6), "sparse SGD update")
    check(np.allclose(opt.slot(table, "momentum").numpy(), velocity, atol=1e-6), "slot rows")
    check(int(opt.iterations.numpy()) == 1)


class _EmbeddingRegressor(hd.nn.Model):
    def __init__(self):
        super().__init__()
        self.embedding = hd.nn.layers.Embedding(8192, 64)
        self.hidden = hd.nn.layers.Dense(64, activation="relu")
        self.out = hd.nn.layers.Dense(1)

    def call(self, inputs, training=None):
        return self.out(self.hidden(hd.nn.ops.reduce_mean(self.embedding(inputs), axis=1)))


def case_async_adam_training_stays_finite():
    # Two workers update the same rows concurrently. Adam once read its second moment twice per
    # update: a concurrent write between the two reads made it negative and the weights NaN
    # within 20 steps of this model. Update rules now read each slot once.
    rng = np.random.default_rng(0)
    x = rng.integers(0, 4096, (4096, 8))
    y = rng.standard_normal(8192)[x].mean(axis=1, keepdims=True).astype(np.float32)
    PARTITIONER.answer = lambda shape, dtype: (
        [2 if shape[0] >= 1000 else 1] + [1] * (len(shape) - 1)
    )
    try:
        with strategy.scope():
            model = _EmbeddingRegressor()
            model.compile(optimizer=hd.nn.optimizers.Adam(0.01), loss="mse")
            model.build((None, 8))
    finally:
        PARTITIONER.answer = None
    check(isinstance(model.embedding.embeddings, hd.ShardedVariable))
    history = model.fit(x, y, batch_size=128, epochs=2, steps_per_epoch=60, verbose=0)
    check(all(np.isfinite(history.history["loss"])), f"loss {history.history['loss']}")
    for w in model.trainable_variables:
        check(np.isfinite(w.numpy()).all(), f"non-finite {w.name}")
    check(history.history["loss"][-1] < history.history["loss"][0], f"{history.history}")


# -- training and checkpoints ------------------------------------------------------------------


def _regression_data():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((512, 6)).astype(np.float32)
    y = (x @ rng.standard_normal((6, 1))).astype(np.float32)
    return x, y


def case_fit_requires_steps_per_epoch_and_trains():
    x, y = _regression_data()
    with strategy.scope():
        model = hd.nn.Sequential([hd.nn.layers.Dense(1, input_shape=(6,))])
        model.compile(optimizer=hd.nn.optimizers.SGD(0.05), loss="mse")
    raises(ValueError, model.fit, x, y, match="steps_per_epoch")
    history = model.fit(x, y, batch_size=32, epochs=4, steps_per_epoch=20, verbose=0)
    losses = history.history["loss"]
    check(losses[-1] < 0.1 * losses[0], f"loss did not fall: {losses}")
    local = model.evaluate(x, y, batch_size=128)
    check(float(local) < 0.1 * losses[0], f"evaluate on the coordinator: {local}")
    data = hd.data.Dataset.from_tensor_slices((x, y)).batch(32)  # a dataset: sharded per worker
    more = model.fit(data, epochs=1, steps_per_epoch=10, verbose=0).history["loss"]
    check(more[0] < 0.1 * losses[0], f"fit on a dataset: {more}")
    raises(ValueError, lambda: model.fit(data, y, steps_per_epoch=2), match="y must be None")


def case_fit_with_sample_weights_learns_only_the_weighted_examples():
    # Half the targets are noise with weight 0: a model trained with the weights fits the other
    # half; arrays with sample_weight and a dataset of (x, y, w) both reach the workers.
    x, y = _regression_data()
    noisy = np.arange(len(x)) % 2 == 1
    y_mixed = np.where(noisy[:, None], 50.0 * np.sign(x[:, :1]), y).astype(np.float32)
    w = np.where(noisy, 0.0, 1.0).astype(np.float32)
    for source in ("arrays", "dataset"):
        with strategy.scope():
            model = hd.nn.Sequential([hd.nn.layers.Dense(1, input_shape=(6,))])
            model.compile(optimizer=hd.nn.optimizers.SGD(0.05), loss="mse")
        start = float(model.evaluate(x[~noisy], y[~noisy], batch_size=128))
        if source == "arrays":
            model.fit(
                x, y_mixed, sample_weight=w, batch_size=32, epochs=3, steps_per_epoch=30, verbose=0
            )
        else:
            data = hd.data.Dataset.from_tensor_slices((x, y_mixed, w)).batch(32)
            model.fit(data, epochs=3, steps_per_epoch=30, verbose=0)
        clean = float(model.evaluate(x[~noisy], y[~noisy], batch_size=128))
        check(clean < 0.05 * start, f"{source}: weighted examples not learned: {start} -> {clean}")
    raises(
        ValueError,
        lambda: model.fit(data, sample_weight=w, steps_per_epoch=2, verbose=0),
        match="sample_weight must be None",
    )


def case_checkpoint_restores_into_other_shard_count():
    value = np.arange(36, dtype=np.float32).reshape(12, 3)
    three = sharded(value, 3)
    plain = variable(np.float32(4.0))
    ckpt = hd.Checkpoint(table=three, scalar=plain)
    path = ckpt.save(str(OUT / "ps"))
    two = sharded(np.zeros((12, 3), np.float32), 2)
    other_scalar = variable(np.float32(0.0))
    hd.Checkpoint(table=two, scalar=other_scalar).restore(path)
    check(np.array_equal(two.numpy(), value) and float(other_scalar.numpy()) == 4.0)
    one = variable(np.zeros((12, 3), np.float32))
    hd.Checkpoint(table=one, scalar=other_scalar).restore(path)
    check(np.array_equal(one.numpy(), value))
    (OUT / "ps_checkpoint_path").write_text(path)


def constant(value):
    """A new function object returning ``value``."""
    return lambda: value


def case_function_cache_evicts_and_resends():
    """Workers keep 2 functions: 3 live ones in turn are re-sent; dead ones never run stale."""
    saved = functions.WORKER_CACHE_FUNCTIONS
    functions.WORKER_CACHE_FUNCTIONS = 2
    try:
        makers = [constant(k) for k in range(3)]  # three live functions
        values = [(k, coordinator.schedule(makers[k])) for _ in range(10) for k in range(3)]
        # Fresh lambdas, dropped at once: their ids are reused, their keys never are.
        values += [(i, coordinator.schedule(constant(i))) for i in range(100, 160)]
        coordinator.join()
        for expected, value in values:
            check(value.fetch() == expected, f"expected {expected}, got {value.fetch()}")
    finally:
        functions.WORKER_CACHE_FUNCTIONS = saved


run_cases(globals(), coordinator)
