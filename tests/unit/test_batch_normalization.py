"""BatchNormalization: gradients, training and inference, moving statistics, freezing, configs.

Keras 3's numbers are in tests/conformance/test_layers_bn_mha.py; these tests check the layer
against central differences and numpy formulas, and synchronized statistics under a two-replica
MirroredStrategy against one process on the same global batches.
"""

import numpy as np
import pytest

import hpcdist as hd
from hpcdist.core.variables import Variable
from hpcdist.nn import layers, ops
from tests.gradcheck import check_variables

RNG = np.random.default_rng(0)
X = RNG.standard_normal((6, 3, 4)) * 2 + 0.5
W = RNG.standard_normal((6, 3, 4))


def bn64(**kwargs):
    """A float64 layer built on `X`, with non-trivial gamma, beta and moving statistics."""
    layer = layers.BatchNormalization(dtype="float64", **kwargs)
    layer(X)
    rng = np.random.default_rng(1)
    for w in layer.weights:
        value = rng.standard_normal(w.shape) * 0.5 + 1.0
        w.assign(np.abs(value) if "variance" in w.name else value)
    return layer


def loss_of(layer, x, **call):
    return lambda: ops.reduce_sum(ops.multiply(layer(x, **call), W))


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"axis": 1}, {"center": False}, {"scale": False, "epsilon": 0.5}, {"synchronized": True}],
    ids=["default", "axis-1", "no-center", "no-scale", "synchronized"],
)
@pytest.mark.parametrize("training", [True, False])
def test_gradients_match_central_differences(kwargs, training):
    layer = bn64(**kwargs)
    x = Variable(X.copy(), dtype=np.float64)
    check_variables(loss_of(layer, x, training=training), [x, *layer.trainable_variables])


def test_masked_gradients_match_central_differences():
    layer = bn64()
    x = Variable(X.copy(), dtype=np.float64)
    mask = RNG.random((6, 3)) > 0.3
    check_variables(loss_of(layer, x, training=True, mask=mask), [x, *layer.trainable_variables])


def test_training_normalises_with_the_batch_and_inference_with_the_moving_statistics():
    layer = layers.BatchNormalization(dtype="float64")
    train = layer(X, training=True).numpy()
    np.testing.assert_allclose(train.mean(axis=(0, 1)), 0, atol=1e-12)
    var = X.var(axis=(0, 1))
    np.testing.assert_allclose(train.var(axis=(0, 1)), var / (var + 1e-3), rtol=1e-12)
    layer2 = layers.BatchNormalization(dtype="float64")
    for call in ({}, {"training": False}, {"training": None}):
        np.testing.assert_allclose(layer2(X, **call).numpy(), X / np.sqrt(1 + 1e-3), rtol=1e-12)
    np.testing.assert_array_equal(layer2.moving_mean.numpy(), 0)  # inference moves nothing


@pytest.mark.parametrize("synchronized", [False, True])
def test_moving_statistics_follow_keras_update_rule(synchronized):
    layer = layers.BatchNormalization(momentum=0.8, dtype="float64", synchronized=synchronized)
    mean, var = np.zeros(4), np.ones(4)
    for step in range(5):
        x = RNG.standard_normal((8, 4)) * (step + 1) + step
        layer(x, training=True)
        mean = mean * 0.8 + x.mean(axis=0) * (1 - 0.8)
        var = var * 0.8 + x.var(axis=0) * (1 - 0.8)
    np.testing.assert_allclose(layer.moving_mean.numpy(), mean, rtol=1e-12)
    np.testing.assert_allclose(layer.moving_variance.numpy(), var, rtol=1e-10)
    x = RNG.standard_normal((8, 4))
    expected = (x - mean) / np.sqrt(var + 1e-3)
    np.testing.assert_allclose(layer(x).numpy(), expected, rtol=1e-10)


def test_weights_order_names_and_trainability():
    layer = layers.BatchNormalization(name="bn")
    layer(np.zeros((2, 3), np.float32))
    assert [w.name for w in layer.weights] == [
        "bn/gamma",
        "bn/beta",
        "bn/moving_mean",
        "bn/moving_variance",
    ]
    assert [w.name for w in layer.trainable_variables] == ["bn/gamma", "bn/beta"]
    assert layer.count_params() == 12
    plain = layers.BatchNormalization(center=False, scale=False)
    plain(np.zeros((2, 3), np.float32))
    assert len(plain.weights) == 2 and plain.trainable_variables == []


