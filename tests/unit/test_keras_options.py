"""Keras' optimizer and loss options against TensorFlow 2.21's values (tests/unit/data).

clipnorm, clipvalue and global_clipnorm (one of them at most), Adam's amsgrad, and
label_smoothing of the binary and categorical cross-entropies.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import hpcdist as hd

REF = json.loads((Path(__file__).parent / "data" / "keras_options_tf2.21.json").read_text())
GRADS = [
    ([0.3, -0.4], [[0.5], [1.2]]),
    ([0.1, 0.2], [[-2.0], [0.1]]),
    ([-0.5, 0.05], [[0.0], [0.3]]),
]


def run(optimizer) -> list:
    v0 = hd.Variable(np.array([1.0, 2.0], np.float32))
    v1 = hd.Variable(np.array([[3.0], [4.0]], np.float32))
    history = []
    for g0, g1 in GRADS:
        optimizer.apply_gradients([(np.array(g0, np.float32), v0), (np.array(g1, np.float32), v1)])
        history.append([v0.numpy().tolist(), v1.numpy().tolist()])
    return history


@pytest.mark.parametrize(
    ("key", "make"),
    [
        ("sgd_clipnorm", lambda: hd.nn.optimizers.SGD(0.1, clipnorm=0.25)),
        ("sgd_clipvalue", lambda: hd.nn.optimizers.SGD(0.1, clipvalue=0.2)),
        ("sgd_global_clipnorm", lambda: hd.nn.optimizers.SGD(0.1, global_clipnorm=0.5)),
        ("adam_amsgrad", lambda: hd.nn.optimizers.Adam(0.1, amsgrad=True)),
    ],
)
def test_optimizer_option_matches_keras(key, make) -> None:
    for got, want in zip(run(make()), REF[key], strict=True):
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)


def test_only_one_clipping_option() -> None:
    with pytest.raises(ValueError) as error:
        hd.nn.optimizers.SGD(0.1, clipnorm=1.0, clipvalue=1.0)
    assert str(error.value) == REF["both_error"]


def test_label_smoothing_matches_keras() -> None:
    yt = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], np.float32)
    yp = np.array([[0.9, 0.2], [0.3, 0.6], [0.7, 0.99]], np.float32)
    bce = hd.nn.losses.BinaryCrossentropy(label_smoothing=0.2)
    np.testing.assert_allclose(float(np.asarray(bce(yt, yp))), REF["bce_ls"], rtol=1e-5)
    logits = np.array([[2.0, -1.0], [0.5, 0.3], [-1.0, 3.0]], np.float32)
    bce = hd.nn.losses.BinaryCrossentropy(from_logits=True, label_smoothing=0.1)
    np.testing.assert_allclose(float(np.asarray(bce(yt, logits))), REF["bce_ls_logits"], rtol=1e-5)
    ct = np.array([[1, 0, 0], [0, 0, 1]], np.float32)
    cp = np.array([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6]], np.float32)
    cce = hd.nn.losses.CategoricalCrossentropy(label_smoothing=0.3)
    np.testing.assert_allclose(float(np.asarray(cce(ct, cp))), REF["cce_ls"], rtol=1e-5)
    cl = np.array([[2.0, 0.5, -1.0], [0.1, 0.2, 1.5]], np.float32)
    cce = hd.nn.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.3)
    np.testing.assert_allclose(float(np.asarray(cce(ct, cl))), REF["cce_ls_logits"], rtol=1e-5)
    with pytest.raises(TypeError):
        hd.nn.losses.SparseCategoricalCrossentropy(label_smoothing=0.1)  # as Keras: no option


def test_a_model_compiled_with_each_loss_saves_and_loads(tmp_path) -> None:
    for loss in (
        hd.nn.losses.SparseCategoricalCrossentropy(from_logits=True),
        hd.nn.losses.CategoricalCrossentropy(label_smoothing=0.1),
        hd.nn.losses.BinaryCrossentropy(label_smoothing=0.2),
    ):
        model = hd.nn.Sequential([hd.nn.layers.Dense(3, input_shape=(2,))])
        model.compile(hd.nn.optimizers.Adam(0.01, amsgrad=True, clipnorm=1.0), loss)
        model.predict(np.ones((1, 2), np.float32), verbose=0)
        path = str(tmp_path / f"{type(loss).__name__}.h5")
        model.save(path)
        again = hd.nn.models.load_model(path)
        assert type(again.loss) is type(loss)
        smoothing = getattr(loss, "label_smoothing", 0.0)
        assert getattr(again.loss, "label_smoothing", 0.0) == smoothing
        assert again.optimizer.amsgrad and again.optimizer.clipnorm == 1.0
