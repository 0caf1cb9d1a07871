"""BatchNormalization, LayerNormalization and MultiHeadAttention against Keras 3 on TF 2.21.

Each case builds the same layer on both sides, gives it the same weights and inputs, and
compares outputs, the gradients of ``sum(output * w)`` (fixed random ``w``) with respect to the
inputs and the trainable weights, and the moving statistics; the fit cases train the same model
from the same weights on the same batches, also under the two-replica MirroredStrategy, where
each replica's copy of the moving statistics is compared too.
"""

import numpy as np
import pytest

from tests.conformance.helpers import conform

F32 = np.float32


def data(shape, seed, scale=1.0, shift=0.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale + shift).astype(F32)


def bn_weights(layer, seed):
    """gamma, beta, moving mean, moving variance (whichever the layer has), from ``seed``."""
    out = []
    for i, w in enumerate(layer.weights):
        shape = tuple(w.shape)
        value = data(shape, seed + i, 0.5, 1.0)
        if "variance" in str(getattr(w, "path", w.name)):
            value = np.abs(value) + 0.1
        out.append(value)
    return out


def run_bn(lib, make, shape, call_kwargs, steps=1):
    """Output and gradients of the last of ``steps`` calls, and the moving statistics."""
    layer = make(lib.keras)
    x0 = data(shape, 0, 2.0, 0.5)
    layer(x0)
    layer.set_weights(bn_weights(layer, 10))
    for step in range(steps - 1):
        layer(data(shape, 50 + step, 1.5, -0.3), **call_kwargs)
    x = lib.tf.Variable(x0)
    with lib.tf.GradientTape() as tape:
        out = layer(x, **call_kwargs)
        loss = lib.tf.reduce_sum(out * data(tuple(out.shape), 99))
    grads = tape.gradient(loss, [x, *layer.trainable_weights])
    return out, grads, layer.moving_mean, layer.moving_variance, len(layer.trainable_weights)


BN = {
    "dense-train": (lambda k: k.layers.BatchNormalization(), (6, 5), {"training": True}),
    "dense-inference": (lambda k: k.layers.BatchNormalization(), (6, 5), {"training": False}),
    "dense-default-call": (lambda k: k.layers.BatchNormalization(), (6, 5), {}),
    "conv-train": (lambda k: k.layers.BatchNormalization(), (3, 4, 5, 3), {"training": True}),
    "conv-inference": (lambda k: k.layers.BatchNormalization(), (3, 4, 5, 3), {"training": False}),
    "axis-1-train": (lambda k: k.layers.BatchNormalization(axis=1), (4, 3, 5), {"training": True}),
    "axis-1-inference": (
        lambda k: k.layers.BatchNormalization(axis=1),
        (4, 3, 5),
        {"training": False},
    ),
    "no-center-no-scale": (
        lambda k: k.layers.BatchNormalization(center=False, scale=False),
        (6, 4),
        {"training": True},
    ),
    "no-scale-momentum-epsilon": (
        lambda k: k.layers.BatchNormalization(scale=False, momentum=0.8, epsilon=0.1),
        (6, 4),
        {"training": True},
    ),
    "synchronized-train": (
        lambda k: k.layers.BatchNormalization(synchronized=True),
        (3, 4, 5, 3),
        {"training": True},
    ),
    "synchronized-inference": (
        lambda k: k.layers.BatchNormalization(synchronized=True),
        (6, 5),
        {"training": False},
    ),
    "frozen-train": (
        lambda k: k.layers.BatchNormalization(trainable=False),
        (6, 5),
        {"training": True},
    ),
}


@pytest.mark.parametrize("name", sorted(BN))
def test_batch_normalization(name):
    make, shape, kwargs = BN[name]
    conform(run_bn, make, shape, kwargs)


@pytest.mark.parametrize("name", ["dense-train", "conv-train", "synchronized-train"])
def test_batch_normalization_moving_statistics_after_several_steps(name):
    make, shape, kwargs = BN[name]
    conform(run_bn, make, shape, kwargs, 4)


def test_batch_normalization_frozen_after_build():
    def case(lib):
        layer = lib.keras.layers.BatchNormalization()
        x = data((6, 3), 0, 2.0, 1.0)
        layer(x, training=True)
        layer.trainable = False
        out = layer(x, training=True)  # inference: the moving statistics, which do not move
        return out, layer.moving_mean, len(layer.trainable_weights), len(layer.weights)

    conform(case)


def test_batch_normalization_with_mask():
    mask = np.array([[1, 1, 0, 1], [0, 1, 1, 1], [1, 0, 0, 0]], bool)
    make = lambda k: k.layers.BatchNormalization()  # noqa: E731
    conform(run_bn, make, (3, 4, 2), {"training": True, "mask": mask})


def test_batch_normalization_errors():
    def case(lib, build_shape, call_shape):
        layer = lib.keras.layers.BatchNormalization()
        layer(data(build_shape, 0))
        return layer(data(call_shape, 1))

    conform(case, (4, 3), (4, 5))
    conform(case, (4, 3), (4, 2, 3))


