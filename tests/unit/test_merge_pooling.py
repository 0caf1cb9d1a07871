"""Merge layers, average/global poolings, ZeroPadding2D, Softmax, GELU/SiLU and erf.

Values against their definitions (``math.erf`` for erf and GELU), shapes and Keras' errors,
gradients against central differences in float64 (`tests.gradcheck`), a functional residual
block, and the same block trained with `fit` on two local replicas against one.
TF 2.21's own numbers for these layers are in tests/conformance/test_layers_merge_pool.py.
"""

import math

import numpy as np
import pytest

import hpcdist as hd
from hpcdist.core import array_ops, max_pool, special_ops, windows
from hpcdist.core import math_ops as ops
from hpcdist.nn import activations, layers, optimizers
from hpcdist.nn.functional import Functional
from hpcdist.nn.pooling import avg_pool2d
from tests.gradcheck import check_variables


def var(shape, seed=0):
    return hd.get_strategy().Variable(np.random.default_rng(seed).standard_normal(shape))


def weights_like(shape, seed=9):
    return np.random.default_rng(seed).standard_normal(shape)


def check(fn, variables, shape):
    """Central differences of ``sum(fn() * w)`` for fixed random ``w`` of ``shape``."""
    w = weights_like(shape)
    check_variables(lambda: ops.reduce_sum(ops.multiply(fn(), w)), variables)


# -- erf, GELU, SiLU ---------------------------------------------------------------------------


def test_erf_matches_math_erf_to_float64_precision():
    x = np.concatenate([np.linspace(-7, 7, 4001), [0.0, 1e-300, -1e-8, 2.0, -2.0, 6.0, 40.0]])
    got = special_ops.erf(x).numpy()
    expected = np.array([math.erf(v) for v in x])
    np.testing.assert_allclose(got, expected, rtol=6e-15, atol=0)
    edge = special_ops.erf(np.array([np.inf, -np.inf, np.nan])).numpy()
    assert edge[0] == 1.0 and edge[1] == -1.0 and np.isnan(edge[2])
    small = special_ops.erf(np.linspace(-3, 3, 7, dtype=np.float32))
    assert small.dtype == np.float32
    with pytest.raises(TypeError, match="floating-point tensor, got dtype int"):
        special_ops.erf(np.arange(3))


def test_float32_erf_is_within_three_float32_ulps_of_math_erf():
    x = np.concatenate([np.linspace(-7, 7, 20001), [1e-30, 2.0, -2.0, 6.0]]).astype(np.float32)
    got = special_ops.erf(x).numpy()
    assert got.dtype == np.float32
    expected = np.array([math.erf(v) for v in x.astype(np.float64)])
    ulps = np.abs(got - expected) / np.spacing(np.abs(expected).astype(np.float32))
    assert ulps.max() <= 3.0, (ulps.max(), x[np.argmax(ulps)])
    half = special_ops.erf(x.astype(np.float16)).numpy()
    assert half.dtype == np.float16
    np.testing.assert_allclose(half, expected, atol=1e-3)