@pytest.mark.parametrize("when", ["constructor", "after-build"])
def test_trainable_false_freezes_and_runs_in_inference(when):
    layer = layers.BatchNormalization(trainable=when == "after-build", dtype="float64")
    layer(X, training=True)  # moves the statistics when trainable
    if when == "after-build":
        layer.trainable = False
    before = [w.numpy() for w in layer.weights]
    out = layer(X, training=True).numpy()
    mean, var = before[2], before[3]
    np.testing.assert_allclose(out, (X - mean) / np.sqrt(var + 1e-3) * before[0] + before[1])
    assert layer.trainable_variables == [] and len(layer.non_trainable_variables) == 4
    for a, w in zip(before, layer.weights, strict=True):
        np.testing.assert_array_equal(a, w.numpy())
    layer.trainable = True
    assert len(layer.trainable_variables) == 2


def test_frozen_layer_is_left_alone_by_fit():
    hd.nn.set_random_seed(0)
    bn = layers.BatchNormalization()
    model = hd.nn.Sequential([layers.Dense(4, input_shape=(3,)), bn, layers.Dense(1)])
    bn.trainable = False
    model.compile("sgd", "mse")
    before = bn.get_weights()
    x = RNG.standard_normal((16, 3)).astype(np.float32)
    model.fit(x, x[:, :1], batch_size=4, epochs=1, verbose=0)
    for a, b in zip(before, bn.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    assert len(model.trainable_variables) == 4


def test_config_round_trip_and_saved_model(tmp_path):
    layer = layers.BatchNormalization(
        axis=1,
        momentum=0.9,
        epsilon=0.01,
        center=False,
        gamma_initializer="random_normal",
        gamma_regularizer=hd.nn.regularizers.L2(0.1),
        synchronized=True,
        name="bn_cfg",
    )
    config = layer.get_config()
    assert config["synchronized"] is True and config["axis"] == 1
    assert config["gamma_regularizer"] == {"l1": 0.0, "l2": 0.1}
    assert layers.BatchNormalization.from_config(config).get_config() == config
    model = hd.nn.Sequential([layers.Dense(3, input_shape=(2,)), layers.BatchNormalization()])
    x = RNG.standard_normal((8, 2)).astype(np.float32)
    model(x, training=True)  # moving statistics away from their initial values
    model.save(str(tmp_path / "bn.h5"))
    again = hd.nn.models.load_model(str(tmp_path / "bn.h5"))
    np.testing.assert_allclose(again.predict(x), model.predict(x), rtol=1e-6)
    assert again.layers[1].moving_mean.numpy().any()


def test_bad_arguments_and_inputs_name_expected_and_received():
    with pytest.raises(ValueError, match=r"axis must be an integer, received \[1, 2\]"):
        layers.BatchNormalization(axis=[1, 2])
    with pytest.raises(ValueError, match="epsilon must be positive, received 0"):
        layers.BatchNormalization(epsilon=0)
    with pytest.raises(ValueError, match=r"axis 3 is out of bounds .* shape \(2, 4\).*\[-2, 2\)"):
        layers.BatchNormalization(axis=3)(np.zeros((2, 4), np.float32))
    layer = layers.BatchNormalization(name="bn_err")
    layer(np.zeros((2, 4), np.float32))
    with pytest.raises(
        ValueError,
        match=r"expected an input of rank 2 with 4 features on axis -1, "
        r"received an input of shape \(2, 5\)",
    ):
        layer(np.zeros((2, 5), np.float32))
    with pytest.raises(ValueError, match=r"received an input of shape \(2, 3, 4\)"):
        layer(np.zeros((2, 3, 4), np.float32))
    with pytest.raises(ValueError, match=r"one dimension less.*mask.shape=\(2, 4\)"):
        layer(np.zeros((2, 4), np.float32), training=True, mask=np.ones((2, 4), bool))


# -- under a strategy ------------------------------------------------------------------------


def residual_cnn(synchronized, seed=4):
    hd.nn.set_random_seed(seed)
    inputs = hd.nn.Input((5, 5, 2))
    x = layers.Conv2D(3, 3, padding="same")(inputs)
    x = layers.BatchNormalization(synchronized=synchronized, momentum=0.7)(x)
    x = layers.Activation("relu")(x)
    h = layers.Conv2D(3, 3, padding="same")(x)
    h = layers.BatchNormalization(synchronized=synchronized, momentum=0.7)(h)
    x = layers.GlobalAveragePooling2D()(layers.Add()([x, h]))
    model = hd.nn.Model(inputs, layers.Dense(2)(x))
    model.compile(hd.nn.optimizers.SGD(0.1, momentum=0.9), "mse")
    return model


def cnn_data(n=27):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((n, 5, 5, 2)).astype(np.float32) * 2 + 1
    return x, rng.standard_normal((n, 2)).astype(np.float32)


def moving_copies(strategy, model):
    return [
        [c.numpy() for c in strategy.experimental_local_results(var)]
        for layer in model.layers
        if isinstance(layer, layers.BatchNormalization)
        for var in (layer.moving_mean, layer.moving_variance)
    ]


def test_synchronized_two_local_replicas_train_as_one_process():
    x, y = cnn_data()
    reference = residual_cnn(True)
    initial = reference.get_weights()
    reference.fit(x, y, batch_size=8, epochs=3, verbose=0, seed=2)
    strategy = hd.MirroredStrategy(["cpu:0", "cpu:1"])
    with strategy.scope():
        model = residual_cnn(True)
    model.fit(x, y, batch_size=8, epochs=3, verbose=0, seed=2)
    assert (
        max(np.abs(a - b).max() for a, b in zip(initial, reference.get_weights(), strict=True))
        > 1e-2
    )
    for a, b in zip(reference.get_weights(), model.get_weights(), strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)
    for copies in moving_copies(strategy, model):
        np.testing.assert_array_equal(copies[0], copies[1])  # the same update on every copy


def test_synchronized_gradients_equal_one_process_gradients_in_a_custom_loop():
    x, _ = cnn_data(8)
    w = np.random.default_rng(5).standard_normal((8, 2)).astype(np.float32)

    def gradients(strategy):
        with strategy.scope() if strategy else _NoScope():
            model = residual_cnn(True)

        def step(bx, bw):
            with hd.nn.GradientTape() as tape:
                loss = ops.reduce_sum(ops.multiply(model(bx, training=True), bw))
            return tape.gradient(loss, model.trainable_variables)

        if strategy is None:
            return [np.asarray(g) for g in step(x, w)]
        per_replica = strategy.run(
            step, args=(hd.PerReplica([x[:3], x[3:]]), hd.PerReplica([w[:3], w[3:]]))
        )
        grads = strategy.experimental_local_results(per_replica)
        return [np.asarray(a) + np.asarray(b) for a, b in zip(*grads, strict=True)]

    one = gradients(None)
    two = gradients(hd.MirroredStrategy(["cpu:0", "cpu:1"]))
    for a, b in zip(one, two, strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)


def test_unsynchronized_replicas_keep_their_own_moving_statistics():
    x, y = cnn_data()
    strategy = hd.MirroredStrategy(["cpu:0", "cpu:1"])
    with strategy.scope():
        model = residual_cnn(False)
    model.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False)
    for copies in moving_copies(strategy, model):
        assert np.abs(copies[0] - copies[1]).max() > 1e-4  # each followed its own batches
    layer = next(layer for layer in model.layers if isinstance(layer, layers.BatchNormalization))
    np.testing.assert_array_equal(layer.moving_mean.numpy(), moving_copies(strategy, model)[0][0])


class _NoScope:
    """``with`` that does nothing (no strategy scope)."""

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def test_synchronized_statistics_with_an_empty_replica_batch():
    """The last global batch of 1 row leaves one replica empty: the sums still add up."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((25, 3)).astype(np.float32)
    y = rng.standard_normal((25, 1)).astype(np.float32)

    def train(strategy):
        hd.nn.set_random_seed(2)
        with strategy.scope() if strategy else _NoScope():
            model = hd.nn.Sequential(
                [
                    layers.Dense(4, input_shape=(3,)),
                    layers.BatchNormalization(synchronized=True, momentum=0.5),
                    layers.Dense(1),
                ]
            )
            model.compile(hd.nn.optimizers.SGD(0.1), "mse")
        model.fit(x, y, batch_size=8, epochs=2, verbose=0, shuffle=False)
        return model.get_weights()

    one, two = train(None), train(hd.MirroredStrategy(["cpu:0", "cpu:1"]))
    for a, b in zip(one, two, strict=True):
        assert np.all(np.isfinite(b))
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)
