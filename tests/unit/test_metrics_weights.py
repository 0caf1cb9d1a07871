"""Metrics with per-sample weights on 2-D (and 3-D) inputs, against TF 2.21 (Keras 3.15).

Keras reduces each example's values to one per-sample value (mean over the non-batch axes),
multiplies by the example's weight and counts the weights; every expected number below is
what TF 2.21 returns for the same call.
"""

import numpy as np
import pytest

import hpcdist as hd
from hpcdist.nn import metrics

Y_TRUE = np.array([[1, 2, 3], [4, 5, 6]])
Y_PRED = np.array([[1, 2, 0], [4, 5, 6]])


def result(metric, *calls):
    for args, weight in calls:
        metric.update_state(*args, sample_weight=weight)
    return metric.result()


@pytest.mark.parametrize(
    ("weight", "expected"),
    [
        ([1, 3], 0.9166667),  # TF 2.21 gives 0.9167 (the example)
        ([[1], [3]], 0.9166667),  # TF 2.21 gives 0.9167
        ([[1, 0, 2], [3, 1, 1]], 0.75),  # TF 2.21 gives 0.7500
        (None, 0.8333333),  # TF 2.21 gives 0.8333
    ],
)
def test_accuracy_weights_broadcast_per_sample(weight, expected):
    assert result(metrics.Accuracy(), ((Y_TRUE, Y_PRED), weight)) == pytest.approx(expected)


def test_accuracy_state_counts_samples():
    # TF 2.21 keeps total 3.6667 and count 4 (the sum of the per-sample weights).
    m = metrics.Accuracy()
    m.update_state(Y_TRUE, Y_PRED, sample_weight=[1, 3])
    assert float(m.total.numpy()) == pytest.approx(11 / 3)
    assert float(m.count.numpy()) == 4.0


def test_scalar_weight_weighs_the_whole_batch():
    # TF 2.21: Accuracy with sample_weight=2 then ([1], [1], 1) gives 0.8889;
    # Mean([1, 2, 3], 2) then Mean([5], 1) gives 3.0; Sum([1, 2, 3], 2) gives 12.
    two = ((Y_TRUE, Y_PRED), 2.0), (([1], [1]), 1.0)
    assert result(metrics.Accuracy(), *two) == pytest.approx(0.8888889)
    assert result(metrics.Mean(), (([1.0, 2, 3],), 2), (([5.0],), 1)) == pytest.approx(3.0)
    assert result(metrics.Sum(), (([1.0, 2, 3],), 2)) == pytest.approx(12.0)


def test_mean_and_sum_on_2d_values():
    rows = np.array([[1.0, 2, 3], [4, 5, 6]])
    # TF 2.21: Mean(rows, [1, 3]) = 4.25, Sum(rows, [1, 3]) = 51.
    assert result(metrics.Mean(), ((rows,), [1, 3])) == pytest.approx(4.25)
    assert result(metrics.Sum(), ((rows,), [1, 3])) == pytest.approx(51.0)
    # TF 2.21: Mean([[1, 2, 3]]) then Mean([[5, 7]]) = 4.0 (the mean of the per-row means).
    assert result(metrics.Mean(), (([[1.0, 2, 3]],), None), (([[5.0, 7]],), None)) == 4.0


def test_other_metrics_with_per_sample_weights():
    w = [1, 3]
    # TF 2.21: BinaryAccuracy 2-D 0.9167, 3-D 0.8333; CategoricalAccuracy 0.25;
    # SparseCategoricalAccuracy 0.25 (labels [[1], [0]] or weights [[1], [3]]); MSE 1.625.
    binary_2d = (np.array([[1, 0, 1], [1, 1, 0]]), np.array([[0.9, 0.1, 0.2], [0.9, 0.9, 0.1]]))
    assert result(metrics.BinaryAccuracy(), (binary_2d, w)) == pytest.approx(0.9166667)
    binary_3d = (
        np.array([[[1, 0], [1, 1], [0, 0]], [[1, 1], [0, 0], [1, 0]]]),
        np.array([[[0.9, 0.1], [0.9, 0.2], [0.1, 0.1]], [[0.9, 0.9], [0.1, 0.1], [0.1, 0.1]]]),
    )
    assert result(metrics.BinaryAccuracy(), (binary_3d, w)) == pytest.approx(0.8333333)
    probs = np.array([[0.1, 0.8, 0.1], [0.1, 0.8, 0.1]])
    one_hot = np.array([[0, 1, 0], [1, 0, 0]])
    assert result(metrics.CategoricalAccuracy(), ((one_hot, probs), w)) == pytest.approx(0.25)
    labels = np.array([[1], [0]])
    assert result(metrics.SparseCategoricalAccuracy(), ((labels, probs), w)) == 0.25
    labels_1d = np.array([1, 0])
    weights_21 = [[1], [3]]
    assert result(metrics.SparseCategoricalAccuracy(), ((labels_1d, probs), weights_21)) == 0.25
    mse = (np.array([[0.0, 1], [1, 0]]), np.array([[1.0, 1], [1, 2]]))
    assert result(metrics.MeanSquaredError(), (mse, w)) == pytest.approx(1.625)


def test_weights_that_do_not_fit_are_rejected():
    # TF 2.21 raises InvalidArgumentError for 3 weights on 2 examples.
    with pytest.raises(ValueError, match=r"sample_weight of shape \(3,\)"):
        metrics.Accuracy().update_state(Y_TRUE, Y_PRED, sample_weight=[1, 3, 4])


def test_weighted_metrics_and_evaluate_sample_weight_with_tfs_numbers():
    """Keras 3.15 (TF 2.21) on the same model, data and weights gives these numbers."""
    x = np.arange(12, dtype="float32").reshape(6, 2) / 10
    y = np.array([[0], [1], [1], [0], [1], [0]], dtype="float32")
    w = np.array([1, 2, 0, 1, 3, 1], dtype="float32")

    def model(**compile_args):
        m = hd.nn.Sequential(
            [
                hd.nn.Input((2,)),
                hd.nn.layers.Dense(1, activation="sigmoid", kernel_initializer="ones"),
            ]
        )
        m.compile("sgd", "binary_crossentropy", **compile_args)
        return m

    both = model(
        metrics=["accuracy", "mse"],
        weighted_metrics=["accuracy", hd.nn.metrics.MeanAbsoluteError()],
    )
    weighted = both.evaluate(x, y, sample_weight=w, batch_size=4, return_dict=True)
    assert weighted == pytest.approx(
        {
            "accuracy": 0.5,
            "loss": 0.99207276,
            "mean_absolute_error": 0.42752433,
            "mse": 0.32279915,
            "weighted_accuracy": 0.625,
        },
        rel=1e-5,
    )
    plain = both.evaluate(x, y, batch_size=4, return_dict=True)
    assert plain["weighted_accuracy"] == 0.5 and plain["loss"] == pytest.approx(0.91399026)
    assert plain["mean_absolute_error"] == pytest.approx(0.5037956, rel=1e-5)
    alone = model(weighted_metrics=["accuracy"])
    assert alone.evaluate(x, y, sample_weight=w, batch_size=4, return_dict=True) == pytest.approx(
        {"accuracy": 0.625, "loss": 0.99207276}, rel=1e-5
    )
    with pytest.raises(ValueError, match="sample_weight"):
        both.evaluate(x, y, sample_weight=w[:4], batch_size=4)
