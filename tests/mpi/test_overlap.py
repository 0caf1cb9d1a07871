"""The overlapped gradient all-reduce gives the weights of the fused one, bit for bit.

Run at 2 and 3 ranks, and at 4 ranks in 2 fake nodes (``HPCDIST_RANKS_PER_NODE=2``): the
shared-memory backend adds the ranks of each element in rank order whatever the message, so
starting buckets early must not change one bit of the trained weights.
"""

import contextlib
import os

import numpy as np
import pytest

import hpcdist as hd
from hpcdist.core.autodiff import GradientTape
from hpcdist.settings import get_settings
from hpcdist.strategies.grad_buckets import overlapped_reduction
from hpcdist.utils.xp import to_numpy
from tests import training_cases as cases

pytestmark = pytest.mark.mpi(min_size=2)


@pytest.fixture(scope="module")
def strategy():
    return hd.MultiWorkerMirroredStrategy()


@contextlib.contextmanager
def overlap(enabled, bucket_bytes=None):
    """``HPCDIST_OVERLAP_GRADIENTS`` (and the bucket size) for the steps inside, on every rank."""
    names = ("HPCDIST_OVERLAP_GRADIENTS", "HPCDIST_OVERLAP_BUCKET_BYTES")
    saved = {name: os.environ.get(name) for name in names}
    os.environ[names[0]] = "1" if enabled else "0"
    if bucket_bytes is not None:
        os.environ[names[1]] = str(bucket_bytes)
    get_settings(refresh=True)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        get_settings(refresh=True)


def mlp(strategy, optimizer, seed=4):
    hd.nn.set_random_seed(seed)
    with strategy.scope():
        model = hd.nn.Sequential(
            [
                hd.nn.layers.Dense(48, activation="relu", input_shape=(12,)),
                hd.nn.layers.Dense(40, activation="tanh"),
                hd.nn.layers.Dense(32, activation="relu"),
                hd.nn.layers.Dense(5),
            ]
        )
        model.compile(
            optimizer=optimizer(),
            loss=hd.nn.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
    return model


def data(n=180, features=12, classes=5):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((n, features)).astype(np.float32)
    return x, (x @ rng.standard_normal((features, classes))).argmax(axis=1)


def trained(strategy, build, enabled, bucket_bytes=None, epochs=2, batch_size=36):
    x, y = data()
    with overlap(enabled, bucket_bytes):
        model = build(strategy)
        initial = model.get_weights()
        history = model.fit(x, y, batch_size=batch_size, epochs=epochs, verbose=0, seed=3)
    moved = max(
        float(np.abs(a - b).max()) for a, b in zip(initial, model.get_weights(), strict=True)
    )
    assert moved > 1e-3  # the steps did something
    return model.get_weights(), history.history["loss"]


def assert_bitwise_equal(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        x, y = to_numpy(x), to_numpy(y)  # GPU gradients (the device simulator) to the host
        assert x.dtype == y.dtype and x.shape == y.shape
        assert np.array_equal(x, y), float(np.abs(x - y).max())


@pytest.mark.parametrize("bucket_bytes", [0, 2048, 4 << 20])
def test_fit_weights_equal_without_overlap_bit_for_bit(strategy, bucket_bytes):
    def build(s):
        return mlp(s, lambda: hd.nn.optimizers.SGD(0.1, momentum=0.9, nesterov=True))

    plain, plain_loss = trained(strategy, build, False)
    overlapped, loss = trained(strategy, build, True, bucket_bytes)
    assert_bitwise_equal(plain, overlapped)
    assert plain_loss == loss


def test_global_clipnorm_applies_after_the_reduction(strategy):
    def build(s, clip=0.05):
        return mlp(s, lambda: hd.nn.optimizers.SGD(0.5, global_clipnorm=clip))

    plain, _ = trained(strategy, build, False)
    overlapped, _ = trained(strategy, build, True, 2048)
    assert_bitwise_equal(plain, overlapped)
    # The clip is active, and clips the summed gradient (one process on the global batch).
    unclipped, _ = trained(strategy, lambda s: build(s, clip=1e6), True, 2048)
    assert max(float(np.abs(a - b).max()) for a, b in zip(plain, unclipped, strict=True)) > 1e-3
    x, y = data()
    reference = build(hd.get_strategy())
    reference.fit(x, y, batch_size=36, epochs=2, verbose=0, seed=3)
    for a, b in zip(reference.get_weights(), overlapped, strict=True):
        np.testing.assert_allclose(b, a, atol=2e-6)


def test_adam_embedding_and_regularizer_model(strategy):
    def build(s):
        hd.nn.set_random_seed(2)
        with s.scope():
            model = hd.nn.Sequential(
                [
                    hd.nn.layers.Embedding(30, 8, input_shape=(4,)),
                    hd.nn.layers.Flatten(),
                    hd.nn.layers.Dense(
                        16, activation="relu", kernel_regularizer=hd.nn.regularizers.L2(1e-2)
                    ),
                    hd.nn.layers.Dense(3),
                ]
            )
            model.compile(
                optimizer=hd.nn.optimizers.Adam(0.01),
                loss=hd.nn.losses.SparseCategoricalCrossentropy(from_logits=True),
            )
        return model

    rng = np.random.default_rng(1)
    x = rng.integers(0, 30, (120, 4))
    y = x.sum(axis=1) % 3
    weights = {}
    for enabled in (False, True):
        with overlap(enabled, 1024):
            model = build(strategy)
            model.fit(x, y, batch_size=24, epochs=2, verbose=0, seed=1)
            weights[enabled] = model.get_weights()
    assert_bitwise_equal(weights[False], weights[True])


def test_fit_with_overlap_matches_one_process(strategy):
    with overlap(True, 1024):
        cases.check_fit_matches_one_process(strategy, epochs=2)


def test_buckets_start_before_the_backward_pass_ends(strategy):
    comm = strategy.extended.communicator
    model = mlp(strategy, lambda: hd.nn.optimizers.SGD(0.1))
    variables = model.trainable_variables
    x, y = data(n=12 * comm.size)
    mine = slice(12 * comm.rank, 12 * (comm.rank + 1))  # each rank its own rows
    loss_fn = hd.nn.losses.SparseCategoricalCrossentropy(from_logits=True)

    def step():
        with GradientTape() as tape:
            loss = loss_fn(y[mine], model(x[mine]))
        with overlap(True, 0):  # one bucket per variable
            reduction = overlapped_reduction(strategy, variables)
        started = {}

        def ready(index, grad):
            started[index] = reduction.buckets_started  # buckets running before this one
            reduction.ready(index, grad)

        grads = tape.gradient(loss, variables, on_final=ready)
        return grads, started, reduction.finish(grads)

    grads, started, reduced = strategy.run(step)
    # The first kernel is final last: by then every later variable's all-reduce had started.
    assert started[0] == len(variables) - 1
    fused = comm.grouped_allreduce(grads)
    assert_bitwise_equal(fused, reduced)
    everyone = comm.allgather_object([to_numpy(g) for g in grads])
    for i, r in enumerate(reduced):
        expected = sum(g[i] for g in everyone)
        np.testing.assert_allclose(to_numpy(r), expected, rtol=1e-6, atol=1e-7)
    with overlap(False):
        assert overlapped_reduction(strategy, variables) is None
