"""``trainable`` as Keras 3 sets it: a frozen model freezes every nested layer and model."""

import numpy as np

import hpcdist as hd

layers = hd.nn.layers


def nested_model():
    hd.nn.set_random_seed(0)
    inner = hd.nn.Sequential(
        [layers.Dense(4, input_shape=(3,)), layers.BatchNormalization()], name="inner"
    )
    model = hd.nn.Sequential([inner, layers.Dense(2)])
    model(np.zeros((2, 3), np.float32))  # built
    return model, inner


def names(variables):
    return sorted(v.name for v in variables)


def test_a_frozen_model_freezes_nested_models_and_thaws_back():
    model, inner = nested_model()
    trainable = names(model.trainable_variables)
    assert len(trainable) == 6  # 2 Dense kernels and biases, gamma, beta
    model.trainable = False
    assert model.trainable_variables == [] and not inner.trainable
    assert not inner.layers[1].trainable  # BatchNormalization: inference statistics from now
    assert len(model.non_trainable_variables) == 8
    model.trainable = True
    assert names(model.trainable_variables) == trainable  # moving statistics stay frozen
    assert all(layer.trainable for layer in inner.layers)


def test_fit_leaves_a_frozen_nested_model_unchanged():
    model, inner = nested_model()
    inner.trainable = False
    before = [w.numpy().copy() for w in inner.weights]
    model.compile(optimizer=hd.nn.optimizers.SGD(0.1), loss="mse")
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((32, 3)).astype(np.float32), np.zeros((32, 2), np.float32)
    head = model.layers[1].weights[0].numpy().copy()
    model.fit(x, y, batch_size=8, epochs=2, verbose=0)
    for a, w in zip(before, inner.weights, strict=True):
        assert np.array_equal(a, w.numpy()), w.name  # moving statistics included
    assert not np.array_equal(head, model.layers[1].weights[0].numpy())  # the head trained