def test_normal_cdf_keeps_its_relative_accuracy_in_the_left_tail():
    v = np.linspace(-8.4, 8.4, 8001)
    expected = np.array([0.5 * math.erfc(-t / math.sqrt(2)) for t in v])
    np.testing.assert_allclose(special_ops.normal_cdf_values(v), expected, rtol=5e-13, atol=0)
    v32 = v.astype(np.float32)
    f32 = special_ops.normal_cdf_values(v32)
    assert f32.dtype == np.float32
    expected = np.array([0.5 * math.erfc(-t / math.sqrt(2)) for t in v32.astype(np.float64)])
    left = v < -5.5  # cdf < 2e-8: 1 + erf in float32 would keep no digit of it; erfc keeps five
    np.testing.assert_allclose(f32[left], expected[left], rtol=1e-5, atol=0)
    np.testing.assert_allclose(f32, expected, rtol=5e-5, atol=2e-7)
    assert np.isnan(special_ops.normal_cdf_values(np.array([np.nan])))[0]
    assert special_ops.normal_cdf_values(np.array([-40.0, 40.0])).tolist() == [0.0, 1.0]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_erf_and_the_normal_cdf_of_any_layout_and_of_0d_arrays(dtype):
    """Transposed, strided and 0-d inputs give the values of the same numbers laid out flat.

    The tail piece is computed at flat positions, so the layout must not move them; a 0-d input
    used to fail inside the tail piece (numpy's ufuncs return scalars on 0-d arrays).
    """
    x = (np.random.default_rng(3).standard_normal((40, 30)) * 3).astype(dtype)
    for f in (special_ops.erf_values, special_ops.normal_cdf_values):
        flat = f(x.reshape(-1))
        for view, picked in ((x.T, x.T.reshape(-1)), (x[::3, 1::2], x[::3, 1::2].reshape(-1))):
            got = f(view)
            assert got.shape == view.shape and got.dtype == x.dtype
            np.testing.assert_array_equal(got.reshape(-1), f(picked))
        np.testing.assert_array_equal(f(x), flat.reshape(x.shape))
    for v in (0.3, -2.5, 7.0):
        scalar = np.asarray(v, dtype)
        assert special_ops.erf_values(scalar) == pytest.approx(math.erf(v), rel=1e-6)
        expected = 0.5 * math.erfc(-v / math.sqrt(2))
        assert special_ops.normal_cdf_values(scalar) == pytest.approx(expected, rel=1e-5)
    assert float(special_ops.gelu(np.asarray(-2.5, dtype))) == pytest.approx(
        -2.5 * 0.5 * math.erfc(2.5 / math.sqrt(2)), rel=1e-5
    )


def test_gelu_and_silu_values():
    x = np.linspace(-5, 5, 101)
    exact = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x])
    np.testing.assert_allclose(activations.gelu(x).numpy(), exact, rtol=1e-12, atol=1e-15)
    tanh_form = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    np.testing.assert_allclose(activations.gelu(x, approximate=True).numpy(), tanh_form, 1e-14)
    np.testing.assert_allclose(activations.silu(x).numpy(), x / (1 + np.exp(-x)), rtol=1e-14)
    assert (
        activations.get("swish") is activations.silu and activations.get("gelu") is activations.gelu
    )
    assert activations.name_of(activations.swish) == "silu"
    dense = layers.Dense(3, activation="gelu")
    assert dense.get_config()["activation"] == "gelu"
    assert dense(np.ones((2, 4), np.float32)).dtype == np.float32


@pytest.mark.parametrize(
    "fn",
    [
        special_ops.erf,
        special_ops.gelu,
        lambda v: special_ops.gelu(v, approximate=True),
        special_ops.silu,
        lambda v: ops.reduce_max(v, axis=1),
        lambda v: ops.reduce_max(v, axis=(0, 2), keepdims=True),
        lambda v: ops.minimum(v, 0.2),
        lambda v: array_ops.pad(v, ((1, 0), (0, 2), (1, 1))),
        lambda v: array_ops.expand_dims(v, 1),
    ],
)
def test_op_gradients(fn):
    v = var((3, 4, 2), seed=1)
    check(lambda: fn(v), [v], fn(v).shape)


def test_reduce_max_shares_the_gradient_of_ties_and_minimum_sends_ties_to_the_first():
    v = hd.get_strategy().Variable(np.array([[1.0, 3.0, 3.0], [2.0, 0.0, 2.0]]))
    with hd.nn.GradientTape() as tape:
        y = ops.reduce_sum(ops.reduce_max(v, axis=1))
    np.testing.assert_array_equal(tape.gradient(y, v), [[0, 0.5, 0.5], [0.5, 0, 0.5]])
    a, b = var((3,)), var((3,), seed=1)
    b.assign(a.numpy())
    with hd.nn.GradientTape() as tape:
        y = ops.reduce_sum(ops.minimum(a, b))
    ga, gb = tape.gradient(y, [a, b])
    np.testing.assert_array_equal(ga, [1, 1, 1])
    np.testing.assert_array_equal(gb, [0, 0, 0])


