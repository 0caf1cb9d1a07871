"""Every layer and loss against finite differences (float64)."""

import numpy as np
import pytest

import hpcdist as hd
from hpcdist.nn import layers, losses, regularizers
from tests.gradcheck import check_variables

RNG = np.random.default_rng(0)
X = RNG.standard_normal((5, 4))


def f64(layer):
    layer.dtype = np.dtype(np.float64)
    return layer


@pytest.mark.parametrize("activation", [None, "relu", "tanh", "sigmoid", "softmax", "softplus"])
def test_dense(activation):
    layer = f64(layers.Dense(3, activation=activation, kernel_regularizer=regularizers.L2(0.1)))
    layer(X)
    weights = RNG.standard_normal((5, 3))
    check_variables(lambda: (layer(X) * weights).sum() + layer.losses[0], layer.trainable_variables)


def test_embedding_flatten_layernorm_dropout():
    emb = f64(layers.Embedding(7, 3))
    ids = np.array([[1, 6], [1, 0]])
    emb(ids)
    w = RNG.standard_normal((2, 6))
    check_variables(lambda: (layers.Flatten()(emb(ids)) * w).sum(), [emb.embeddings])
    norm = f64(layers.LayerNormalization())
    norm(X)
    norm.gamma.assign(RNG.standard_normal(4))
    norm.beta.assign(RNG.standard_normal(4))
    w2 = RNG.standard_normal((5, 4))
    check_variables(lambda: (norm(X * 3 + 1) * w2).sum(), norm.trainable_variables)
    # the input's gradient too, on rows of 3-D inputs (the fused backward's row sums)
    inputs = hd.get_strategy().Variable(RNG.standard_normal((2, 3, 4)) * 2 + 1)
    w3 = RNG.standard_normal((2, 3, 4))
    check_variables(lambda: (norm(inputs) * w3).sum(), [inputs, *norm.trainable_variables])
    dense = f64(layers.Dense(4))
    dense(X)
    drop = layers.Dropout(0.5)

    def dropped():
        drop._rng = np.random.default_rng(1)  # the same mask on every evaluation
        return (drop(dense(X), training=True) * w2).sum()

    check_variables(dropped, dense.trainable_variables)
    out = drop(np.ones((1000,)), training=True).numpy()
    assert set(np.unique(out)) <= {0.0, 2.0} and 0.4 < (out == 0).mean() < 0.6
    assert (drop(np.ones(4), training=False).numpy() == 1).all()


LOGITS = RNG.standard_normal((6, 3))


@pytest.mark.parametrize(
    ("loss", "y"),
    [
        (losses.MeanSquaredError(), RNG.standard_normal((6, 3))),
        (losses.BinaryCrossentropy(from_logits=True), RNG.integers(0, 2, (6, 3))),
        (losses.CategoricalCrossentropy(from_logits=True), np.eye(3)[RNG.integers(0, 3, 6)]),
        (losses.SparseCategoricalCrossentropy(from_logits=True), RNG.integers(0, 3, 6)),
    ],
    ids=["mse", "bce-logits", "cce-logits", "scce-logits"],
)
@pytest.mark.parametrize("reduction", ["auto", "sum", "none"])
def test_losses(loss, y, reduction):
    loss.reduction = reduction
    z = hd.get_strategy().Variable(LOGITS.copy())
    check_variables(lambda: loss(y, z), [z])


@pytest.mark.parametrize(
    ("loss", "y"),
    [
        (losses.BinaryCrossentropy(), RNG.integers(0, 2, (6, 3))),
        (losses.CategoricalCrossentropy(), np.eye(3)[RNG.integers(0, 3, 6)]),
        (losses.SparseCategoricalCrossentropy(), RNG.integers(0, 3, 6)),
    ],
    ids=["bce-probs", "cce-probs", "scce-probs"],
)
def test_probability_losses(loss, y):
    p = hd.get_strategy().Variable(1 / (1 + np.exp(-LOGITS)))
    check_variables(lambda: loss(y, p), [p], rtol=1e-4)


def test_loss_values_match_their_definitions():
    y = np.array([0, 2])
    logits = np.array([[2.0, 0.5, -1.0], [0.1, 0.2, 3.0]])
    log_p = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    expected = -np.mean(log_p[[0, 1], y])
    scce = losses.SparseCategoricalCrossentropy(from_logits=True)
    assert np.isclose(scce(y, logits).numpy(), expected)
    # Keras: get("mse") is the per-sample function, get("MeanSquaredError") a mean-reducing loss
    np.testing.assert_allclose(losses.get("mse")(np.ones((2, 2)), np.zeros((2, 2))).numpy(), [1, 1])
    assert np.isclose(losses.get("MeanSquaredError")(np.ones((2, 2)), np.zeros((2, 2))).numpy(), 1)
    assert np.isclose(
        losses.MeanSquaredError(reduction="sum")(np.ones((2, 2)), np.zeros((2, 2))).numpy(), 2.0
    )
    weighted = losses.MeanSquaredError()(
        np.ones((2, 1)), np.zeros((2, 1)), sample_weight=np.array([1.0, 0.0])
    )
    assert np.isclose(weighted.numpy(), 0.5)
    with pytest.raises(ValueError, match="labels must be in"):
        scce(np.array([3, 0]), logits)
    with pytest.raises(ValueError, match="reduction"):
        losses.MeanSquaredError(reduction="average")
    with pytest.raises(ValueError, match="unknown loss"):
        losses.get("hinge-ish")


def test_l1_penalty_gradient_is_zero_at_zero():
    # TF 2.21: gradient of L1(0.1) at w = [0, 1, -2] is [0, 0.1, -0.1];
    # L1L2(0.1, 0.2) gives [0, 0.5, -0.9] and penalty 1.3.
    w = hd.get_strategy().Variable(np.array([0.0, 1.0, -2.0]))
    with hd.nn.GradientTape() as tape:
        penalty = regularizers.L1(0.1)(w)
    np.testing.assert_allclose(tape.gradient(penalty, w), [0.0, 0.1, -0.1])
    with hd.nn.GradientTape() as tape:
        penalty = regularizers.L1L2(0.1, 0.2)(w)
    np.testing.assert_allclose(float(penalty), 1.3)
    np.testing.assert_allclose(tape.gradient(penalty, w), [0.0, 0.5, -0.9])
