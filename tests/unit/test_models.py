import numpy as np
import pytest

import hpcdist as hd
from tests import training_cases as cases


def test_fit_learns_and_reports():
    x, y = cases.data()
    model = cases.build()
    history = model.fit(x, y, batch_size=16, epochs=8, verbose=0, validation_data=(x, y))
    loss = history.history["loss"]
    assert loss[-1] < loss[0] * 0.6
    assert history.history["val_accuracy"][-1] > 0.8
    assert set(history.history) >= {"loss", "accuracy", "val_loss", "val_accuracy"}
    preds = model.predict(x)
    assert preds.shape == (len(x), 3)
    acc = float((preds.argmax(1) == y).mean())
    assert np.isclose(model.evaluate(x, y, return_dict=True)["accuracy"], acc)


def test_fit_with_a_dataset_and_steps_per_epoch():
    x, y = cases.data()
    model = cases.build()
    ds = hd.data.Dataset.from_tensor_slices((x, y)).shuffle(64, seed=0).batch(32)
    h = model.fit(ds, epochs=2, verbose=0)
    assert len(h.history["loss"]) == 2
    h = model.fit(ds.repeat(), epochs=3, steps_per_epoch=4, verbose=0)
    assert len(h.history["loss"]) == 3
    assert model.optimizer.iterations.numpy() == 2 * 7 + 3 * 4


@pytest.mark.parametrize("devices", [["cpu:0", "cpu:1"], ["cpu:0", "cpu:1", "cpu:2"]])
def test_mirrored_fit_matches_one_process(devices):
    cases.check_fit_matches_one_process(hd.MirroredStrategy(devices))


def test_mirrored_custom_loop_matches_one_process():
    cases.check_custom_loop_matches_one_process(hd.MirroredStrategy(["cpu:0", "cpu:1"]))


def test_callbacks():
    x, y = cases.data()
    model = cases.build()
    seen = []
    stop = hd.nn.callbacks.EarlyStopping(monitor="loss", patience=0, min_delta=10.0)
    sched = hd.nn.callbacks.LearningRateScheduler(lambda epoch, lr: seen.append(lr) or lr * 0.5)
    h = model.fit(x, y, epochs=10, verbose=0, callbacks=[stop, sched])
    assert len(h.history["loss"]) == 2  # stopped after one epoch without a 10.0 improvement
    assert seen == [0.05, 0.025]
    with pytest.raises(KeyError, match="val_loss"):
        model.fit(x, y, epochs=1, verbose=0, callbacks=[hd.nn.callbacks.EarlyStopping()])


def test_progress_bar_on_chief_only(capsys):
    x, y = cases.data(n=40)
    model = cases.build()
    model.fit(
        x,
        y,
        epochs=1,
        batch_size=10,
        verbose=0,
        callbacks=[hd.nn.callbacks.ProgressBar(is_chief=False)],
    )
    assert "Epoch" not in capsys.readouterr().err
    model.fit(x, y, epochs=1, batch_size=10, verbose=1)
    assert "Epoch 1/1" in capsys.readouterr().err


def test_weights_api_and_errors():
    model = cases.build()
    weights = model.get_weights()
    assert [w.shape for w in weights] == [(6, 16), (16,), (16,), (16,), (16, 3), (3,)]
    model.set_weights([w * 0 for w in weights])
    assert all((w == 0).all() for w in model.get_weights())
    with pytest.raises(ValueError, match="expected 6 arrays"):
        model.set_weights(weights[:2])
    with pytest.raises(ValueError, match="shape"):
        model.set_weights([np.zeros((1,))] * 6)
    lines = []
    model.summary(print_fn=lines.append)
    assert "Total params: 195" in lines[0]
    fresh = hd.nn.Sequential([hd.nn.layers.Dense(2)])
    with pytest.raises(RuntimeError, match="compile"):
        fresh.fit(np.ones((2, 2)), np.ones((2, 2)), verbose=0)
    with pytest.raises(ValueError, match="different numbers"):
        model.fit(np.ones((4, 6)), np.ones(3), verbose=0)