def test_concat_values_gradients_and_errors():
    a, b = var((2, 3)), var((2, 1), seed=1)
    np.testing.assert_array_equal(
        array_ops.concat([a, b], axis=-1).numpy(), np.concatenate([a.numpy(), b.numpy()], 1)
    )
    check(lambda: array_ops.concat([a, b, a], axis=1), [a, b], (2, 7))
    with pytest.raises(ValueError, match="equal sizes off that axis"):
        array_ops.concat([a, b], axis=0)
    with pytest.raises(ValueError, match="one rank and dtype"):
        array_ops.concat([a, np.zeros(2)])


# -- merge layers ------------------------------------------------------------------------------


def test_merge_layer_values():
    x, y, z = (
        np.random.default_rng(s).standard_normal((4, 3)).astype(np.float32) for s in range(3)
    )
    np.testing.assert_allclose(layers.Add()([x, y, z]).numpy(), x + y + z, rtol=1e-6)
    np.testing.assert_allclose(layers.Subtract()([x, y]).numpy(), x - y)
    np.testing.assert_allclose(layers.Multiply()([x, y, z]).numpy(), x * y * z, rtol=1e-6)
    np.testing.assert_allclose(layers.Average()([x, y, z]).numpy(), (x + y + z) / 3, rtol=1e-6)
    np.testing.assert_array_equal(
        layers.Maximum()([x, y, z]).numpy(), np.maximum(np.maximum(x, y), z)
    )
    np.testing.assert_array_equal(layers.Minimum()([x, y]).numpy(), np.minimum(x, y))
    np.testing.assert_array_equal(layers.Concatenate()([x, y]).numpy(), np.concatenate([x, y], -1))
    np.testing.assert_array_equal(
        layers.Concatenate(axis=1)([x[:, :, None], y[:, :, None]]).numpy().shape, (4, 6, 1)
    )
    assert layers.Add()([x]).numpy().tolist() == x.tolist()  # Keras 3 takes one input
    assert layers.Add().name.startswith("add") and layers.Concatenate().get_config()["axis"] == -1


def test_merge_inputs_of_lower_rank_get_axes_after_the_batch_axis():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.ones((2, 4, 3), np.float32)
    out = layers.Add()([a, b]).numpy()
    assert out.shape == (2, 4, 3)
    np.testing.assert_array_equal(out, a[:, None, :] + b)


def test_merge_errors_name_what_was_expected():
    x = np.ones((2, 3), np.float32)
    with pytest.raises(ValueError, match="exactly 2 inputs, got 3"):
        layers.Subtract()([x, x, x])
    with pytest.raises(ValueError, match="different batch sizes"):
        layers.Add()([x, np.ones((3, 3), np.float32)])
    with pytest.raises(ValueError, match="incompatible shapes"):
        layers.Multiply()([x, np.ones((2, 4), np.float32)])
    with pytest.raises(ValueError, match="list of at least 1 input"):
        layers.Add()(x)
    with pytest.raises(ValueError, match="matching shapes except for the concatenation axis"):
        layers.Concatenate(axis=1)([np.ones((2, 3, 1)), np.ones((2, 1, 3))])
    with pytest.raises(ValueError, match="inputs of one rank"):
        layers.Concatenate()([x, np.ones((2, 1, 3))])


@pytest.mark.parametrize(
    "layer",
    [layers.Add, layers.Subtract, layers.Multiply, layers.Average, layers.Maximum, layers.Minimum],
)
def test_merge_layer_gradients(layer):
    a, b = var((3, 4)), var((3, 4), seed=1)
    merged = layer(dtype="float64")
    check(lambda: merged([a, b]), [a, b], (3, 4))


def test_concatenate_layer_gradients():
    a, b = var((3, 2, 4)), var((3, 1, 4), seed=1)
    merged = layers.Concatenate(axis=1, dtype="float64")
    check(lambda: merged([a, b]), [a, b], (3, 3, 4))


# -- pooling and padding -----------------------------------------------------------------------


