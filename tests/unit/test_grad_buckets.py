"""The tape's ``on_final`` hook, the bucket plan and where the overlapped all-reduce applies.

The overlapped all-reduce itself runs on several ranks in tests/mpi/test_overlap.py.
"""

import numpy as np
import pytest

import hpcdist as hd
from hpcdist.comm import Communicator
from hpcdist.core.autodiff import GradientTape, variable_accessed
from hpcdist.core.variables import Variable
from hpcdist.settings import Settings
from hpcdist.strategies.grad_buckets import (
    FIRST_BUCKET_BYTES,
    OverlappedReduction,
    overlapped_reduction,
    plan_buckets,
)

ops = hd.nn.ops


def test_plan_walks_from_the_last_variable_with_a_small_first_bucket():
    # kernel/bias of three layers: 4 MB, 4 kB, 4 MB, 4 kB, 40 kB, 40 B
    sizes = [4 << 20, 4096, 4 << 20, 4096, 40960, 40]
    assert plan_buckets(sizes, 4 << 20) == [[5, 4, 3, 2], [1, 0]]
    # the first bucket closes at FIRST_BUCKET_BYTES, the others at bucket_bytes
    assert plan_buckets([FIRST_BUCKET_BYTES, 8, 8, 8], 16) == [[3, 2], [1, 0]]
    assert plan_buckets([100] * 4, 1 << 30) == [[3, 2, 1, 0]]
    assert plan_buckets([100] * 3, 0) == [[2], [1], [0]]  # one bucket per variable
    assert plan_buckets([], 100) == []


def _mlp_variables():
    rng = np.random.default_rng(0)
    shapes = [(5, 4), (4,), (4, 3), (3,), (3, 2), (2,)]
    return [
        Variable(rng.standard_normal(s).astype(np.float32), name=f"v{i}")
        for i, s in enumerate(shapes)
    ]


def _mlp_loss(variables, x):
    h = x
    for i in range(0, len(variables), 2):
        h = ops.add(ops.matmul(h, variables[i]), variables[i + 1])
        if i + 2 < len(variables):
            h = ops.tanh(h)
    return ops.reduce_sum(ops.multiply(h, h))


def test_on_final_reports_each_gradient_once_last_layer_first_with_the_returned_array():
    variables = _mlp_variables()
    x = np.random.default_rng(1).standard_normal((7, 5)).astype(np.float32)
    with GradientTape(persistent=True) as tape:
        loss = _mlp_loss(variables, x)
    reported = []
    grads = tape.gradient(loss, variables, on_final=lambda i, g: reported.append((i, g)))
    plain = tape.gradient(loss, variables)
    # Each layer's bias and kernel are final before any earlier layer's.
    order = [i for i, _ in reported]
    assert sorted(order) == list(range(6))
    assert order.index(5) < order.index(3) < order.index(1)
    assert max(order.index(4), order.index(5)) < min(order.index(2), order.index(3))
    assert max(order.index(2), order.index(3)) < min(order.index(0), order.index(1))
    for i, g in reported:
        assert g is grads[i]  # the very array returned, never changed after the report
        assert np.array_equal(g, plain[i])


def test_on_final_waits_for_the_last_read_and_reports_repeated_sources_twice():
    w = Variable(np.array([2.0, 3.0]))
    u = Variable(np.array([1.0, -1.0]))
    with GradientTape() as tape:
        first = ops.multiply(w, u)  # read 1 of w
        loss = ops.reduce_sum(ops.multiply(ops.tanh(first), w))  # read 2 of w
    reported = {}
    grads = tape.gradient(loss, [w, u, w], on_final=lambda i, g: reported.setdefault(i, g))
    assert sorted(reported) == [0, 1, 2]
    t = np.tanh(np.array([2.0, -3.0]))
    expected_w = t + (1 - t**2) * np.array([1.0, -1.0]) * np.array([2.0, 3.0])
    np.testing.assert_allclose(reported[0], expected_w)  # both reads summed before the report
    assert reported[0] is grads[0] and reported[2] is grads[2]


def test_on_final_skips_sparse_and_unconnected_gradients():
    table = Variable(np.arange(12.0).reshape(6, 2))
    dense = Variable(np.array([0.5, 2.0]))
    unused = Variable(np.ones(3))
    ids = np.array([4, 1])
    with GradientTape() as tape:
        rows = variable_accessed(table, table.numpy()[ids], ids)  # a sparse read
        loss = ops.reduce_sum(ops.multiply(rows, dense))
    reported = []
    grads = tape.gradient(loss, [table, dense, unused], on_final=lambda i, g: reported.append(i))
    assert reported == [1]
    assert isinstance(grads[0], hd.nn.IndexedSlices) and grads[2] is None
    assert np.array_equal(grads[0].numpy()[[4, 1]], [[0.5, 2.0], [0.5, 2.0]])


def test_overlap_applies_only_to_one_replica_per_process_across_processes():
    variables = _mlp_variables()
    on = Settings(overlap_gradients=True)
    assert overlapped_reduction(hd.get_strategy(), variables, on) is None
    assert overlapped_reduction(hd.OneDeviceStrategy("cpu:0"), variables, on) is None
    mirrored = hd.MirroredStrategy(["cpu:0", "cpu:1"])  # local replicas keep the fused path
    assert overlapped_reduction(mirrored, variables, on) is None
    central = hd.CentralStorageStrategy(["cpu:0", "cpu:1"])
    assert overlapped_reduction(central, variables, on) is None
    single = hd.MultiWorkerMirroredStrategy()  # one rank: no communicator, nothing to reduce
    assert overlapped_reduction(single, variables, on) is None


def test_settings_switch_and_bucket_size():
    assert Settings().overlap_gradients is False
    assert Settings.from_env({"HPCDIST_OVERLAP_GRADIENTS": "on"}).overlap_gradients is True
    assert Settings().overlap_bucket_bytes == 4 << 20
    env = {"HPCDIST_OVERLAP_BUCKET_BYTES": "65536"}
    assert Settings.from_env(env).overlap_bucket_bytes == 65536
    with pytest.raises(ValueError, match="HPCDIST_OVERLAP_BUCKET_BYTES='-1'"):
        Settings.from_env({"HPCDIST_OVERLAP_BUCKET_BYTES": "-1"})
    with pytest.raises(ValueError, match="HPCDIST_OVERLAP_GRADIENTS='sometimes'"):
        Settings.from_env({"HPCDIST_OVERLAP_GRADIENTS": "sometimes"})


def test_reduction_starts_buckets_in_order_and_finish_fills_in_the_rest():
    comm = Communicator()  # one rank: the sums are the values themselves
    try:
        reduction = OverlappedReduction(comm, [[2], [1, 0]], 3)
        grads = [np.full(3, 1.0), None, np.full(2, 3.0, np.float32)]
        reduction.ready(0, grads[0])  # bucket 1 is complete, but bucket 0 has not started
        assert reduction.buckets_started == 0
        reduction.ready(2, grads[2])
        assert reduction.buckets_started == 1
        out = reduction.finish(grads)  # variable 1 had no gradient: bucket 1 starts here
        assert reduction.buckets_started == 2
        assert out[1] is None
        assert np.array_equal(out[0], grads[0]) and out[0] is not grads[0]
        assert out[2].dtype == np.float32 and np.array_equal(out[2], grads[2])
        with pytest.raises(ValueError, match=r"one gradient per variable \(3\), got 2 on rank 0"):
            OverlappedReduction(comm, [[2], [1, 0]], 3).finish(grads[:2])
    finally:
        comm.close()
