import numpy as np
import pytest

import hpcdist as hd


def test_compute_average_loss_divides_by_the_global_batch():
    s = hd.MirroredStrategy(["cpu:0", "cpu:1"])
    losses = s.run(lambda: hd.nn.compute_average_loss(np.array([1.0, 2.0, 3.0])))
    assert all(np.isclose(x, 6.0 / 6) for x in losses.values)
    weighted = s.run(
        lambda: hd.nn.compute_average_loss(np.array([1.0, 2.0]), sample_weight=np.array([2.0, 0.0]))
    )
    assert np.isclose(weighted.values[0], 2.0 / 4)
    explicit = s.run(lambda: hd.nn.compute_average_loss(np.ones(4), global_batch_size=10))
    assert np.isclose(explicit.values[1], 0.4)
    reg = s.run(lambda: hd.nn.scale_regularization_loss([1.0, 3.0]))
    assert np.isclose(reg.values[0], 2.0)
    # Summed over replicas, the scaled losses give the global mean.
    total = s.reduce(
        "sum", s.run(lambda: hd.nn.compute_average_loss(np.array([1.0, 3.0]))), axis=None
    )
    assert np.isclose(total, 2.0)


def test_default_strategy_and_errors():
    assert np.isclose(hd.nn.compute_average_loss(np.array([2.0, 4.0])), 3.0)
    with pytest.raises(ValueError, match="at least rank 1"):
        hd.nn.compute_average_loss(np.float32(1.0))
    with pytest.raises(ValueError, match="integer"):
        hd.nn.compute_average_loss(np.ones(2), global_batch_size=2.5)
    s = hd.OneDeviceStrategy("cpu:0")
    with s.scope(), pytest.raises(RuntimeError, match="cross replica context"):
        hd.nn.compute_average_loss(np.ones(2))
    with s.scope(), pytest.raises(RuntimeError, match="cross replica context"):
        hd.nn.scale_regularization_loss(np.ones(2))
