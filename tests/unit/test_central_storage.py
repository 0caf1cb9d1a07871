import numpy as np

import hpcdist as hd
from tests import strategy_cases as cases


def make():
    return hd.CentralStorageStrategy(compute_devices=["cpu:0", "cpu:1"])


def test_one_copy_shared_by_the_replicas():
    s = make()
    assert s.num_replicas_in_sync == 2 and s.extended.parameter_device == "cpu:0"
    with s.scope():
        v = s.Variable(np.zeros(3), aggregation=hd.VariableAggregation.MEAN)
    assert v.values[0] is v.values[1]  # a single copy
    s.run(lambda: v.assign_add(np.full(3, hd.get_replica_context().replica_id_in_sync_group + 1.0)))
    assert np.allclose(v.numpy(), 1.5)  # mean of the deltas, applied once


def test_shared_semantics():
    for case in (
        cases.check_reduce_semantics,
        cases.check_mirrored_variable_table,
        cases.check_sync_on_read_table,
        cases.check_variable_errors,
        cases.check_distributed_dataset,
    ):
        case(make())
