"""Merge layers, poolings, ZeroPadding2D, Softmax, the GELU/SiLU activations, DepthwiseConv2D
and grouped Conv2D against Keras 3.

Each case builds the same layer on both sides (Keras 3 on TF 2.21, and hpcdist), gives it the
same weights and inputs, and compares the output and the gradients of ``sum(output * w)``
(fixed random ``w``) with respect to the inputs and the weights; the last cases do the same for
a functional residual model.
"""

import numpy as np
import pytest

from tests.conformance.helpers import conform

F32 = np.float32


def data(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(F32)


def run_layer(lib, make, shapes, call_kwargs=None, weights=None):
    """Output of ``make(lib.keras)`` on variables of ``shapes``, and gradients of ``sum(out*w)``."""
    layer = make(lib.keras)
    arrays = [data(shape, seed) for seed, shape in enumerate(shapes)]
    variables = [lib.tf.Variable(a) for a in arrays]
    inputs = variables if len(variables) > 1 or isinstance(shapes, list) else variables[0]
    if weights is not None:
        layer(inputs if not isinstance(inputs, list) else [np.asarray(a) for a in arrays])
        layer.set_weights(weights)
    with lib.tf.GradientTape() as tape:
        out = layer(inputs, **(call_kwargs or {}))
        loss = lib.tf.reduce_sum(out * data(tuple(out.shape), 99))
    sources = [*variables, *layer.trainable_weights]
    return out, tape.gradient(loss, sources)


MERGES = {
    "add": (lambda k: k.layers.Add(), [(3, 4)] * 3),
    "add-rank-broadcast": (lambda k: k.layers.Add(), [(2, 3), (2, 4, 3)]),
    "add-size-1-broadcast": (lambda k: k.layers.Add(), [(2, 1, 3), (2, 4, 3)]),
    "subtract": (lambda k: k.layers.Subtract(), [(3, 4)] * 2),
    "multiply": (lambda k: k.layers.Multiply(), [(3, 4)] * 3),
    "average": (lambda k: k.layers.Average(), [(3, 2, 4)] * 3),
    "maximum": (lambda k: k.layers.Maximum(), [(3, 4)] * 3),
    "minimum": (lambda k: k.layers.Minimum(), [(3, 4)] * 2),
    "concatenate": (lambda k: k.layers.Concatenate(), [(3, 2), (3, 4), (3, 1)]),
    "concatenate-axis-1": (lambda k: k.layers.Concatenate(axis=1), [(2, 3, 4), (2, 1, 4)]),
    "concatenate-axis-minus-2": (lambda k: k.layers.Concatenate(axis=-2), [(2, 3, 4), (2, 2, 4)]),
}


@pytest.mark.parametrize("name", sorted(MERGES))
def test_merge_layer(name):
    make, shapes = MERGES[name]
    conform(run_layer, make, shapes)


def test_merge_layer_errors():
    def case(lib, make, shapes):
        return make(lib.keras)([data(s, 0) for s in shapes])

    conform(case, lambda k: k.layers.Subtract(), [(2, 3)] * 3)
    conform(case, lambda k: k.layers.Add(), [(2, 3), (3, 3)])
    conform(case, lambda k: k.layers.Multiply(), [(2, 3), (2, 4)])


POOLS = {
    "avg-2x2": (lambda k: k.layers.AveragePooling2D(2), (2, 6, 5, 3)),
    "avg-3-stride-2-same": (
        lambda k: k.layers.AveragePooling2D(3, 2, padding="same"),
        (2, 7, 6, 2),
    ),
    "avg-2x3-stride-1x2-same": (
        lambda k: k.layers.AveragePooling2D((2, 3), (1, 2), padding="same"),
        (2, 5, 6, 2),
    ),
    "avg-3-stride-1-valid": (lambda k: k.layers.AveragePooling2D(3, strides=1), (1, 5, 5, 2)),
    "max-3-stride-2-same": (lambda k: k.layers.MaxPooling2D(3, 2, padding="same"), (2, 7, 6, 2)),
    "global-avg-2d": (lambda k: k.layers.GlobalAveragePooling2D(), (2, 4, 5, 3)),
    "global-avg-2d-keepdims": (
        lambda k: k.layers.GlobalAveragePooling2D(keepdims=True),
        (2, 3, 3, 2),
    ),
    "global-max-2d": (lambda k: k.layers.GlobalMaxPooling2D(), (2, 4, 5, 3)),
    "global-max-2d-keepdims": (lambda k: k.layers.GlobalMaxPooling2D(keepdims=True), (2, 3, 3, 2)),
    "global-avg-1d": (lambda k: k.layers.GlobalAveragePooling1D(), (2, 5, 3)),
    "global-max-1d": (lambda k: k.layers.GlobalMaxPooling1D(), (2, 5, 3)),
    "zero-padding-int": (lambda k: k.layers.ZeroPadding2D(2), (2, 3, 2, 2)),
    "zero-padding-pair": (lambda k: k.layers.ZeroPadding2D((1, 2)), (2, 3, 2, 2)),
    "zero-padding-pairs": (lambda k: k.layers.ZeroPadding2D(((1, 0), (2, 3))), (2, 3, 2, 2)),
}


@pytest.mark.parametrize("name", sorted(POOLS))
def test_pooling_and_padding(name):
    make, shape = POOLS[name]
    conform(run_layer, make, (shape,))


def test_global_average_pooling_1d_with_mask():
    mask = np.array([[True, True, False, False, True], [True, False, False, False, False]])
    conform(run_layer, lambda k: k.layers.GlobalAveragePooling1D(), ((2, 5, 3),), {"mask": mask})


SOFTMAX = {
    "last-axis": (lambda k: k.layers.Softmax(), None),
    "axis-1": (lambda k: k.layers.Softmax(axis=1), None),
    "axes-1-2": (lambda k: k.layers.Softmax(axis=[1, 2]), None),
    "mask": (lambda k: k.layers.Softmax(), np.array([[[1, 1, 0, 0]], [[1, 0, 0, 0]]], bool)),
    "mask-whole-row": (
        lambda k: k.layers.Softmax(),
        np.array([[[1, 1, 0, 1]], [[0, 0, 0, 0]]], bool),
    ),
    "float-mask": (lambda k: k.layers.Softmax(axis=1), np.array([[[0.9], [0.2], [1.0]]], F32)),
}


@pytest.mark.parametrize("name", sorted(SOFTMAX))
def test_softmax_layer(name):
    make, mask = SOFTMAX[name]
    conform(run_layer, make, ((2, 3, 4),), None if mask is None else {"mask": mask})


ACTIVATIONS = ["gelu", "silu", "swish", "softmax"]


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_activation_by_name(name):
    conform(run_layer, lambda k: k.layers.Activation(name), ((4, 7),))


@pytest.mark.parametrize("name", ["gelu", "swish"])
def test_dense_with_activation(name):
    kernel, bias = data((5, 3), 7) * 2, data((3,), 8)
    conform(
        run_layer, lambda k: k.layers.Dense(3, activation=name), ((4, 5),), None, [kernel, bias]
    )


@pytest.mark.parametrize("approximate", [False, True])
def test_gelu_function(approximate):
    def case(lib):
        x = lib.tf.Variable(np.linspace(-6, 6, 49, dtype=F32))
        with lib.tf.GradientTape() as tape:
            out = lib.keras.activations.gelu(x, approximate=approximate)
            loss = lib.tf.reduce_sum(out * data((49,), 3))
        return out, tape.gradient(loss, x)

    conform(case)


def test_softmax_function_on_any_axis():
    def case(lib, axis):
        x = lib.tf.Variable(data((2, 3, 4), 0))
        with lib.tf.GradientTape() as tape:
            out = lib.keras.activations.softmax(x, axis=axis)
            loss = lib.tf.reduce_sum(out * data((2, 3, 4), 1))
        return out, tape.gradient(loss, x)

    for axis in (0, 1, -1):
        conform(case, axis)


def residual_model(lib):
    """Input -> Dense(gelu) -> Add([x, h]) -> Dense(swish) -> Concatenate -> Dense, same weights."""
    layers = lib.keras.layers
    inputs = lib.keras.Input((6,))
    first = layers.Dense(6, activation="gelu")
    h = first(inputs)
    x = layers.Add()([inputs, h])
    second = layers.Dense(4, activation="swish")
    x = layers.Concatenate()([x, second(x)])
    last = layers.Dense(2)
    model = lib.keras.Model(inputs, last(x))
    for layer, seed in ((first, 10), (second, 20), (last, 30)):
        kernel, bias = layer.kernel, layer.bias
        layer.set_weights([data(tuple(kernel.shape), seed), data(tuple(bias.shape), seed + 1)])
    return model, [first, second, last]


def test_functional_residual_model_output_and_gradients():
    def case(lib):
        model, dense = residual_model(lib)
        x = lib.tf.Variable(data((5, 6), 0))
        with lib.tf.GradientTape() as tape:
            out = model(x)
            loss = lib.tf.reduce_sum(out * data((5, 2), 1))
        sources = [x, *(w for layer in dense for w in (layer.kernel, layer.bias))]
        return out, tape.gradient(loss, sources)

    conform(case)


def test_functional_residual_model_trained_with_fit():
    def case(lib):
        model, _ = residual_model(lib)
        model.compile(lib.keras.optimizers.SGD(0.05), "mse")
        history = model.fit(
            data((16, 6), 2), data((16, 2), 3), batch_size=4, epochs=2, shuffle=False, verbose=0
        )
        return history.history["loss"], model.get_weights()

    conform(case)


@pytest.mark.parametrize(
    ("pool", "strides", "padding", "shape"),
    [(2, None, "valid", (2, 6, 7, 3)), (3, 2, "same", (2, 7, 6, 2)), (3, 1, "valid", (1, 5, 5, 2))],
)
def test_max_pooling_gradient_of_ties_goes_to_the_first_maximum(pool, strides, padding, shape):
    """Inputs with many equal values (rounded, half of them the zeros a ReLU leaves)."""

    def case(lib):
        x = np.maximum(np.round(data(shape, 5)), 0.0).astype(F32)
        v = lib.tf.Variable(x)
        layer = lib.keras.layers.MaxPooling2D(pool, strides, padding=padding)
        with lib.tf.GradientTape() as tape:
            out = layer(v)
            loss = lib.tf.reduce_sum(out * data(tuple(out.shape), 98))
        return out, tape.gradient(loss, v)

    conform(case)


CONVS = {
    "depthwise-valid": (lambda k: k.layers.DepthwiseConv2D(3), (2, 6, 6, 3), [(3, 3, 3, 1), (3,)]),
    "depthwise-same-stride-2-multiplier-2": (
        lambda k: k.layers.DepthwiseConv2D(3, strides=2, padding="same", depth_multiplier=2),
        (2, 7, 5, 3),
        [(3, 3, 3, 2), (6,)],
    ),
    "depthwise-2x3-multiplier-3-relu-no-bias": (
        lambda k: k.layers.DepthwiseConv2D(
            (2, 3), depth_multiplier=3, activation="relu", use_bias=False
        ),
        (2, 5, 6, 2),
        [(2, 3, 2, 3)],
    ),
    "conv-groups-2-same": (
        lambda k: k.layers.Conv2D(6, 3, padding="same", groups=2),
        (2, 5, 5, 4),
        [(3, 3, 2, 6), (6,)],
    ),
    "conv-groups-4-stride-2": (
        lambda k: k.layers.Conv2D(8, 2, strides=2, groups=4, activation="relu"),
        (2, 6, 6, 8),
        [(2, 2, 2, 8), (8,)],
    ),
}


@pytest.mark.parametrize("name", sorted(CONVS))
def test_depthwise_and_grouped_convolutions(name):
    make, shape, weight_shapes = CONVS[name]
    weights = [data(w, 10 + i) for i, w in enumerate(weight_shapes)]
    conform(run_layer, make, (shape,), None, weights)


def test_grouped_and_depthwise_errors():
    def case(lib, make, shape):
        return make(lib.keras)(data(shape, 0))

    for make, shape in (
        (lambda k: k.layers.Conv2D(6, 3, groups=4), (1, 5, 5, 4)),  # filters not divisible
        (lambda k: k.layers.Conv2D(6, 3, groups=3), (1, 5, 5, 4)),  # channels not divisible
    ):
        conform(case, make, shape)
