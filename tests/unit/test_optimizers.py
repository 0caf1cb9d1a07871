"""Optimizer update rules against Keras' formulas, schedules, and the one-all-reduce rule."""

import numpy as np
import pytest

import hpcdist as hd
from hpcdist.nn import optimizers

G = np.array([0.5, -1.0, 2.0])


def run(opt, steps=3):
    v = hd.get_strategy().Variable(np.array([1.0, 2.0, 3.0]))
    for _ in range(steps):
        opt.apply_gradients([(G, v)])
    return v.numpy()


def test_sgd_momentum_and_nesterov():
    assert np.allclose(run(optimizers.SGD(0.1), 1), [1, 2, 3] - 0.1 * G)
    w, vel = np.array([1.0, 2.0, 3.0]), np.zeros(3)
    for _ in range(3):
        vel = 0.9 * vel - 0.1 * G
        w = w + vel
    assert np.allclose(run(optimizers.SGD(0.1, momentum=0.9)), w)
    w, vel = np.array([1.0, 2.0, 3.0]), np.zeros(3)
    for _ in range(3):
        vel = 0.9 * vel - 0.1 * G
        w = w + 0.9 * vel - 0.1 * G
    assert np.allclose(run(optimizers.SGD(0.1, momentum=0.9, nesterov=True)), w)


def adam_reference(steps, lr=0.01, b1=0.9, b2=0.999, eps=1e-7, wd=0.0):
    w, m, v = np.array([1.0, 2.0, 3.0]), np.zeros(3), np.zeros(3)
    for t in range(1, steps + 1):
        w = w - lr * wd * w
        m = m + (G - m) * (1 - b1)
        v = v + (G * G - v) * (1 - b2)
        w = w - lr * np.sqrt(1 - b2**t) / (1 - b1**t) * m / (np.sqrt(v) + eps)
    return w


def test_adam_adamw_rmsprop():
    assert np.allclose(run(optimizers.Adam(0.01)), adam_reference(3))
    assert np.allclose(run(optimizers.AdamW(0.01, weight_decay=0.1)), adam_reference(3, wd=0.1))
    w, vel = np.array([1.0, 2.0, 3.0]), np.zeros(3)
    for _ in range(3):
        vel = 0.9 * vel + 0.1 * G * G
        w = w - 0.01 * G / np.sqrt(vel + 1e-7)
    assert np.allclose(run(optimizers.RMSprop(0.01)), w)
    assert run(optimizers.RMSprop(0.01, centered=True, momentum=0.5)).shape == (3,)


def test_schedules_and_names():
    decay = optimizers.ExponentialDecay(0.1, decay_steps=2, decay_rate=0.5)
    assert np.isclose(decay(2), 0.05) and np.isclose(decay(1), 0.1 * 0.5**0.5)
    assert np.isclose(optimizers.ExponentialDecay(0.1, 2, 0.5, staircase=True)(3), 0.05)
    pieces = optimizers.PiecewiseConstantDecay([2, 4], [1.0, 0.5, 0.1])
    assert [pieces(s) for s in (0, 2, 3, 5)] == [1.0, 1.0, 0.5, 0.1]
    opt = optimizers.SGD(decay)
    run(opt, 2)
    assert np.isclose(opt.learning_rate, 0.05) and opt.iterations.numpy() == 2
    assert isinstance(optimizers.get("adam"), optimizers.Adam)
    with pytest.raises(ValueError, match="unknown optimizer"):
        optimizers.get("lbfgs")
    with pytest.raises(ValueError, match="momentum"):
        optimizers.SGD(momentum=2)
    with pytest.raises(ValueError, match="one more entry"):
        optimizers.PiecewiseConstantDecay([1], [1.0])


def test_gradients_are_all_reduced_once_per_step(monkeypatch):
    s = hd.MirroredStrategy(["cpu:0", "cpu:1"])
    with s.scope():
        v = s.Variable(np.zeros(2))
        opt = optimizers.SGD(1.0)
    calls = []
    original = type(s.extended).batch_reduce_to

    def counting(self, op, pairs):
        calls.append(len(pairs))
        return original(self, op, pairs)

    monkeypatch.setattr(type(s.extended), "batch_reduce_to", counting)

    def step():
        rid = hd.get_replica_context().replica_id_in_sync_group
        opt.apply_gradients([(np.full(2, rid + 1.0), v)])

    s.run(step)
    assert calls == [1]  # one fused reduction for the step, not one per replica
    assert np.allclose(v.numpy(), -3.0)  # gradients summed over replicas: -(1 + 2)