def test_subclassed_model_and_seed_example():
    class TwoLayer(hd.nn.Model):
        def __init__(self):
            super().__init__()
            self.hidden = hd.nn.layers.Dense(4, activation="relu")
            self.out = hd.nn.layers.Dense(1, kernel_regularizer=hd.nn.regularizers.L2(0.01))

        def call(self, x, training=None):
            return self.out(self.hidden(x))

    model = TwoLayer()
    model.compile(optimizer="sgd", loss="mse")
    x = np.random.default_rng(0).standard_normal((64, 3)).astype(np.float32)
    model.fit(x, x.sum(1, keepdims=True), batch_size=8, epochs=2, verbose=0)
    assert len(model.trainable_variables) == 4 and len(model.losses) == 1


def test_metrics_accept_empty_batches():
    for name in ("accuracy", "mse"):
        metric = hd.nn.metrics.get(name, hd.nn.losses.SparseCategoricalCrossentropy())
        metric.update_state(np.zeros((0,)), np.zeros((0, 3)))
        assert metric.result() == 0.0
    acc = hd.nn.metrics.SparseCategoricalAccuracy()
    acc.update_state(np.array([1, 0]), np.array([[0.1, 0.9], [0.2, 0.8]]))
    assert acc.result() == 0.5


@pytest.mark.parametrize("batch_size", [-3, 0, 2.5, True, "16"])
def test_invalid_batch_size_is_rejected(batch_size):
    x, y = cases.data(n=20)
    model = cases.build()
    match = rf"batch_size must be a positive integer or None, got {batch_size!r}"
    with pytest.raises(ValueError, match=match):
        model.fit(x, y, batch_size=batch_size, verbose=0)
    with pytest.raises(ValueError, match=match):
        model.evaluate(x, y, batch_size=batch_size)
    with pytest.raises(ValueError, match=match):
        model.predict(x, batch_size=batch_size)
    assert model.optimizer.iterations is None  # never built: no step ran


def test_empty_x_is_rejected():
    x, y = cases.data(n=20)
    model = cases.build()
    with pytest.raises(ValueError, match=r"fit: x has no examples \(shape \(0, 6\)\)"):
        model.fit(x[:0], y[:0], verbose=0)
    with pytest.raises(ValueError, match=r"evaluate: x has no examples"):
        model.evaluate(x[:0], y[:0])
    empty = hd.data.Dataset.from_tensor_slices((x[:0], y[:0])).batch(4)
    with pytest.raises(ValueError, match=r"fit: x is a Dataset with no batches"):
        model.fit(empty, verbose=0)
    assert model.optimizer.iterations is None  # never built: no step ran
    assert model.predict(x[:0]).shape[0] == 0  # predict on nothing returns nothing


def test_terminate_on_nan_stops_at_the_first_invalid_loss(capsys):
    x, y = cases.data(n=40)
    x[13, 2] = np.nan  # batch 1 of batch_size 10 without shuffling
    model = cases.build()
    h = model.fit(x, y, batch_size=10, epochs=3, verbose=0, shuffle=False)
    assert model.optimizer.iterations.numpy() == 12  # without the callback it trains on
    assert np.isnan(h.history["loss"]).all()
    model = cases.build()
    callback = hd.nn.callbacks.TerminateOnNaN()
    h = model.fit(x, y, batch_size=10, epochs=3, verbose=0, shuffle=False, callbacks=[callback])
    assert model.optimizer.iterations.numpy() == 2
    assert model.stop_training and len(h.history["loss"]) == 1
    assert "Batch 1: Invalid loss, terminating training" in capsys.readouterr().out


def test_terminate_on_nan_also_stops_on_an_infinite_loss(capsys):
    x, y = cases.data(n=20)
    model = cases.build()
    model.compile(optimizer="sgd", loss="mse")
    x[:, :] = np.float32(3e38)
    y = np.full((20, 3), 3e38, np.float32)
    with np.errstate(over="ignore", invalid="ignore"):  # the overflow is the point
        h = model.fit(
            x, y, batch_size=10, epochs=2, verbose=0, callbacks=[hd.nn.callbacks.TerminateOnNaN()]
        )
    assert not np.isfinite(h.history["loss"][0]) and len(h.history["loss"]) == 1
    assert model.optimizer.iterations.numpy() == 1
    assert "Batch 0: Invalid loss, terminating training" in capsys.readouterr().out
    assert "TerminateOnNaN" in hd.nn.callbacks.__all__
