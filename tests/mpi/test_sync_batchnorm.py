"""Synchronized BatchNormalization under MultiWorkerMirroredStrategy equals one process.

A small residual CNN with ``BatchNormalization(synchronized=True)`` trained with ``fit`` on any
number of ranks ends with the same weights and moving statistics as the same model trained by
one process on the same global batches (the batch of 10 splits unevenly over 3 or 4 ranks).
Without ``synchronized``, each rank's moving statistics follow its own part of the batches.
"""

import numpy as np
import pytest

import hpcdist as hd
from hpcdist.nn import layers

pytestmark = pytest.mark.mpi(min_size=2)


@pytest.fixture(scope="module")
def strategy():
    return hd.MultiWorkerMirroredStrategy()


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


def cnn_data(n=30):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((n, 5, 5, 2)).astype(np.float32) * 2 + 1
    return x, rng.standard_normal((n, 2)).astype(np.float32)


def moving_statistics(model):
    return [
        var.numpy()
        for layer in model.layers
        if isinstance(layer, layers.BatchNormalization)
        for var in (layer.moving_mean, layer.moving_variance)
    ]


def test_synchronized_fit_matches_one_process(strategy):
    x, y = cnn_data()
    reference = residual_cnn(True)
    initial = reference.get_weights()
    ref_history = reference.fit(x, y, batch_size=10, epochs=3, verbose=0, seed=5)
    trained = reference.get_weights()
    assert max(np.abs(a - b).max() for a, b in zip(initial, trained, strict=True)) > 1e-2
    with strategy.scope():
        model = residual_cnn(True)
    history = model.fit(x, y, batch_size=10, epochs=3, verbose=0, seed=5)
    for a, b in zip(trained, model.get_weights(), strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)
    for a, b in zip(moving_statistics(reference), moving_statistics(model), strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(history.history["loss"], ref_history.history["loss"], rtol=1e-4)
    np.testing.assert_allclose(model.predict(x), reference.predict(x), rtol=1e-4, atol=1e-5)


def test_synchronized_moving_statistics_are_the_same_on_every_rank(strategy, comm):
    x, y = cnn_data()
    with strategy.scope():
        model = residual_cnn(True)
    model.fit(x, y, batch_size=10, epochs=1, verbose=0, shuffle=False)
    mine = np.concatenate(moving_statistics(model))
    chief = comm.broadcast(mine, root=0)
    np.testing.assert_array_equal(mine, chief)


def test_unsynchronized_ranks_keep_their_own_moving_statistics(strategy, comm):
    x, y = cnn_data()
    with strategy.scope():
        model = residual_cnn(False)
    model.fit(x, y, batch_size=10, epochs=1, verbose=0, shuffle=False)
    mine = np.concatenate(moving_statistics(model))
    chief = comm.broadcast(mine, root=0)
    differs = comm.allreduce(np.array([float(np.abs(mine - chief).max() > 1e-4)]), "max")
    assert differs[0] == 1.0  # some rank's statistics followed other batches than the chief's
    weights = np.concatenate([w.ravel() for w in model.get_weights()[:2]])
    np.testing.assert_array_equal(weights, comm.broadcast(weights, root=0))  # kernels agree
