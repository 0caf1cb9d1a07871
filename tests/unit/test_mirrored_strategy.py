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
