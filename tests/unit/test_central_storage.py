import numpy as np
import pytest

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


def test_variables_are_one_value_as_in_tf():
    s = make()
    with s.scope():
        v = s.Variable(np.array([1.0, 2.0]), aggregation=hd.VariableAggregation.MEAN)
    (only,) = s.experimental_local_results(v)  # TF's AggregatingVariable: the variable itself
    assert only is v
    assert s.reduce("mean", v, axis=None).tolist() == [1.0, 2.0]
    with pytest.raises(ValueError, match="cannot SUM the non-distributed value"):
        s.reduce("sum", v, axis=None)  # TF: ValueError, as for any non-distributed value
    assert s.reduce("sum", v, axis=0) == 6.0  # TF: 6


def test_shared_semantics():
    for case in (
        cases.check_reduce_semantics,
        cases.check_reduce_of_plain_values,
        cases.check_reduce_of_variables,
        cases.check_datasets_from_function_uneven,
        cases.check_mirrored_variable_table,
        cases.check_sync_on_read_table,
        cases.check_variable_errors,
        cases.check_distributed_dataset,
    ):
        case(make())
