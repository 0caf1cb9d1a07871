"""Context rules and single-replica strategies (TF's strategy_common_test, one process)."""

import numpy as np
import pytest

import hpcdist as hd
from hpcdist.cluster.devices import visible_gpu_count


def test_four_state_rule():
    default = hd.get_strategy()
    assert isinstance(default, hd.DefaultStrategy)
    assert hd.get_strategy() is default  # singleton
    assert not hd.has_strategy()
    assert not hd.in_cross_replica_context()
    assert hd.get_replica_context() is default.default_replica_context

    s = hd.OneDeviceStrategy("cpu:0")
    with s.scope():
        assert hd.get_strategy() is s and hd.has_strategy()
        assert hd.in_cross_replica_context()
        assert hd.get_replica_context() is None

        def replica_fn():
            ctx = hd.get_replica_context()
            assert ctx is not None and not hd.in_cross_replica_context()
            assert ctx.replica_id_in_sync_group == 0 and ctx.num_replicas_in_sync == 1

            def merge_fn(strategy, x):
                assert strategy is s
                assert hd.in_cross_replica_context() and hd.get_replica_context() is None
                return x * 2

            return ctx.merge_call(merge_fn, args=(21,))

        assert s.run(replica_fn) == 42
        with s.scope():  # re-entering the same scope is fine
            assert hd.get_strategy() is s
    assert not hd.has_strategy()


def test_mixing_scopes_raises():
    a, b = hd.OneDeviceStrategy("cpu:0"), hd.OneDeviceStrategy("cpu:0")
    with a.scope(), pytest.raises(RuntimeError, match="Mixing different strategies"), b.scope():
        pass


def test_experimental_set_strategy():
    s = hd.OneDeviceStrategy("cpu:0")
    hd.experimental_set_strategy(s)
    try:
        assert hd.get_strategy() is s and hd.in_cross_replica_context()
    finally:
        hd.experimental_set_strategy(None)
    assert not hd.has_strategy()


def test_run_args_and_reduce_single_replica():
    s = hd.OneDeviceStrategy("cpu:0")
    with pytest.raises(ValueError, match="tuple or list"):
        s.run(lambda x: x, args=np.ones(3))
    out = s.run(lambda x, y=0: x + y, args=(np.arange(3),), kwargs={"y": 1})
    assert out.tolist() == [1, 2, 3]
    assert s.experimental_local_results(out)[0] is out
    x = np.arange(6.0).reshape(3, 2)
    assert s.reduce("sum", x, axis=None).tolist() == x.tolist()
    assert s.reduce("sum", x, axis=0).tolist() == [6.0, 9.0]
    assert s.reduce("mean", x, axis=0).tolist() == [2.0, 3.0]
    assert s.reduce("max", x, axis=1).tolist() == [1.0, 3.0, 5.0]
    assert s.gather(x, axis=0).shape == (3, 2)
    with pytest.raises(ValueError, match="SUM, MEAN, MIN and MAX"):
        s.reduce("prod", x, axis=None)
    with pytest.raises(ValueError, match="out of range"):
        s.reduce("sum", x, axis=2)
    with pytest.raises(ValueError, match="cpu:0"):
        hd.OneDeviceStrategy("tpu")


@pytest.mark.parametrize(
    "make", [hd.get_strategy, lambda: hd.OneDeviceStrategy("cpu:0")], ids=["default", "one-device"]
)
def test_single_copy_strategies_follow_tf(make):
    # Values measured with TF 2.21: one replica, a plain value is returned by SUM and MEAN.
    s = make()
    x = np.array([1, 2], np.int32)
    for op in ("sum", "mean", "max"):
        out = s.reduce(op, x, axis=None)
        assert out.tolist() == [1, 2] and out.dtype == np.int32
    assert s.reduce("sum", x, axis=0) == 3 and s.reduce("mean", x, axis=0) == 1.5
    assert s.reduce("sum", 3.0, axis=None) == 3.0
    with s.scope():
        v = s.Variable([1.0, 2.0])
        r = s.Variable(1.0, synchronization=hd.VariableSynchronization.ON_READ)
    for var in (v, r):
        (only,) = s.experimental_local_results(var)  # a plain variable: itself
        assert only is var
    assert s.reduce("sum", v, axis=None).tolist() == [1.0, 2.0]
    assert s.reduce("mean", v, axis=0) == 1.5
    assert s.gather(v, axis=0).tolist() == [1.0, 2.0]
    batches = s.distribute_datasets_from_function(lambda ctx: hd.data.Dataset.range(5).batch(2))
    assert [b.tolist() for b in batches] == [[0, 1], [2, 3], [4]]


def test_distribute_dataset_single_replica():
    s = hd.OneDeviceStrategy("cpu:0")
    ds = hd.data.Dataset.range(7).batch(3)
    assert [b.tolist() for b in s.experimental_distribute_dataset(ds)] == [
        [0, 1, 2],
        [3, 4, 5],
        [6],
    ]
    it = iter(s.experimental_distribute_dataset(ds))
    for _ in range(3):
        assert it.get_next_as_optional().has_value()
    opt = it.get_next_as_optional()
    assert not opt.has_value()
    with pytest.raises(ValueError, match="exhausted"):
        opt.get_value()
    with pytest.raises(StopIteration):
        next(it)

    def dataset_fn(ctx):
        assert ctx.num_input_pipelines == 1 and ctx.num_replicas_in_sync == 1
        return hd.data.Dataset.range(4).batch(ctx.get_per_replica_batch_size(2))

    assert [b.tolist() for b in s.distribute_datasets_from_function(dataset_fn)] == [[0, 1], [2, 3]]
    values = s.experimental_distribute_values_from_function(lambda c: c.replica_id_in_sync_group)
    assert values == 0


def test_gpu_device_that_does_not_exist_is_rejected_at_construction():
    count = visible_gpu_count()
    for missing in sorted({count, max(7, count)}):
        device = f"gpu:{missing}"
        with pytest.raises(ValueError, match=rf"'{device}'.* sees {count} GPU\(s\)"):
            hd.OneDeviceStrategy(device)
        with pytest.raises(ValueError, match=rf"'/GPU:{missing}'.* sees {count} GPU\(s\)"):
            hd.OneDeviceStrategy(f"/GPU:{missing}")
    if count == 0:
        with pytest.raises(ValueError, match=r"valid: none; CuPy is not installed|valid: none"):
            hd.OneDeviceStrategy("gpu:0")
    else:
        assert hd.OneDeviceStrategy("gpu:0").extended.worker_devices == ("gpu:0",)
