"""TF 2.21 / Keras 3 rules for losses, loss scaling, sync-on-read updates, cardinality, ClusterSpec.

Every expected number below was produced by TensorFlow 2.21 (tensorflow-cpu, Keras 3) on the same
inputs, with MirroredStrategy over two logical CPU devices where a strategy is involved;
tests/conformance runs the same cases against TensorFlow itself.
"""

import numpy as np
import pytest

import hpcdist as hd
from hpcdist import nn as keras

A = hd.VariableAggregation
S = hd.VariableSynchronization


@pytest.fixture
def two_replicas():
    return hd.MirroredStrategy(["/cpu:0", "/cpu:1"])


def f32(x):
    return np.asarray(x, np.float32)


def value(x):
    return np.asarray(x.numpy() if hasattr(x, "numpy") else x)


# -- sync-on-read variables in cross-replica context --------------------------------------------


@pytest.mark.parametrize("op", ["assign_add", "assign_sub"])
def test_sync_on_read_sum_cross_replica_add_raises(two_replicas, op):
    with two_replicas.scope():
        v = hd.Variable(1.0, synchronization=S.ON_READ, aggregation=A.SUM)
    with pytest.raises(ValueError, match=f"does not support `{op}` in cross-replica context"):
        getattr(v, op)(2.0)
    assert value(v.read_value()) == 2.0  # unchanged: two copies of 1.0 (TF reads 2.0 too)


def test_sync_on_read_mean_cross_replica_add_goes_to_every_copy(two_replicas):
    with two_replicas.scope():
        v = hd.Variable(1.0, synchronization=S.ON_READ, aggregation=A.MEAN)
    assert value(v.assign_add(2.0)) == 3.0
    assert [float(value(x)) for x in two_replicas.experimental_local_results(v)] == [3.0, 3.0]
    assert value(v.assign_sub(1.0)) == 2.0


def test_mirrored_sum_cross_replica_assign_add_adds_once(two_replicas):
    with two_replicas.scope():
        v = hd.Variable(1.0, aggregation=A.SUM)
    assert value(v.assign_add(2.0)) == 3.0


# -- compute_average_loss in cross-replica context ---------------------------------------------


def test_compute_average_loss_cross_replica_with_global_batch_size(two_replicas):
    losses = f32([1, 2, 3, 4])
    with two_replicas.scope():
        assert value(hd.nn.compute_average_loss(losses, global_batch_size=4)) == 2.5
        assert value(hd.nn.compute_average_loss(losses, global_batch_size=0)) == 0.0
        with pytest.raises(RuntimeError, match="cross replica context"):
            hd.nn.compute_average_loss(losses)
        with pytest.raises(ValueError, match="non-negative"):
            hd.nn.compute_average_loss(losses, global_batch_size=-4)


# -- Keras losses under a strategy: the mean is divided by the replicas in sync -----------------


def mse(reduction="sum_over_batch_size"):
    return keras.losses.MeanSquaredError(reduction=reduction)(f32([[1], [2]]), f32([[0], [0]]))


def test_keras_loss_inside_run_is_divided_by_replicas(two_replicas):
    results = two_replicas.experimental_local_results(two_replicas.run(mse))
    assert [float(value(r)) for r in results] == [1.25, 1.25]
    summed = two_replicas.run(lambda: mse("sum"))
    assert [float(value(r)) for r in two_replicas.experimental_local_results(summed)] == [5, 5]
    with two_replicas.scope():  # cross-replica inside the scope: Keras divides too
        assert value(mse()) == 1.25
    assert value(mse()) == 2.5


# -- probabilities are clipped before their logarithm ------------------------------------------