def _avg_pool_reference(x, pool, strides, padding):
    """Loops: the mean of each window over the input positions it covers (TF's rule)."""
    n, h, w, c = x.shape
    if padding == "same":
        oh, ow = -(-h // strides[0]), -(-w // strides[1])
        top = max((oh - 1) * strides[0] + pool[0] - h, 0) // 2
        left = max((ow - 1) * strides[1] + pool[1] - w, 0) // 2
    else:
        oh, ow = (h - pool[0]) // strides[0] + 1, (w - pool[1]) // strides[1] + 1
        top = left = 0
    out = np.zeros((n, oh, ow, c))
    for i in range(oh):
        for j in range(ow):
            r0, c0 = i * strides[0] - top, j * strides[1] - left
            rows = slice(max(r0, 0), min(r0 + pool[0], h))
            cols = slice(max(c0, 0), min(c0 + pool[1], w))
            out[:, i, j, :] = x[:, rows, cols, :].mean(axis=(1, 2))
    return out


@pytest.mark.parametrize(
    ("pool", "strides", "padding"),
    [((2, 2), None, "valid"), ((3, 3), (2, 2), "same"), ((2, 3), (1, 2), "same"), (3, 1, "valid")],
)
def test_average_pooling_values_and_gradients(pool, strides, padding):
    x = np.random.default_rng(0).standard_normal((2, 5, 6, 3))
    layer = layers.AveragePooling2D(pool, strides, padding, dtype="float64")
    pair = (pool, pool) if isinstance(pool, int) else pool
    stride = pair if strides is None else ((strides,) * 2 if isinstance(strides, int) else strides)
    np.testing.assert_allclose(
        layer(x).numpy(), _avg_pool_reference(x, pair, stride, padding), rtol=1e-12
    )
    v = var((2, 5, 6, 3))
    check(lambda: avg_pool2d(v, pool, strides, padding), [v], layer(x).shape)
    assert layer.get_config()["padding"] == padding


def _max_pool_gradient_reference(x, g, pool, strides, padding):
    """Each window's gradient to its first maximum in row-major order, window by window."""
    h, w = x.shape[1:3]
    pads = [(0, 0)] * 2
    if padding == "same":
        pads = [windows.same_padding(h, pool[0], strides[0])]
        pads.append(windows.same_padding(w, pool[1], strides[1]))
    padded = np.pad(x, ((0, 0), pads[0], pads[1], (0, 0)), constant_values=-np.inf)
    grad = np.zeros_like(padded)
    for b, i, j, ch in np.ndindex(*g.shape):
        top, left = i * strides[0], j * strides[1]
        window = padded[b, top : top + pool[0], left : left + pool[1], ch]
        first = np.flatnonzero(window.ravel() == window.max())[0]
        grad[b, top + first // pool[1], left + first % pool[1], ch] += g[b, i, j, ch]
    return grad[:, pads[0][0] : pads[0][0] + h, pads[1][0] : pads[1][0] + w]


@pytest.mark.parametrize(
    ("pool", "strides", "padding", "shape"),
    [
        ((2, 2), (2, 2), "valid", (13, 27, 26, 32)),  # several slices, the last one short
        ((2, 2), (2, 2), "same", (7, 27, 27, 40)),  # padded; windows that tile it
        ((2, 3), (3, 3), "valid", (9, 20, 17, 24)),  # rows and columns no window reads
        ((3, 3), (2, 2), "same", (3, 9, 8, 5)),  # overlapping windows (the other path)
        ((15, 17), (15, 17), "valid", (2, 30, 35, 2)),  # 255 positions: the most one byte names
        ((16, 16), (16, 16), "valid", (2, 32, 33, 2)),  # 256: disjoint, on the other path
    ],
)
def test_max_pooling_gradient_goes_to_each_window_first_maximum(pool, strides, padding, shape):
    """Many ties (a ReLU's zeros, rounded values), batches larger than one slice of the gradient."""
    rng = np.random.default_rng(3)
    x = np.maximum(np.round(rng.standard_normal(shape) * 2), 0).astype(np.float32)
    v = hd.constant(x)
    with hd.GradientTape() as tape:
        tape.watch(v)
        out = max_pool.max_pool2d(v, pool, strides, padding)
    g = rng.standard_normal(out.shape).astype(np.float32)
    got = tape.gradient(out, v, output_gradients=g)
    want = _max_pool_gradient_reference(x, g, pool, strides, padding)
    if strides[0] >= pool[0] and strides[1] >= pool[1]:  # one window per position: exact
        np.testing.assert_array_equal(np.asarray(got), want)
    else:  # a position in several windows adds their gradients in another order
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-6)


def test_max_pooling_of_a_nan_window_is_nan_and_sends_no_gradient():
    x = np.arange(32, dtype=np.float32).reshape(1, 4, 4, 2)
    x[0, 1, 0, 1] = np.nan  # the first window's channel 1
    v = hd.constant(x)
    with hd.GradientTape() as tape:
        tape.watch(v)
        out = max_pool.max_pool2d(v, 2)
    grad = np.asarray(tape.gradient(out, v))
    assert np.isnan(out.numpy()[0, 0, 0, 1]) and not np.isnan(out.numpy()[0, 0, 0, 0])
    assert grad[0, :2, :2, 1].sum() == 0 and grad[0, 1, 1, 0] == 1  # 1: that window's maximum
    assert grad.sum() == out.numpy().size - 1


def test_global_poolings():
    x = np.random.default_rng(0).standard_normal((2, 4, 5, 3)).astype(np.float32)
    np.testing.assert_allclose(
        layers.GlobalAveragePooling2D()(x).numpy(), x.mean(axis=(1, 2)), 1e-6
    )
    assert layers.GlobalAveragePooling2D(keepdims=True)(x).shape == (2, 1, 1, 3)
    np.testing.assert_array_equal(layers.GlobalMaxPooling2D()(x).numpy(), x.max(axis=(1, 2)))
    assert layers.GlobalMaxPooling2D(keepdims=True)(x).shape == (2, 1, 1, 3)
    seq = x[:, 0]
    np.testing.assert_allclose(layers.GlobalAveragePooling1D()(seq).numpy(), seq.mean(1), 1e-6)
    np.testing.assert_array_equal(layers.GlobalMaxPooling1D()(seq).numpy(), seq.max(1))
    mask = np.array([[1, 1, 0, 0, 1], [1, 0, 0, 0, 0]], bool)
    masked = layers.GlobalAveragePooling1D()(seq, mask=mask).numpy()
    np.testing.assert_allclose(masked[0], seq[0, [0, 1, 4]].mean(0), rtol=1e-6)
    np.testing.assert_allclose(masked[1], seq[1, 0], rtol=1e-6)
    with pytest.raises(ValueError, match="expects inputs of rank 4"):
        layers.GlobalMaxPooling2D()(seq)
    with pytest.raises(ValueError, match="only data_format='channels_last'"):
        layers.GlobalAveragePooling2D(data_format="channels_first")
    v = var((2, 3, 4, 2))
    for layer in (layers.GlobalAveragePooling2D(dtype="float64"), layers.GlobalMaxPooling2D()):
        check(lambda layer=layer: layer(v), [v], (2, 2))


def test_zero_padding():
    x = np.arange(2 * 2 * 3 * 1, dtype=np.float32).reshape(2, 2, 3, 1)
    assert layers.ZeroPadding2D()(x).shape == (2, 4, 5, 1)
    assert layers.ZeroPadding2D((2, 1))(x).shape == (2, 6, 5, 1)
    out = layers.ZeroPadding2D(((1, 0), (0, 2)))(x).numpy()
    assert out.shape == (2, 3, 5, 1)
    np.testing.assert_array_equal(out[:, 1:, :3], x)
    assert out[:, 0].sum() == 0 and out[:, :, 3:].sum() == 0
    assert layers.ZeroPadding2D(3).get_config()["padding"] == [[3, 3], [3, 3]]
    with pytest.raises(ValueError, match="padding must be an int, a tuple of 2 ints"):
        layers.ZeroPadding2D((1, 2, 3))
    v = var((2, 3, 2, 2))
    check(lambda: layers.ZeroPadding2D(((1, 2), (0, 1)))(v), [v], (2, 6, 3, 2))


# -- Softmax layer -----------------------------------------------------------------------------


def test_softmax_layer_axes_and_mask():
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)

    def softmax(a, axis):
        e = np.exp(a - a.max(axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)

    np.testing.assert_allclose(layers.Softmax()(x).numpy(), softmax(x, -1), rtol=1e-6)
    np.testing.assert_allclose(layers.Softmax(axis=1)(x).numpy(), softmax(x, 1), rtol=1e-6)
    np.testing.assert_allclose(
        layers.Softmax(axis=[1, 2])(x).numpy(), softmax(x, (1, 2)), rtol=1e-5
    )
    mask = np.array([[True, True, False, False], [True, False, False, False]])[:, None, :]
    out = layers.Softmax()(x, mask=mask).numpy()
    np.testing.assert_allclose(out[0, :, :2], softmax(x[0, :, :2], -1), rtol=1e-6)
    assert (out[..., 2:] == 0).all() and np.allclose(out[1, :, 0], 1.0)
    fully = layers.Softmax()(x, mask=np.zeros((2, 1, 4))).numpy()
    assert (fully == 0).all()
    with pytest.raises(ValueError, match="must be broadcastable to the inputs"):
        layers.Softmax()(x, mask=np.ones((2, 3, 3)))
    v = var((2, 3, 4))
    soft = layers.Softmax(axis=1, dtype="float64")
    check(lambda: soft(v, mask=mask), [v], (2, 3, 4))


# -- functional residual block, under MirroredStrategy ----------------------------------------


def _residual_model(seed=0):
    hd.nn.set_random_seed(seed)
    inputs = hd.nn.Input((6,))
    h = layers.Dense(6, activation="gelu")(inputs)
    x = layers.Add()([inputs, h])
    branch = layers.Dense(4, activation="swish")(x)
    x = layers.Concatenate()([x, branch])
    return hd.nn.Model(inputs, layers.Dense(2)(x))


def test_functional_residual_block_is_a_dag():
    model = _residual_model()
    assert isinstance(model, Functional)
    assert [type(layer).__name__ for layer in model.layers] == [
        "InputLayer",
        "Dense",
        "Add",
        "Dense",
        "Concatenate",
        "Dense",
    ]
    x = np.random.default_rng(1).standard_normal((5, 6)).astype(np.float32)
    k1, b1, k2, b2, k3, b3 = (w.numpy() for w in model.weights)
    g = special_ops.gelu(x @ k1 + b1).numpy()
    r = x + g
    s = r @ k2 + b2
    expected = np.concatenate([r, s / (1 + np.exp(-s))], -1) @ k3 + b3
    np.testing.assert_allclose(model(x).numpy(), expected, rtol=1e-5, atol=1e-6)
    again = Functional.from_config(model.get_config())
    again.set_weights(model.get_weights())
    np.testing.assert_allclose(again(x).numpy(), model(x).numpy(), rtol=1e-6)


def test_residual_model_gradients_match_central_differences():
    hd.nn.set_random_seed(3)
    inputs = hd.nn.Input((3, 3, 2))
    h = layers.Dense(2, activation="gelu", dtype="float64")(inputs)
    x = layers.Add(dtype="float64")([inputs, h])
    x = layers.ZeroPadding2D(1, dtype="float64")(x)
    x = layers.AveragePooling2D(2, padding="same", dtype="float64")(x)
    x = layers.GlobalMaxPooling2D(dtype="float64")(x)
    model = hd.nn.Model(inputs, layers.Dense(2, dtype="float64")(x))
    data = np.random.default_rng(0).standard_normal((2, 3, 3, 2))
    check(lambda: model(data), model.trainable_variables, (2, 2))


def _fit(strategy):
    with strategy.scope():
        model = _residual_model(seed=4)
        model.compile(optimizers.SGD(0.1, momentum=0.9), "mse")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 6)).astype(np.float32)
    y = rng.standard_normal((32, 2)).astype(np.float32)
    history = model.fit(x, y, batch_size=8, epochs=3, shuffle=False, verbose=0)
    return model.get_weights(), history.history["loss"]


def test_residual_model_fits_the_same_on_two_local_replicas():
    one_weights, one_loss = _fit(hd.MirroredStrategy(["cpu:0"]))
    two_weights, two_loss = _fit(hd.MirroredStrategy(["cpu:0", "cpu:1"]))
    assert one_loss[-1] < one_loss[0]
    np.testing.assert_allclose(two_loss, one_loss, rtol=1e-5)
    for a, b in zip(two_weights, one_weights, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
