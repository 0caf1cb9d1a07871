"""The Keras surface TF tutorials use, against TF 2.21's (Keras 3) own numbers.

Conv2D / MaxPooling2D / Reshape / InputLayer, the functional API, model and weights files,
`losses.Reduction`, the sigmoid/softmax logits rule of the cross-entropies, the one-argument
`LearningRateScheduler`, metric calls, `.numpy()` on results and learning rates, and subclassed
models called first on dicts and tuples. Values quoted "TF 2.21" were computed with
tensorflow 2.21 (CPU) on the same inputs.
"""

import json

import h5py
import numpy as np
import pytest

import hpcdist as hd
from hpcdist.core import conv_ops, max_pool
from hpcdist.nn import callbacks, layers, losses, metrics, models, optimizers
from tests.gradcheck import check_variables

X = np.sin(np.arange(2 * 5 * 5 * 2)).reshape(2, 5, 5, 2).astype(np.float32)
KERNEL = np.cos(np.arange(3 * 3 * 2 * 3)).reshape(3, 3, 2, 3).astype(np.float32)
BIAS = np.array([0.1, -0.2, 0.3], np.float32)


def _built(layer, shape):
    layer(np.zeros(shape, np.float32))
    return layer


# -- conv and pooling: TF's values ------------------------------------------------------------