@pytest.mark.parametrize(("shape", "epsilon"), [((6, 5), 1e-3), ((2, 3, 8), 1e-5), ((3, 1), 1e-3)])
def test_layer_normalization(shape, epsilon):
    """Outputs and the gradients of the inputs, gamma and beta (inputs far from zero mean)."""

    def case(lib):
        layer = lib.keras.layers.LayerNormalization(epsilon=epsilon)
        x0 = data(shape, 0, 3.0, 2.0)
        layer(x0)
        layer.set_weights([data(shape[-1:], 1, 0.5, 1.0), data(shape[-1:], 2)])
        x = lib.tf.Variable(x0)
        with lib.tf.GradientTape() as tape:
            out = layer(x)
            loss = lib.tf.reduce_sum(out * data(shape, 99))
        return out, tape.gradient(loss, [x, *layer.trainable_weights])

    conform(case)


def bn_model(lib, synchronized):
    """A small residual CNN: Conv2D -> BN -> relu -> Conv2D -> BN -> Add -> pool -> Dense."""
    layers = lib.keras.layers
    inputs = lib.keras.Input((6, 6, 2))
    x = layers.Conv2D(4, 3, padding="same")(inputs)
    x = layers.BatchNormalization(synchronized=synchronized, momentum=0.8)(x)
    x = layers.Activation("relu")(x)
    h = layers.Conv2D(4, 3, padding="same")(x)
    h = layers.BatchNormalization(synchronized=synchronized, momentum=0.8)(h)
    x = layers.Add()([x, h])
    x = layers.GlobalAveragePooling2D()(x)
    outputs = layers.Dense(3)(x)
    model = lib.keras.Model(inputs, outputs)
    model.set_weights([data(tuple(w.shape), 100 + i, 0.3) for i, w in enumerate(model.weights)])
    model.set_weights(
        [
            np.abs(w) + 0.5 if "variance" in str(getattr(v, "path", v.name)) else w
            for w, v in zip(model.get_weights(), model.weights, strict=True)
        ]
    )
    model.compile(lib.keras.optimizers.SGD(0.1, momentum=0.9), "mse")
    return model


def moving_copies(lib, model):
    """Every local replica's copy of every BN moving statistic."""
    strategy = lib.mirrored()
    out = []
    for layer in model.layers:
        if type(layer).__name__ != "BatchNormalization":
            continue
        for var in (layer.moving_mean, layer.moving_variance):
            raw = var.value if lib.name == "tf" else var
            out.append([np.asarray(c.numpy()) for c in strategy.experimental_local_results(raw)])
    return out


@pytest.mark.parametrize("strategy", [False, True])
@pytest.mark.parametrize("synchronized", [False, True])
def test_residual_cnn_with_batch_normalization_trained_with_fit(strategy, synchronized):
    x, y = data((16, 6, 6, 2), 1), data((16, 3), 2)

    def case(lib):
        if strategy:
            with lib.mirrored().scope():
                model = bn_model(lib, synchronized)
        else:
            model = bn_model(lib, synchronized)
        history = model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
        result = {
            "loss": [float(v) for v in history.history["loss"]],
            "weights": model.get_weights(),
            "predict": model.predict(x[:5], verbose=0),
        }
        if strategy:
            result["moving_copies"] = moving_copies(lib, model)
        return result

    conform(case)


# -- MultiHeadAttention ---------------------------------------------------------------------


def run_mha(lib, make, shapes, call_kwargs=None, seed=20):
    """Output (and scores) of ``layer(query, value[, key])`` and the gradients of the output."""
    layer = make(lib.keras)
    arrays = [data(s, i) for i, s in enumerate(shapes)]
    layer(*arrays, **(call_kwargs or {}))
    layer.set_weights([data(tuple(w.shape), seed + i, 0.5) for i, w in enumerate(layer.weights)])
    variables = [lib.tf.Variable(a) for a in arrays]
    with lib.tf.GradientTape() as tape:
        result = layer(*variables, **(call_kwargs or {}))
        out = result[0] if isinstance(result, tuple) else result
        loss = lib.tf.reduce_sum(out * data(tuple(out.shape), 99))
    grads = tape.gradient(loss, [*variables, *layer.trainable_weights])
    return result, grads


def mha(**kwargs):
    return lambda k: k.layers.MultiHeadAttention(**kwargs)


MASK = np.array([[[1, 1, 0, 1, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1], [0, 1, 1, 0, 1]]] * 2, bool)
MASK_WHOLE_ROW = MASK.copy()
MASK_WHOLE_ROW[1, 2] = False

