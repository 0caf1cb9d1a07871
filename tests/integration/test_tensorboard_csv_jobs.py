"""TensorBoard and CSVLogger in multi-rank jobs: only the chief writes, and what it writes is
History (read back with TensorBoard's own reader)."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from tests.helpers import ROOT, clean_env, run_mpi

event_accumulator = pytest.importorskip(
    "tensorboard.backend.event_processing.event_accumulator",
    reason="needs the tensorboard extra (pip install hpcdist[tensorboard])",
)

SCRIPT = str(ROOT / "tests" / "integration" / "scripts" / "tb_csv_job.py")


def scalars(logdir):
    acc = event_accumulator.EventAccumulator(str(logdir))
    acc.Reload()
    return {
        tag: [(e.step, np.float32(e.value)) for e in acc.Scalars(tag)]
        for tag in acc.Tags()["scalars"]
    }


def f32(epochs, values):
    return [(e, np.float32(v)) for e, v in zip(epochs, values, strict=True)]


def csv_rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_two_ranks_only_rank_0_writes(tmp_path):
    result = run_mpi(2, [SCRIPT, "mwms", str(tmp_path)], timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["history_0.json", "history_1.json", "rank0.csv", "tb_rank0"]
    run = json.loads((tmp_path / "history_0.json").read_text())
    h, epochs = run["history"], run["epoch"]
    assert json.loads((tmp_path / "history_1.json").read_text())["history"]["loss"] == h["loss"]
    train, val = (
        scalars(tmp_path / "tb_rank0" / "train"),
        scalars(tmp_path / "tb_rank0" / "validation"),
    )
    for key in ("loss", "mse", "time_s"):
        assert train[f"epoch_{key}"] == f32(epochs, h[key])
        if key != "time_s":
            assert val[f"epoch_{key}"] == f32(epochs, h[f"val_{key}"])
    assert train["epoch_learning_rate"] == f32(epochs, [0.05, 0.05 * 0.8])  # the schedule's
    # all 64 examples of both ranks are counted, not one rank's 32
    assert train["epoch_samples_per_second"] == f32(epochs, [64 / t for t in h["time_s"]])
    # 4 global steps per epoch; the running loss after the last one is the epoch's loss
    assert [s for s, _ in train["batch_loss"]] == list(range(1, 9))
    assert [v for s, v in train["batch_loss"] if s % 4 == 0] == [np.float32(v) for v in h["loss"]]
    rows = csv_rows(tmp_path / "rank0.csv")
    assert [int(r["epoch"]) for r in rows] == epochs
    for key in ("loss", "mse", "time_s", "val_loss", "val_mse"):
        assert [float(r[key]) for r in rows] == h[key]


def test_parameter_server_fit_writes_from_the_coordinator(tmp_path):
    env = clean_env(HPCDIST_NUM_PS="1")
    result = run_mpi(3, [SCRIPT, "ps", str(tmp_path)], timeout=180, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    # ps and worker ranks end inside the strategy's constructor: only the coordinator ran fit
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["history_0.json", "rank0.csv", "tb_rank0"]
    run = json.loads((tmp_path / "history_0.json").read_text())
    h, epochs = run["history"], run["epoch"]
    train = scalars(tmp_path / "tb_rank0" / "train")
    assert sorted(train) == [
        "epoch_learning_rate",
        "epoch_loss",
        "epoch_mse",
        "epoch_samples_per_second",
        "epoch_time_s",
    ]  # steps are asynchronous: no batch scalars
    for key in ("loss", "mse", "time_s"):
        assert train[f"epoch_{key}"] == f32(epochs, h[key])
    # 5 steps of 16 examples per epoch, run on the worker and counted on the ps
    assert train["epoch_samples_per_second"] == f32(epochs, [80 / t for t in h["time_s"]])
    rows = csv_rows(tmp_path / "rank0.csv")
    assert [int(r["epoch"]) for r in rows] == epochs == [0, 1, 2]
    for key in ("loss", "mse", "time_s"):
        assert [float(r[key]) for r in rows] == h[key]
    assert {r["val_loss"] for r in rows} == {"NA"}  # Keras' columns without validation
