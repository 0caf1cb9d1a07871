"""TensorBoard and CSVLogger callbacks, and the TF1 summary hooks, read back and compared.

Event files are read with TensorBoard's own ``EventAccumulator`` and compared with `History`
exactly: same steps, and each value equal to the History value rounded to float32 (the type
TensorBoard stores scalars in). CSV files are compared byte for byte with what Keras 3.15
(TF 2.21) writes for the same logs. The multi-rank runs are in
tests/integration/test_tensorboard_csv_jobs.py.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import hpcdist as hd
import hpcdist.compat.v1 as tf
from hpcdist.compat.v1.hooks import StepCounterHook, SummarySaverHook
from tests.helpers import ROOT, clean_env

event_accumulator = pytest.importorskip(
    "tensorboard.backend.event_processing.event_accumulator",
    reason="needs the tensorboard extra (pip install hpcdist[tensorboard])",
)

N, BATCH, EPOCHS = 64, 16, 3  # 4 steps per epoch


def scalars(logdir: Path) -> dict[str, list[tuple[int, np.float32]]]:
    """Every scalar of a run directory: tag -> [(step, value)], read by TensorBoard."""
    acc = event_accumulator.EventAccumulator(str(logdir))
    acc.Reload()
    return {
        tag: [(e.step, np.float32(e.value)) for e in acc.Scalars(tag)]
        for tag in acc.Tags()["scalars"]
    }


def as_f32(epochs: list[int], values: list[float]) -> list[tuple[int, np.float32]]:
    return [(e, np.float32(v)) for e, v in zip(epochs, values, strict=True)]


def _data():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, 3)).astype(np.float32)
    y = (x @ np.array([[1.0], [-2.0], [0.5]], np.float32)).astype(np.float32)
    return x, y


def _fit(callbacks, epochs=EPOCHS, initial_epoch=0, model=None):
    x, y = _data()
    if model is None:
        hd.nn.set_random_seed(1)
        model = hd.nn.Sequential([hd.nn.layers.Dense(1, input_shape=(3,))])
        model.compile(hd.nn.optimizers.SGD(0.05), "mse", metrics=["mse"])
    history = model.fit(
        x,
        y,
        batch_size=BATCH,
        epochs=epochs,
        initial_epoch=initial_epoch,
        verbose=0,
        validation_data=(x[:32], y[:32]),
        callbacks=callbacks,
    )
    return model, history


def schedule(epoch: int) -> float:
    return 0.05 / (1 + epoch)


# -- TensorBoard ----------------------------------------------------------------------------


def test_epoch_scalars_equal_history(tmp_path):
    lr = hd.nn.callbacks.LearningRateScheduler(schedule)
    _, history = _fit([lr, hd.nn.callbacks.TensorBoard(tmp_path)])
    h, epochs = history.history, history.epoch
    train, val = scalars(tmp_path / "train"), scalars(tmp_path / "validation")
    assert sorted(train) == [
        "epoch_learning_rate",
        "epoch_loss",
        "epoch_mse",
        "epoch_samples_per_second",
        "epoch_time_s",
    ]
    for name in ("loss", "mse", "time_s"):
        assert train[f"epoch_{name}"] == as_f32(epochs, h[name])
    assert sorted(val) == ["epoch_loss", "epoch_mse"]
    assert val["epoch_loss"] == as_f32(epochs, h["val_loss"])
    assert val["epoch_mse"] == as_f32(epochs, h["val_mse"])
    assert train["epoch_learning_rate"] == as_f32(epochs, [schedule(e) for e in epochs])
    # every example once per epoch, over the epoch's training time
    assert train["epoch_samples_per_second"] == as_f32(epochs, [N / t for t in h["time_s"]])
    (name,) = os.listdir(tmp_path / "train")
    assert name.startswith("events.out.tfevents.") and name.endswith(".v2")  # Keras' names


def test_batch_scalars_are_the_running_epoch_logs(tmp_path):
    _, history = _fit([hd.nn.callbacks.TensorBoard(tmp_path, update_freq="batch")])
    train = scalars(tmp_path / "train")
    steps = N // BATCH
    assert [s for s, _ in train["batch_loss"]] == list(range(1, EPOCHS * steps + 1))
    # the running loss after an epoch's last step is that epoch's loss in History
    last = [v for s, v in train["batch_loss"] if s % steps == 0]
    assert last == [np.float32(v) for v in history.history["loss"]]
    # the mse metric is the loss here (tracked per batch vs per example: float32 round-off)
    assert [s for s, _ in train["batch_mse"]] == [s for s, _ in train["batch_loss"]]
    np.testing.assert_allclose(
        [v for _, v in train["batch_mse"]], [v for _, v in train["batch_loss"]], rtol=1e-6
    )


def test_update_freq_every_n_steps(tmp_path):
    callback = hd.nn.callbacks.TensorBoard(tmp_path, update_freq=3)
    assert callback.reads_batch_logs
    _fit([callback])
    assert [s for s, _ in scalars(tmp_path / "train")["batch_loss"]] == [3, 6, 9, 12]
    epoch_only = hd.nn.callbacks.TensorBoard(tmp_path / "e")
    assert not epoch_only.reads_batch_logs  # no per-step all-reduce for epoch scalars


@pytest.mark.parametrize("freq", [0, -2, "step", 1.5, True])
def test_update_freq_is_checked(freq):
    with pytest.raises(ValueError, match="update_freq must be 'epoch', 'batch' or a positive"):
        hd.nn.callbacks.TensorBoard("logs", update_freq=freq)


def test_second_fit_writes_new_files(tmp_path):
    model, _ = _fit([hd.nn.callbacks.TensorBoard(tmp_path)], epochs=2)
    _, more = _fit([hd.nn.callbacks.TensorBoard(tmp_path)], epochs=4, initial_epoch=2, model=model)
    assert len(os.listdir(tmp_path / "train")) == 2
    assert [s for s, _ in scalars(tmp_path / "train")["epoch_loss"]] == [0, 1, 2, 3]
    assert scalars(tmp_path / "train")["epoch_loss"][2:] == as_f32([2, 3], more.history["loss"])


def _python(code: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
        env=clean_env(**env),
    )


def test_writer_never_imports_tensorflow(tmp_path):
    # A TensorFlow that fails loudly when imported: the writer must not touch it.
    fake = tmp_path / "fake" / "tensorflow"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise RuntimeError('TensorFlow was imported')\n")
    code = """
        import sys
        import numpy as np
        import hpcdist as hd
        x = np.ones((8, 2), np.float32); y = np.zeros((8, 1), np.float32)
        model = hd.nn.Sequential([hd.nn.layers.Dense(1, input_shape=(2,))])
        model.compile("sgd", "mse")
        model.fit(x, y, epochs=2, verbose=0, callbacks=[hd.nn.callbacks.TensorBoard("tb")])
        assert "tensorflow" not in sys.modules
        print("ok")
    """
    pythonpath = os.pathsep.join([str(tmp_path / "fake"), str(ROOT)])
    out = _python(code, tmp_path, PYTHONPATH=pythonpath)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr
    assert [s for s, _ in scalars(tmp_path / "tb" / "train")["epoch_loss"]] == [0, 1]


def test_without_tensorboard_the_package_works_and_errors_name_the_extra(tmp_path):
    code = """
        import sys
        sys.modules["tensorboard"] = None  # as if the extra were not installed
        import numpy as np
        import hpcdist as hd
        from hpcdist.compat.v1.hooks import StepCounterHook, SummarySaverHook
        x = np.ones((8, 2), np.float32); y = np.zeros((8, 1), np.float32)
        model = hd.nn.Sequential([hd.nn.layers.Dense(1, input_shape=(2,))])
        model.compile("sgd", "mse")
        model.fit(x, y, epochs=1, verbose=0, callbacks=[hd.nn.callbacks.CSVLogger("log.csv")])
        SummarySaverHook(save_steps=1)  # no directory: nothing to write, no error
        for make in (
            lambda: hd.nn.callbacks.TensorBoard("tb"),
            lambda: SummarySaverHook(save_steps=1, output_dir="s"),
            lambda: StepCounterHook(output_dir="s"),
        ):
            try:
                make()
            except ImportError as error:
                print("ImportError:", error)
    """
    out = _python(code, tmp_path)
    assert out.returncode == 0, out.stderr
    errors = [line for line in out.stdout.splitlines() if line.startswith("ImportError:")]
    assert len(errors) == 3, out.stdout
    assert all("pip install hpcdist[tensorboard]" in line for line in errors)
    assert (tmp_path / "log.csv").read_text().startswith("epoch,loss,time_s,val_loss")


# -- CSVLogger ------------------------------------------------------------------------------

# Keras 3.15.1 (TF 2.21) CSVLogger, called with these logs: on_train_begin, on_epoch_end for
# each, on_train_end; then again with append=True from epoch 2.
KERAS_LOGS = [
    {"loss": 0.5, "mae": 0.25, "time_s": 1.5},
    {"loss": 0.125, "mae": 0.0625, "time_s": 1.25},
]
KERAS_APPENDED = (
    "epoch,loss,mae,time_s,val_loss,val_mae,val_time_s\r\n"
    "0,0.5,0.25,1.5,NA,NA,NA\r\n"
    "1,0.125,0.0625,1.25,NA,NA,NA\r\n"
    "2,0.125,0.0625,1.25,NA,NA,NA\r\n"
)
KERAS_WITH_VAL = "epoch,loss,val_loss\r\n0,0.5,0.75\r\n"
KERAS_SEMICOLON = "epoch;a;b;val_a;val_b\r\n0;2.0;1.0;NA;NA\r\n"


def _drive(callback, logs, start=0):
    callback.set_model(hd.nn.Sequential([hd.nn.layers.Dense(1, input_shape=(1,))]))
    callback.on_train_begin()
    for i, entry in enumerate(logs):
        callback.on_epoch_end(start + i, dict(entry))
    callback.on_train_end()


def test_csv_bytes_equal_keras(tmp_path):
    path = tmp_path / "a.csv"
    _drive(hd.nn.callbacks.CSVLogger(path), KERAS_LOGS)
    _drive(hd.nn.callbacks.CSVLogger(path, append=True), KERAS_LOGS[1:], start=2)
    assert path.read_bytes() == KERAS_APPENDED.encode()
    _drive(hd.nn.callbacks.CSVLogger(tmp_path / "b.csv"), [{"loss": 0.5, "val_loss": 0.75}])
    assert (tmp_path / "b.csv").read_bytes() == KERAS_WITH_VAL.encode()
    _drive(hd.nn.callbacks.CSVLogger(tmp_path / "d.csv", separator=";"), [{"b": 1.0, "a": 2.0}])
    assert (tmp_path / "d.csv").read_bytes() == KERAS_SEMICOLON.encode()


def test_csv_rows_equal_history_and_append_continues(tmp_path):
    path = tmp_path / "log.csv"
    model, first = _fit([hd.nn.callbacks.CSVLogger(path)], epochs=2)
    _, second = _fit(
        [hd.nn.callbacks.CSVLogger(path, append=True)], epochs=4, initial_epoch=2, model=model
    )
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["epoch"]) for r in rows] == [0, 1, 2, 3]  # one header, four epochs
    keys = ["loss", "mse", "time_s", "val_loss", "val_mse"]
    assert list(rows[0]) == ["epoch", *keys]
    for key in keys:  # repr of a float reads back to the same float
        assert [float(r[key]) for r in rows] == first.history[key] + second.history[key]
    _fit([hd.nn.callbacks.CSVLogger(path)], epochs=1)  # append=False overwrites
    assert len(path.read_text().splitlines()) == 2


# -- TF1 hooks ------------------------------------------------------------------------------


def _tf1_run(hooks, steps, start=0):
    """Run ``steps`` training steps; ``total`` grows by 0.5 a step; returns nothing."""
    with tf.Graph().as_default():
        step = tf.train.get_or_create_global_step()
        total = tf.Variable(np.float64(0.0), name="total")
        train = [tf.assign_add(step, np.int64(1)), tf.assign_add(total, np.float64(0.5))]
        made = hooks(total)
        with tf.train.SingularMonitoredSession(hooks=made) as session:
            if start:
                session.run([tf.assign(step, np.int64(start)), tf.assign(total, start * 0.5)])
            for _ in range(steps):
                session.run(train)
    return made


def test_summary_saver_writes_at_tf_steps(tmp_path):
    def hooks(total):
        return [
            SummarySaverHook(
                save_steps=8,
                output_dir=str(tmp_path),
                summary_op={"total": total, "twice": lambda: 2 * total.numpy()},
            ),
            StepCounterHook(every_n_steps=10, output_dir=str(tmp_path)),
        ]

    _, counter = _tf1_run(hooks, 30)
    events = scalars(tmp_path)
    # TF's test_save_steps: save_steps=8 over 30 steps writes at global steps 1, 9, 17, 25;
    # the values are those after the step (total = 0.5 * step).
    assert events["total"] == [(s, np.float32(0.5 * s)) for s in (1, 9, 17, 25)]
    assert events["twice"] == [(s, np.float32(s)) for s in (1, 9, 17, 25)]
    # StepCounterHook writes its logged rates (steps 11 and 21, as in TF) to the same file
    assert events["global_step/sec"] == [(s, np.float32(r)) for s, r in counter.history]
    assert [s for s, _ in counter.history] == [11, 21]
    assert len(os.listdir(tmp_path)) == 1  # one shared file per directory, as TF's cache


def test_summary_saver_restart_hides_the_lost_steps(tmp_path):
    def hooks(total):
        return [SummarySaverHook(save_steps=4, output_dir=str(tmp_path), summary_op=[total])]

    _tf1_run(hooks, 20)  # writes at 1, 5, 9, 13, 17
    # a restart at global step 10 (its first run sets the step to 10, as a restore would):
    # TensorBoard drops the first attempt's points at 13 and 17, keeps 1, 5 and 9, and the
    # second attempt's points (10, 14, 18) follow
    _tf1_run(hooks, 10, start=10)
    events = scalars(tmp_path)["total"]
    assert [s for s, _ in events] == [1, 5, 9, 10, 14, 18]
    assert [v for _, v in events] == [np.float32(0.5 * s) for s, _ in events]


def test_summary_saver_rejects_non_scalars(tmp_path):
    def hooks(total):
        return [
            SummarySaverHook(
                save_steps=1, output_dir=str(tmp_path), summary_op={"v": lambda: [1, 2]}
            )
        ]

    with pytest.raises(ValueError, match=r"expected one number for 'v', got int64 of shape \(2,\)"):
        _tf1_run(hooks, 1)