MHA = {
    "self-attention": (mha(num_heads=2, key_dim=3), [(2, 4, 6), (2, 4, 6)], {}),
    "cross-attention": (mha(num_heads=2, key_dim=3), [(2, 4, 6), (2, 5, 6)], {}),
    "key-value-dims": (
        mha(num_heads=3, key_dim=2, value_dim=4),
        [(2, 4, 6), (2, 5, 5), (2, 5, 3)],
        {},
    ),
    "output-shape-no-bias": (
        mha(num_heads=2, key_dim=3, output_shape=7, use_bias=False),
        [(2, 4, 6), (2, 5, 6)],
        {},
    ),
    "mask": (mha(num_heads=2, key_dim=3), [(2, 4, 6), (2, 5, 6)], {"attention_mask": MASK}),
    "mask-2d-broadcast": (
        mha(num_heads=2, key_dim=3),
        [(2, 4, 6), (2, 5, 6)],
        {"attention_mask": MASK[0]},
    ),
    "mask-whole-row": (
        mha(num_heads=2, key_dim=3),
        [(2, 4, 6), (2, 5, 6)],
        {"attention_mask": MASK_WHOLE_ROW},
    ),
    "causal": (mha(num_heads=2, key_dim=3), [(2, 4, 6), (2, 4, 6)], {"use_causal_mask": True}),
    "causal-and-mask": (
        mha(num_heads=2, key_dim=3),
        [(2, 4, 6), (2, 5, 6)],
        {"use_causal_mask": True, "attention_mask": MASK},
    ),
    "scores": (
        mha(num_heads=2, key_dim=3),
        [(2, 4, 6), (2, 5, 6)],
        {"return_attention_scores": True},
    ),
    "scores-mask": (
        mha(num_heads=2, key_dim=3),
        [(2, 4, 6), (2, 5, 6)],
        {"return_attention_scores": True, "attention_mask": MASK},
    ),
    "scores-mask-whole-row": (
        mha(num_heads=2, key_dim=3),
        [(2, 4, 6), (2, 5, 6)],
        {"return_attention_scores": True, "attention_mask": MASK_WHOLE_ROW},
    ),
    "scores-causal": (
        mha(num_heads=2, key_dim=3),
        [(2, 4, 6), (2, 4, 6)],
        {"return_attention_scores": True, "use_causal_mask": True},
    ),
    "dropout-inference": (
        mha(num_heads=2, key_dim=3, dropout=0.5),
        [(2, 4, 6), (2, 5, 6)],
        {"training": False, "attention_mask": MASK},
    ),
    "attention-axes-2d": (
        mha(num_heads=2, key_dim=2, attention_axes=(1, 2)),
        [(2, 3, 2, 4), (2, 2, 2, 4)],
        {},
    ),
}


@pytest.mark.parametrize("name", sorted(MHA))
def test_multi_head_attention(name):
    make, shapes, kwargs = MHA[name]
    conform(run_mha, make, shapes, kwargs)


def test_multi_head_attention_weights():
    def case(lib):
        layer = lib.keras.layers.MultiHeadAttention(3, 2, value_dim=4, output_shape=5, name="mha")
        layer(data((2, 4, 6), 0), data((2, 5, 7), 1))
        paths = [str(getattr(w, "path", w.name)) for w in layer.weights]
        return paths, [list(w.shape) for w in layer.weights], len(layer.trainable_weights)

    conform(case)


def test_multi_head_attention_errors():
    def construct(lib, kwargs):
        return lib.keras.layers.MultiHeadAttention(**kwargs)

    conform(construct, {"num_heads": 0, "key_dim": 2})
    conform(construct, {"num_heads": 2, "key_dim": -1})
    conform(construct, {"num_heads": 2, "key_dim": 2, "value_dim": 0})

    def key_value(lib):
        layer = lib.keras.layers.MultiHeadAttention(2, 2)
        return layer(data((2, 4, 6), 0), data((2, 5, 6), 1), data((2, 3, 6), 2))

    conform(key_value)


def encoder_model(lib):
    """A 1-block transformer encoder: Dense embedding + MHA + Add + LayerNorm + Dense(gelu)."""
    layers = lib.keras.layers
    inputs = lib.keras.Input((5, 4))
    x = layers.Dense(8)(inputs)
    attention = layers.MultiHeadAttention(num_heads=2, key_dim=4)
    x = layers.LayerNormalization()(layers.Add()([x, attention(x, x)]))
    h = layers.Dense(16, activation="gelu")(x)
    x = layers.LayerNormalization()(layers.Add()([x, layers.Dense(8)(h)]))
    outputs = layers.Dense(3)(layers.GlobalAveragePooling1D()(x))
    model = lib.keras.Model(inputs, outputs)
    weights = [w for layer in model.layers for w in layer.weights]
    for i, w in enumerate(weights):
        w.assign(data(tuple(w.shape), 200 + i, 0.3, 1.0 if "gamma" in str(w.name) else 0.0))
    # SGD, not Adam: the key projection's bias has a gradient of zero up to round-off (softmax
    # ignores a shift shared by all key positions), which Adam would scale up to full steps
    model.compile(lib.keras.optimizers.SGD(0.05, momentum=0.9), "mse")
    return model


def test_transformer_encoder_trained_with_fit():
    x, y = data((12, 5, 4), 3), data((12, 3), 4)

    def case(lib):
        model = encoder_model(lib)
        history = model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
        weights = [w.numpy() for layer in model.layers for w in layer.weights]
        return [float(v) for v in history.history["loss"]], weights

    conform(case)