@pytest.mark.parametrize(
    ("loss", "y_true", "y_pred", "expected"),
    [
        (keras.losses.BinaryCrossentropy(), [[1.0], [0.0]], [[0.0], [1.0]], 16.03024),
        (keras.losses.CategoricalCrossentropy(), [[1.0, 0.0]], [[0.0, 1.0]], 16.118095),
        (keras.losses.SparseCategoricalCrossentropy(), [0], [[0.0, 1.0]], 16.118095),
    ],
)
def test_probability_losses_clip_so_the_gradient_is_finite(loss, y_true, y_pred, expected):
    p = hd.Variable(f32(y_pred))
    with hd.GradientTape() as tape:
        out = loss(f32(y_true), p)
    np.testing.assert_allclose(value(out), expected, rtol=1e-6)
    np.testing.assert_array_equal(value(tape.gradient(out, p)), np.zeros_like(f32(y_pred)))


def test_binary_crossentropy_gradient_inside_the_bounds():
    p = hd.Variable(f32([[0.3], [0.7]]))
    with hd.GradientTape() as tape:
        out = keras.losses.BinaryCrossentropy()(f32([[1], [0]]), p)
    np.testing.assert_allclose(value(out), 1.2039728, rtol=1e-6)
    np.testing.assert_allclose(value(tape.gradient(out, p)), [[-1.6666666], [1.6666666]], 1e-6)


# -- 1-D targets and predictions are one sample ------------------------------------------------


def test_mse_on_1d_inputs_is_one_sample():
    y, p = f32([1, 2, 3]), f32([0, 0, 0])
    per_sample = keras.losses.MeanSquaredError(reduction=None)(y, p)
    np.testing.assert_allclose(value(per_sample), 4.6666665)
    weighted = keras.losses.MeanSquaredError()(y, p, sample_weight=f32([1, 0, 0]))
    np.testing.assert_allclose(value(weighted), 1.5555555, rtol=1e-6)
    bce = keras.losses.BinaryCrossentropy(reduction=None)(f32([1, 0, 1]), f32([0.9, 0.2, 0.4]))
    np.testing.assert_allclose(value(bce), 0.41493163, rtol=1e-6)


def test_fit_on_1d_predictions_trains_on_the_batch_mean():
    hd.nn.set_random_seed(0)
    model = keras.Sequential([keras.layers.Dense(1), keras.layers.Reshape(())])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    x = np.linspace(-1, 1, 32, dtype=np.float32)[:, None]
    y = 3 * x[:, 0]
    history = model.fit(x, y, batch_size=8, epochs=20, verbose=0)
    assert history.history["loss"][-1] < 0.01 < history.history["loss"][0]


# -- Dataset cardinality and ClusterSpec -------------------------------------------------------


def test_filter_then_repeat_cardinality():
    filtered = hd.data.Dataset.range(10).filter(lambda x: x > 2)
    assert filtered.repeat().cardinality() == hd.data.INFINITE
    assert filtered.repeat(2).cardinality() == hd.data.UNKNOWN
    assert filtered.repeat().take(3).cardinality() == 3


def test_cluster_spec_empty_job_as_dict():
    spec = hd.cluster.ClusterSpec({"ps": [], "worker": {1: "w1:2222"}})
    assert spec.as_dict() == {"ps": {}, "worker": {1: "w1:2222"}}


def test_keras_3_mean_reductions():
    """TF 2.21 / Keras 3.15: "mean" is sum_over_batch_size; "mean_with_sample_weight" divides
    the weighted sum by the sum of the weights, and by nothing (0) when they sum to 0."""
    y, p = np.array([[1.0], [2.0], [3.0]]), np.zeros((3, 1))
    w = np.array([1.0, 0.0, 4.0])

    def value(reduction, weight=None):
        loss = hd.nn.losses.MeanSquaredError(reduction=reduction)
        return float(np.asarray(loss(y, p, sample_weight=weight).value))

    assert value("mean") == pytest.approx(14 / 3) and value("mean", w) == pytest.approx(37 / 3)
    assert value("mean_with_sample_weight") == pytest.approx(14 / 3)
    assert value("mean_with_sample_weight", w) == pytest.approx(37 / 5)
    assert value("mean_with_sample_weight", np.zeros(3)) == 0.0
    with pytest.raises(ValueError, match="reduction must be one of"):
        hd.nn.losses.MeanSquaredError(reduction="average")