def test_conv2d_same_stride_relu_matches_keras():
    conv = _built(layers.Conv2D(3, 3, strides=2, padding="same", activation="relu"), (1, 5, 5, 2))
    conv.set_weights([KERNEL, BIAS])
    out = conv(X).numpy()
    # TF 2.21: Conv2D(3, 3, strides=2, padding="same", activation="relu")
    assert out.shape == (2, 3, 3, 3) and out.dtype == np.float32
    np.testing.assert_allclose(out.sum(), 9.3468599319458, rtol=1e-6)
    np.testing.assert_allclose((out**2).sum(), 6.153597354888916, rtol=1e-6)
    np.testing.assert_allclose(out[0, 0, 0], [0.34015700221061707, 0.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(out[1, 2, 2], [0.0, 0.12964589893817902, 1.0254809856414795], 1e-6)
    assert conv.name.startswith("conv2d")


def test_conv2d_valid_rectangular_no_bias_matches_keras():
    conv = _built(layers.Conv2D(3, (2, 3), use_bias=False), (1, 5, 5, 2))
    conv.set_weights([KERNEL[:2]])
    out = conv(X).numpy()
    # TF 2.21: Conv2D(3, (2, 3), padding="valid", use_bias=False)
    assert out.shape == (2, 4, 3, 3)
    np.testing.assert_allclose(out.sum(), -0.12427979707717896, atol=1e-5)
    np.testing.assert_allclose((out**2).sum(), 1.994657039642334, rtol=1e-5)
    np.testing.assert_allclose(
        out[1, 3, 2], [-0.1589498221874237, -0.2797239422798157, -0.14332106709480286], 1e-5
    )


def test_max_pooling_matches_keras():
    out = layers.MaxPooling2D(3, 2, padding="same")(X).numpy()
    # TF 2.21: MaxPooling2D(3, 2, padding="same") and MaxPooling2D() (2x2, stride 2, valid)
    assert out.shape == (2, 3, 3, 2)
    np.testing.assert_allclose(out.sum(), 32.17206954956055, rtol=1e-6)
    np.testing.assert_allclose(out[1, 2, 2], [0.9835877418518066, 0.8600693941116333], 1e-6)
    np.testing.assert_allclose(out[0, 0, 1], [0.9906073808670044, 0.6569865942001343], 1e-6)
    default = layers.MaxPooling2D()(X).numpy()
    assert default.shape == (2, 2, 2, 2)
    np.testing.assert_allclose(default.sum(), 13.908830642700195, rtol=1e-6)


def test_conv2d_and_max_pooling_of_an_empty_batch():
    """A replica's empty share of a small last batch: empty outputs and zero-size gradients."""
    x = hd.Variable(np.zeros((0, 8, 8, 3), np.float32))
    kernel = hd.Variable(np.ones((3, 3, 3, 4), np.float32))
    with hd.GradientTape() as tape:
        y = conv_ops.conv2d(x, kernel, padding="same")
        pooled = max_pool.max_pool2d(y, 2)
        loss = hd.reduce_sum(pooled)
    gx, gk = tape.gradient(loss, [x, kernel])
    assert (y.shape, pooled.shape, gx.shape) == ((0, 8, 8, 4), (0, 4, 4, 4), (0, 8, 8, 3))
    np.testing.assert_array_equal(np.asarray(gk), np.zeros((3, 3, 3, 4), np.float32))


@pytest.mark.parametrize(
    ("strides", "padding"), [(1, "valid"), (2, "same"), ((2, 1), "same"), ((1, 2), "valid")]
)
def test_conv2d_gradients_match_central_differences(strides, padding):
    rng = np.random.default_rng(0)
    conv = layers.Conv2D(2, (3, 2), strides=strides, padding=padding, activation="tanh")
    conv.dtype = np.dtype(np.float64)
    x = hd.get_strategy().Variable(rng.standard_normal((2, 5, 4, 3)))
    conv(x)
    weights = rng.standard_normal(conv(x).shape)
    check_variables(lambda: (conv(x) * weights).sum(), [*conv.trainable_variables, x])


@pytest.mark.parametrize(
    ("pool", "strides", "padding"), [(2, None, "valid"), (3, 2, "same"), ((2, 3), 1, "same")]
)
def test_max_pool_gradients_match_central_differences(pool, strides, padding):
    rng = np.random.default_rng(1)
    x = hd.get_strategy().Variable(rng.standard_normal((2, 5, 6, 2)))
    pool_layer = layers.MaxPooling2D(pool, strides, padding=padding)
    weights = rng.standard_normal(pool_layer(x).shape)
    check_variables(lambda: (pool_layer(x) * weights).sum(), [x])


def test_conv_ops_reject_bad_arguments():
    with pytest.raises(ValueError, match="padding must be 'valid' or 'same'"):
        conv_ops.conv2d(X, KERNEL, 1, "full")
    with pytest.raises(ValueError, match="the input has 2 channels, the kernel expects 3"):
        conv_ops.conv2d(X, np.zeros((3, 3, 3, 1), np.float32))
    with pytest.raises(ValueError, match="rank 4"):
        layers.Conv2D(2, 3)(np.zeros((4, 5)))
    with pytest.raises(ValueError, match="channels_last"):
        layers.Conv2D(2, 3, data_format="channels_first")


def test_reshape_and_input_layer_in_sequential():
    assert layers.Reshape((-1, 5))(X).shape == (2, 10, 5)
    with pytest.raises(ValueError, match="cannot reshape"):
        layers.Reshape((3, 3))(X)
    for first in (hd.nn.Input(shape=(28, 28)), layers.InputLayer(input_shape=(28, 28))):
        model = hd.nn.Sequential(
            [
                first,
                layers.Reshape((28, 28, 1)),
                layers.Conv2D(4, 3, activation="relu"),
                layers.MaxPooling2D(),
                layers.Flatten(),
                layers.Dense(10),
            ]
        )
        assert model.built  # the input shape builds it at once, as in Keras
        assert type(model.layers[0]).__name__ == "Reshape"  # the InputLayer is not listed
        assert [w.shape for w in model.weights] == [(3, 3, 1, 4), (4,), (676, 10), (10,)]
        assert model.predict(np.zeros((3, 28, 28)), batch_size=2).shape == (3, 10)


# -- losses ----------------------------------------------------------------------------------


def test_reduction_constants():
    assert losses.Reduction.NONE == "none" and losses.Reduction.SUM == "sum"
    assert losses.Reduction.AUTO == "auto"
    assert losses.Reduction.SUM_OVER_BATCH_SIZE == "sum_over_batch_size"
    y, p = np.array([[1.0], [3.0]]), np.zeros((2, 1))
    mse = losses.MeanSquaredError(reduction=losses.Reduction.NONE)
    np.testing.assert_allclose(mse(y, p).numpy(), [1.0, 9.0])
    assert float(losses.MeanSquaredError(reduction=losses.Reduction.SUM)(y, p)) == 10.0
    assert float(losses.MeanSquaredError(reduction=losses.Reduction.AUTO)(y, p)) == 5.0


def test_mse_broadcasts_rank_one_targets_as_keras():
    # TF 2.21: Dense(10) of ones on x = 0.1 (n, 3), loss "mse", y = arange(n): with n = 10 the
    # (n,) targets pair with the last axis, evaluate gives 25.889999389648438; with n = 4 or 32
    # Keras raises ("Dimensions must be equal").
    def model():
        m = hd.nn.Sequential([hd.nn.Input((3,)), layers.Dense(10, kernel_initializer="ones")])
        m.compile("sgd", "mse")
        return m

    x, y = np.full((10, 3), 0.1), np.arange(10.0)
    np.testing.assert_allclose(model().evaluate(x, y, batch_size=10), 25.889999389648438, 1e-6)
    model().fit(x, y, batch_size=10, epochs=1, verbose=0)  # no reshape error
    with pytest.raises(ValueError, match=r"targets of shape \(4,\) do not broadcast"):
        model().evaluate(x[:4], y[:4], batch_size=4)


def test_binary_crossentropy_recovers_sigmoid_logits_as_keras():
    z = hd.get_strategy().Variable(np.array([[20.0], [-3.0]], np.float32))
    y = np.array([[0.0], [1.0]], np.float32)
    with hd.nn.GradientTape() as tape:
        loss = losses.BinaryCrossentropy()(y, hd.nn.activations.sigmoid(z))
    # TF 2.21: keras.activations.sigmoid then BinaryCrossentropy(): 11.524293899536133 and
    # gradient [0.5, -0.47628707] (not 0 for the saturated example).
    np.testing.assert_allclose(float(loss), 11.524293899536133, rtol=1e-6)
    np.testing.assert_allclose(tape.gradient(loss, z).ravel(), [0.5, -0.47628707], rtol=1e-5)
    dense = layers.Dense(1, activation="sigmoid", kernel_initializer="ones")
    with hd.nn.GradientTape() as tape:
        loss = losses.BinaryCrossentropy()(np.array([[0.0]]), dense(np.array([[20.0]])))
    # TF 2.21: Dense(1, sigmoid, ones) at x = 20, y = 0: loss 20.0, gradients [20.0], [1.0].
    np.testing.assert_allclose(float(loss), 20.0, rtol=1e-6)
    kernel_grad, bias_grad = tape.gradient(loss, dense.trainable_variables)
    np.testing.assert_allclose([kernel_grad.item(), bias_grad.item()], [20.0, 1.0], rtol=1e-6)


def test_categorical_crossentropies_recover_softmax_logits_as_keras():
    z = hd.get_strategy().Variable(np.array([[30.0, 0.0, -5.0]], np.float32))
    for loss_fn, y in [
        (losses.CategoricalCrossentropy(), np.array([[0.0, 1.0, 0.0]])),
        (losses.SparseCategoricalCrossentropy(), np.array([1])),
    ]:
        with hd.nn.GradientTape() as tape:
            loss = loss_fn(y, hd.nn.activations.softmax(z))
        # TF 2.21: 30.0 with gradient [1, -1, 6.3e-16] (from probabilities: clipped, 16.1)
        np.testing.assert_allclose(float(loss), 30.0, rtol=1e-6)
        np.testing.assert_allclose(tape.gradient(loss, z), [[1.0, -1.0, 0.0]], atol=1e-6)


# -- callbacks, metrics, optimizers ----------------------------------------------------------


def _tiny_model():
    model = hd.nn.Sequential([layers.Dense(1, input_shape=(2,))])
    model.compile(optimizers.SGD(0.1), "mse")
    return model


def test_learning_rate_scheduler_falls_back_to_one_argument():
    seen = []

    class Record(callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            seen.append(self.model.optimizer.learning_rate.numpy())

    model = _tiny_model()
    scheduler = callbacks.LearningRateScheduler(lambda epoch: 0.5 / (epoch + 1))
    model.fit(np.ones((4, 2)), np.ones(4), epochs=3, verbose=0, callbacks=[scheduler, Record()])
    # TF 2.21: [0.5, 0.25, 0.1666666716337204] (float32)
    np.testing.assert_allclose(seen, [0.5, 0.25, 0.1666666716337204], rtol=1e-7)
    assert all(isinstance(v, np.float32) for v in seen)
    two = callbacks.LearningRateScheduler(lambda epoch, lr: lr * 0.5)
    model.fit(np.ones((4, 2)), np.ones(4), epochs=2, verbose=0, callbacks=[two])
    np.testing.assert_allclose(float(model.optimizer.learning_rate), 0.5 / 3 / 4)


def test_metric_call_and_numpy_results():
    mean = metrics.Mean()
    # TF 2.21: Mean()([1, 2]) -> 1.5, then ([3]) -> 2.0; SparseCategoricalAccuracy -> 0.5
    assert mean([1.0, 2.0]).numpy() == np.float32(1.5)
    result = mean([3.0])
    assert result == 2.0 and result.numpy() == np.float32(2.0) and result + 1 == 3.0
    acc = metrics.SparseCategoricalAccuracy()
    assert acc(np.array([1, 0]), np.array([[0.1, 0.9], [0.2, 0.8]])).numpy() == 0.5
    opt = optimizers.SGD(0.1)
    assert opt.learning_rate.numpy() == np.float32(0.1) and float(opt.learning_rate) == 0.1
    opt.learning_rate.assign(0.05)
    assert float(opt.learning_rate) == 0.05 and float(opt.lr) == 0.05


def test_optimizer_creates_its_slots_on_first_apply():
    var = hd.get_strategy().Variable(np.ones(3, np.float32))
    opt = optimizers.Adam(0.1)
    opt.apply_gradients([(np.ones(3, np.float32), var)])
    assert int(opt.iterations.numpy()) == 1 and len(opt.variables) == 3
    np.testing.assert_allclose(var.numpy(), 0.9, rtol=1e-6)  # Adam's first step is lr


def test_float_inputs_become_float32():
    # TF 2.21: Flatten and Dense on a float64 numpy array give float32.
    assert layers.Flatten()(np.ones((2, 3))).dtype == np.float32
    assert layers.Dense(2)(np.ones((2, 3))).dtype == np.float32
    assert layers.Activation("relu")(1.5).dtype == np.float32


def test_compile_steps_per_execution():
    model = _tiny_model()
    model.compile("sgd", "mse", steps_per_execution=4, jit_compile=False)
    assert model.steps_per_execution == 4
    model.fit(np.ones((8, 2)), np.ones(8), batch_size=2, verbose=0)
    with pytest.raises(ValueError, match="steps_per_execution must be a positive integer"):
        model.compile("sgd", "mse", steps_per_execution=0)


def test_backup_and_restore_every_n_batches(tmp_path):
    model = _tiny_model()
    x, y = np.ones((8, 2)), np.ones(8)

    class Stop(callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if self.epoch == 1 and batch == 2:
                raise KeyboardInterrupt  # a job killed in epoch 1, after its 3rd batch

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

    backup = callbacks.BackupAndRestore(str(tmp_path / "backup"), save_freq=3)
    with pytest.raises(KeyboardInterrupt):
        model.fit(x, y, batch_size=2, epochs=3, verbose=0, callbacks=[backup, Stop()])
    fresh = _tiny_model()
    history = fresh.fit(
        x,
        y,
        batch_size=2,
        epochs=3,
        verbose=0,
        callbacks=[callbacks.BackupAndRestore(str(tmp_path / "backup"), save_freq=3)],
    )
    assert history.epoch == [1, 2]  # resumed in the epoch that was running
    assert not (tmp_path / "backup").exists()
    with pytest.raises(ValueError, match="save_freq must be 'epoch' or a positive integer"):
        callbacks.BackupAndRestore(str(tmp_path), save_freq="batch")


# -- models ----------------------------------------------------------------------------------


class TwoInputs(hd.nn.Model):
    def __init__(self):
        super().__init__()
        self.a, self.b = layers.Dense(3), layers.Dense(3)

    def call(self, inputs, training=None):
        if isinstance(inputs, dict):
            return self.a(inputs["image"]) + self.b(inputs["meta"])
        first, second = inputs
        return self.a(first) + self.b(second)


def test_subclassed_model_first_call_with_dict_or_tuple_builds_from_the_input():
    x = {"image": np.ones((2, 5)), "meta": np.ones((2, 4))}
    model = TwoInputs()
    assert model(x).shape == (2, 3)
    assert [w.shape for w in model.weights] == [(5, 3), (3,), (4, 3), (3,)]
    other = TwoInputs()
    assert other((np.ones((2, 6)), np.ones((2, 1)))).shape == (2, 3)
    assert [w.shape for w in other.weights] == [(6, 3), (3,), (1, 3), (3,)]


def test_functional_model_fits_evaluates_predicts():
    hd.nn.set_random_seed(0)
    inputs = hd.nn.Input(shape=(6, 6, 1))
    x = layers.Conv2D(4, 3, padding="same", activation="relu")(inputs)
    x = layers.Flatten()(layers.MaxPooling2D()(x))
    shared = layers.Dense(8, activation="relu")
    outputs = layers.Dense(3, activation="softmax")(shared(x))
    model = hd.nn.Model(inputs, outputs)
    assert isinstance(model, hd.nn.functional.Functional) and model.built
    assert [type(layer).__name__ for layer in model.layers] == [
        "InputLayer",
        "Conv2D",
        "MaxPooling2D",
        "Flatten",
        "Dense",
        "Dense",
    ]
    rng = np.random.default_rng(0)
    x_data = rng.random((64, 6, 6, 1)).astype(np.float32)
    y_data = (x_data.mean(axis=(1, 2, 3)) > 0.5).astype(np.int64) + (x_data[:, 0, 0, 0] > 0.5)
    model.compile(optimizers.Adam(0.01), "sparse_categorical_crossentropy", ["accuracy"])
    history = model.fit(x_data, y_data, batch_size=16, epochs=5, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    loss, acc = model.evaluate(x_data, y_data)
    probs = model.predict(x_data, batch_size=10)
    assert probs.shape == (64, 3)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
    assert acc == pytest.approx(np.mean(probs.argmax(1) == y_data))
    expected = -np.mean(np.log(probs[np.arange(64), y_data]))
    assert loss == pytest.approx(expected, rel=1e-5)


class Sum(layers.Layer):
    def call(self, inputs, training=None):
        return inputs[0] + inputs[1]


def test_functional_two_inputs_and_a_shared_layer():
    a_in, b_in = hd.nn.Input((4,), name="a"), hd.nn.Input((4,), name="b")
    shared = layers.Dense(2, kernel_initializer="ones")
    outputs = Sum()([shared(a_in), shared(b_in)])
    model = hd.nn.Model([a_in, b_in], outputs)
    assert len(model.weights) == 2  # the shared layer once
    out = model((np.ones((3, 4)), np.full((3, 4), 2.0)))
    np.testing.assert_allclose(out.numpy(), np.full((3, 2), 4.0 + 8.0))
    with pytest.raises(ValueError, match="not among the model's inputs"):
        hd.nn.Model(a_in, outputs)


def test_functional_model_checks_input_shapes_as_keras():
    # TF 2.21 (Keras 3): an unbatched (8,) raises "Invalid input shape ... Expected shape
    # (None, 8), but input has incompatible shape (8,)"; (2, 5) raises "Input 0 with name
    # 'input_layer' of layer 'functional' is incompatible with the layer: expected
    # shape=(None, 8), found shape=(2, 5)"; a trailing axis of 1 is squeezed or added.
    inputs = hd.nn.Input((8,), name="features")
    model = hd.nn.Model(inputs, layers.Dense(3)(inputs), name="net")
    with pytest.raises(ValueError, match=r"expected shape \(None, 8\), but the input has "):
        model(np.ones(8, np.float32))
    message = (
        r"Input 0 with name 'features' of layer 'net' is incompatible with the layer: "
        r"expected shape=\(None, 8\), found shape=\(2, 5\)"
    )
    with pytest.raises(ValueError, match=message):
        model(np.ones((2, 5), np.float32))
    assert model(np.ones((2, 8, 1), np.float32)).shape == (2, 3)
    image = hd.nn.Input((4, 4, 1))
    flat = hd.nn.Model(image, layers.Flatten()(image))
    assert flat(np.ones((2, 4, 4), np.float32)).shape == (2, 16)
    sequences = hd.nn.Input((None, 3))  # any length
    pooled = hd.nn.Model(sequences, layers.GlobalAveragePooling1D()(sequences))
    assert pooled(np.ones((2, 7, 3), np.float32)).shape == (2, 3)


def test_save_and_load_model_round_trip(tmp_path):
    hd.nn.set_random_seed(1)
    inputs = hd.nn.Input(shape=(6, 6, 1))
    x = layers.Conv2D(2, 3, strides=2, padding="same", activation="relu")(inputs)
    x = layers.Reshape((-1,))(x)
    outputs = layers.Dense(3, kernel_regularizer=hd.nn.regularizers.L2(0.01))(x)
    functional = hd.nn.Model(inputs, outputs)
    functional.compile(
        optimizers.SGD(0.05, momentum=0.9),
        losses.MeanSquaredError(),
        ["mse"],
        weighted_metrics=["mse", "mae"],
    )
    sequential = hd.nn.Sequential(
        [
            hd.nn.Input((4,)),
            layers.Dense(3, activation="tanh"),
            layers.Dropout(0.2),
            layers.LayerNormalization(),
            layers.Dense(2),
        ]
    )
    data = {functional: np.random.default_rng(0).random((5, 6, 6, 1)), sequential: np.ones((5, 4))}
    for model, x_data in data.items():
        path = str(tmp_path / f"{model.name}.keras")
        model.save(path)
        with h5py.File(path) as f:  # a config and arrays, no pickled code
            assert json.loads(f.attrs["model_config"])["class_name"] == type(model).__name__
        loaded = models.load_model(path)
        assert type(loaded) is type(model)
        np.testing.assert_array_equal(loaded.predict(x_data), model.predict(x_data))
    loaded = models.load_model(str(tmp_path / f"{functional.name}.keras"))
    assert isinstance(loaded.optimizer, optimizers.SGD) and loaded.optimizer.momentum == 0.9
    assert isinstance(loaded.loss, losses.MeanSquaredError)
    assert [m.name for m in loaded.metrics] == ["loss", "mse", "weighted_mse", "mae"]
    assert len(loaded.losses) == 1  # the regularizer came back


class Scaled(layers.Layer):
    def __init__(self, factor, **kwargs):
        super().__init__(**kwargs)
        self.factor = factor

    def call(self, inputs, training=None):
        return inputs * self.factor

    def get_config(self):
        return {**super().get_config(), "factor": self.factor}


def test_custom_layers_load_through_custom_objects(tmp_path):
    model = hd.nn.Sequential([hd.nn.Input((2,)), Scaled(3.0), layers.Dense(1)])
    path = str(tmp_path / "custom.h5")
    model.save(path)
    with pytest.raises(ValueError, match="custom_objects"):
        models.load_model(path)
    loaded = models.load_model(path, custom_objects={"Scaled": Scaled})
    x = np.ones((2, 2))
    np.testing.assert_array_equal(loaded.predict(x), model.predict(x))


def test_save_weights_and_load_weights(tmp_path):
    model = hd.nn.Sequential([hd.nn.Input((3,)), layers.Dense(4), layers.Dense(1)])
    path = str(tmp_path / "w.weights.h5")
    model.save_weights(path)
    other = hd.nn.Sequential([hd.nn.Input((3,)), layers.Dense(4), layers.Dense(1)])
    other.load_weights(path)
    for a, b in zip(model.get_weights(), other.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    wrong = hd.nn.Sequential([hd.nn.Input((3,)), layers.Dense(5), layers.Dense(1)])
    with pytest.raises(ValueError, match="has shape"):
        wrong.load_weights(path)
    unbuilt = hd.nn.Sequential([layers.Dense(4)])
    with pytest.raises(ValueError, match="is not built"):
        unbuilt.load_weights(path)
    # a ModelCheckpoint(save_weights_only=True) file loads too (through Checkpoint.read)
    ckpt = callbacks.ModelCheckpoint(str(tmp_path / "ckpt-{epoch}"), save_weights_only=True)
    model.compile("sgd", "mse")
    model.fit(np.ones((4, 3)), np.ones(4), epochs=1, verbose=0, callbacks=[ckpt])
    other.load_weights(ckpt.saved[0])
    np.testing.assert_array_equal(other.get_weights()[0], model.get_weights()[0])


def test_training_is_passed_only_to_calls_that_take_it():
    class Plain(hd.nn.layers.Layer):
        def call(self, inputs):
            return hd.nn.ops.multiply(inputs, 2.0)

    class WithTraining(hd.nn.layers.Layer):
        def call(self, inputs, training=None):
            return hd.nn.ops.multiply(inputs, 3.0 if training else 1.0)

    x = np.ones((2, 3), np.float32)
    np.testing.assert_allclose(np.asarray(Plain()(x)), 2 * x)  # Keras: no `training` given
    np.testing.assert_allclose(np.asarray(WithTraining()(x, training=True)), 3 * x)
    inputs = hd.nn.layers.Input(shape=(3,))  # keras.layers.Input, as Keras has it
    model = hd.nn.Model(inputs, Plain()(inputs))
    np.testing.assert_allclose(model.predict(x, verbose=0), 2 * x)
