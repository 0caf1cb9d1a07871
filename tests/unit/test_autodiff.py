import numpy as np
import pytest

import hpcdist as hd
from hpcdist.core import math_ops as ops
from tests.gradcheck import check_variables


def var(shape, seed=0, positive=False):
    x = np.random.default_rng(seed).standard_normal(shape)
    return hd.get_strategy().Variable(np.abs(x) + 0.5 if positive else x)


UNARY = [
    ops.exp,
    ops.tanh,
    ops.sigmoid,
    ops.softplus,
    ops.relu,
    ops.square,
    ops.negative,
    ops.abs,
    lambda a: ops.power(a, 3),
    lambda a: ops.log_softmax(a, -1),
    lambda a: ops.softmax(a, 0),
]


@pytest.mark.parametrize("fn", UNARY)
def test_unary_gradients(fn):
    v = var((3, 4), seed=1)
    weights = np.random.default_rng(9).standard_normal((3, 4))
    check_variables(lambda: ops.reduce_sum(ops.multiply(fn(v), weights)), [v])


def test_abs_value_and_gradient_match_tf_at_zero():
    # TF 2.21: tf.abs([0, 1, -2]) = [0, 1, 2]; its gradient is sign(x) = [0, 1, -1], 0 at 0.
    v = hd.get_strategy().Variable(np.array([0.0, 1.0, -2.0]))
    with hd.nn.GradientTape() as tape:
        y = ops.reduce_sum(ops.abs(v))
    assert float(y) == 3.0
    np.testing.assert_array_equal(tape.gradient(y, v), [0.0, 1.0, -1.0])


def test_log_sqrt_divide_on_positive_inputs():
    v, w = var((5,), 2, positive=True), var((5,), 3, positive=True)
    check_variables(lambda: (ops.log(v) + ops.sqrt(w) + v / w).sum(), [v, w])


def test_broadcasting_matmul_and_reductions():
    x = var((4, 3), 4)
    w = var((3, 2), 5)
    b = var((2,), 6)
    check_variables(lambda: ((x @ w + b) ** 2).mean(axis=0).sum(), [x, w, b])
    check_variables(lambda: (x * b[:1]).sum(axis=1, keepdims=True).mean(), [x, b])
    check_variables(lambda: ops.maximum(x, 0.1).reshape(-1)[::2].sum(), [x])


def test_gather_scatters_gradients_back():
    table = var((6, 3), 7)
    ids = np.array([[0, 2], [2, 5]])
    check_variables(lambda: (ops.gather(table, ids) * np.arange(3)).sum(), [table])


def test_tape_rules():
    v = var((2,), 8)
    frozen = hd.get_strategy().Variable(np.ones(2), trainable=False)
    with hd.nn.GradientTape() as tape:
        y = (v * frozen).sum()
    g_v, g_f = tape.gradient(y, [v, frozen])
    assert np.allclose(g_v, 1.0) and g_f is None  # non-trainable variables are not watched
    with pytest.raises(RuntimeError, match="non-persistent"):
        tape.gradient(y, [v])
    with hd.nn.GradientTape(persistent=True) as tape:
        tape.watch(frozen)
        y = (v * frozen).sum()
        z = y * 3
    assert np.allclose(tape.gradient(y, frozen), v.numpy())
    assert np.allclose(tape.gradient(z, v), 3.0)
    with hd.nn.GradientTape() as tape:
        c = hd.nn.constant([1.0, 2.0])
        tape.watch(c)
        out = (c * c).sum()
    assert np.allclose(tape.gradient(out, c), [2.0, 4.0])
    # Nothing is recorded without a tape.
    assert not (v * 2).trace
    # A value reached twice accumulates both paths.
    with hd.nn.GradientTape() as tape:
        t = v * 1
        y = (t * t + t).sum()
    assert np.allclose(tape.gradient(y, v), 2 * v.numpy() + 1)


def test_the_graph_keeps_only_what_each_gradient_needs():
    # An operation refers to its inputs' nodes, not to the tensors: an intermediate that no
    # backward captured (a ReLU keeps its mask, an add nothing) is freed with its tensor.
    import weakref

    v = var((4, 3), 9)
    with hd.nn.GradientTape() as tape:
        h = v * 2.0
        gone = weakref.ref(h)
        y = ops.reduce_sum(ops.add(ops.relu(h), 1.0))
        del h
        assert gone() is None
    assert np.allclose(tape.gradient(y, v), 2.0 * (v.numpy() > 0))
