"""Checkpoints as TF's tutorials use them: `latest_checkpoint`, the state file of
`Checkpoint.save`, deferred restore, and non-chief saves to a per-worker directory.

Expected behaviour is TensorFlow 2.21's, observed with the same calls on ``tf.train``.
"""

from __future__ import annotations

import json
import os
import textwrap

import numpy as np
import pytest

import hpcdist as hd
from hpcdist.checkpoint import CheckpointMismatchError
from tests.helpers import clean_env, run_mpi


def test_save_keeps_the_state_file_that_latest_checkpoint_reads(tmp_path):
    directory = str(tmp_path / "sub")  # created by the save, as TF's is
    assert hd.latest_checkpoint(directory) is None  # TF: None
    ckpt = hd.Checkpoint(v=hd.Variable(1.0))
    first = ckpt.save(os.path.join(directory, "ckpt"))
    second = ckpt.save(os.path.join(directory, "ckpt"))
    assert [os.path.basename(p) for p in (first, second)] == ["ckpt-1.h5", "ckpt-2.h5"]
    assert hd.latest_checkpoint(directory) == second  # TF: .../ckpt-2
    state = json.loads((tmp_path / "sub" / "checkpoint").read_text())
    assert state["latest"] == "ckpt-2.h5" and state["checkpoints"] == []
    ckpt.write(os.path.join(directory, "other"))  # write leaves the state alone (TF too)
    assert hd.latest_checkpoint(directory) == second
    os.remove(second)
    assert hd.latest_checkpoint(directory) is None  # TF: None once the file is gone


def test_restore_takes_what_latest_checkpoint_returns(tmp_path):
    v = hd.Variable([1.0, 2.0])
    ckpt = hd.Checkpoint(v=v)
    ckpt.save(str(tmp_path / "ckpt"))
    v.assign([5.0, 6.0])
    status = hd.Checkpoint(v=v).restore(hd.latest_checkpoint(str(tmp_path)))
    status.assert_consumed()
    np.testing.assert_array_equal(v.numpy(), [1.0, 2.0])


def test_async_save_records_the_latest_after_the_file(tmp_path):
    ckpt = hd.Checkpoint(v=hd.Variable(3.0))
    options = hd.CheckpointOptions(experimental_enable_async_checkpoint=True)
    path = ckpt.save(str(tmp_path / "ckpt"), options=options)
    ckpt.sync()
    assert hd.latest_checkpoint(str(tmp_path)) == path


def test_a_damaged_state_file_gives_none_with_a_warning(tmp_path):
    (tmp_path / "checkpoint").write_text("model_checkpoint_path: 'ckpt-1'")  # TF's text proto
    with pytest.warns(RuntimeWarning, match="unreadable"):
        assert hd.latest_checkpoint(str(tmp_path)) is None


def test_a_manager_after_checkpoint_save_follows_tf(tmp_path):
    # TF: after Checkpoint.save twice, CheckpointManager(max_to_keep=2).checkpoints == [] and
    # latest_checkpoint == ckpt-2; manager.save() writes ckpt-3, lists only it, deletes nothing.
    directory = str(tmp_path)
    ckpt = hd.Checkpoint(v=hd.Variable(1.0))
    ckpt.save(os.path.join(directory, "ckpt"))
    ckpt.save(os.path.join(directory, "ckpt"))
    manager = hd.CheckpointManager(ckpt, directory, max_to_keep=2)
    assert manager.checkpoints == []
    assert manager.latest_checkpoint == os.path.join(directory, "ckpt-2.h5")
    third = manager.save()
    assert os.path.basename(third) == "ckpt-3.h5"
    assert manager.checkpoints == [third]
    assert hd.latest_checkpoint(directory) == third
    assert sorted(p.name for p in tmp_path.glob("ckpt-*.h5")) == [
        "ckpt-1.h5",
        "ckpt-2.h5",
        "ckpt-3.h5",
    ]
    manager.save()
    manager.save()  # max_to_keep=2: ckpt-3 leaves; the unmanaged ones stay (TF's rule)
    assert sorted(p.name for p in tmp_path.glob("ckpt-*.h5")) == [
        "ckpt-1.h5",
        "ckpt-2.h5",
        "ckpt-4.h5",
        "ckpt-5.h5",
    ]
    assert hd.latest_checkpoint(directory) == os.path.join(directory, "ckpt-5.h5")


# -- deferred restore ---------------------------------------------------------------------------


def _model() -> hd.nn.Sequential:
    return hd.nn.Sequential(
        [hd.nn.layers.Dense(8, activation="relu"), hd.nn.layers.Dense(3)]  # no input_shape
    )


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype(np.float32)
    return x, (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0).astype(np.int64)


def _accuracy(model: hd.nn.Model, x: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(np.argmax(model.predict(x), axis=1) == y))


def test_restoring_before_the_first_call_defers_until_the_model_builds(tmp_path):
    # The custom-training tutorial: "accuracy after restoring" must equal the trained model's.
    x, y = _data()
    model, optimizer = _model(), hd.nn.optimizers.Adam(0.05)
    loss = hd.nn.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer=optimizer, loss=loss)
    model.fit(x, y, batch_size=16, epochs=20, verbose=0)
    trained = _accuracy(model, x, y)
    hd.Checkpoint(model=model, optimizer=optimizer).save(str(tmp_path / "ckpt"))

    new_model, new_optimizer = _model(), hd.nn.optimizers.Adam(0.05)
    checkpoint = hd.Checkpoint(model=new_model, optimizer=new_optimizer)
    status = checkpoint.restore(hd.latest_checkpoint(str(tmp_path)))
    assert "model/weights/0" in status.unused  # waiting: the model has no variables yet
    with pytest.raises(AssertionError, match="values without an object"):
        status.assert_consumed()
    assert _accuracy(new_model, x, y) == trained  # the first call built and restored it
    assert trained > 0.9
    status.assert_consumed()  # TF: passes once the variables exist
    for a, b in zip(new_model.get_weights(), model.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    # the optimizer's slots of the new variables came back too, and its step count
    assert int(new_optimizer.iterations.numpy()) == int(optimizer.iterations.numpy())
    np.testing.assert_array_equal(new_optimizer.variables[-1].numpy(), optimizer.variables[-1])
    assert "build" not in vars(new_model)  # the wrapper removed itself


def test_a_later_restore_before_the_build_wins(tmp_path):
    x, _ = _data()
    first, second = _model(), _model()
    first(x[:1])
    second(x[:1])
    a = hd.Checkpoint(model=first).save(str(tmp_path / "a"))
    b = hd.Checkpoint(model=second).save(str(tmp_path / "b"))
    target = _model()
    checkpoint = hd.Checkpoint(model=target)
    checkpoint.restore(a)
    checkpoint.restore(b)
    target(x[:1])
    for got, want in zip(target.get_weights(), second.get_weights(), strict=True):
        np.testing.assert_array_equal(got, want)


def test_a_deferred_value_that_does_not_fit_raises_at_the_build(tmp_path):
    x, _ = _data()
    saved = _model()
    saved(x[:1])
    path = hd.Checkpoint(model=saved).save(str(tmp_path / "ckpt"))
    other = hd.nn.Sequential([hd.nn.layers.Dense(5), hd.nn.layers.Dense(3)])
    hd.Checkpoint(model=other).restore(path)
    with pytest.raises(CheckpointMismatchError, match=r"model/weights/0 has shape \(4, 8\)"):
        other(x[:1])


# -- the multi-worker tutorial's per-worker temporary directory ------------------------------------

_MULTI_WORKER = textwrap.dedent(
    """
    import os, shutil, sys
    import numpy as np
    import hpcdist as hd

    base = sys.argv[1]
    strategy = hd.MultiWorkerMirroredStrategy()
    task_id = strategy.cluster_resolver.task_id
    is_chief = task_id == 0

    def write_filepath(filepath):  # the tutorial's helper, unchanged but for tf.io.gfile
        dirpath, name = os.path.dirname(filepath), os.path.basename(filepath)
        if not is_chief:
            dirpath = os.path.join(dirpath, f"workertemp_{task_id}")
            os.makedirs(dirpath, exist_ok=True)
        return os.path.join(dirpath, name)

    checkpoint_dir = os.path.join(base, "ckpt")
    with strategy.scope():
        weights = hd.Variable(np.zeros(3, np.float32), name="w")
        step = hd.Variable(0, trainable=False, dtype=hd.int64, name="step")
    checkpoint = hd.Checkpoint(w=weights, step=step)
    write_dir = write_filepath(checkpoint_dir)
    manager = hd.CheckpointManager(checkpoint, directory=write_dir, max_to_keep=1)
    for epoch in range(3):
        weights.assign(np.full(3, epoch + 1, np.float32))
        step.assign_add(1)
        manager.save()
        if not is_chief:
            shutil.rmtree(write_dir)  # failed at the second epoch when nothing was written
    weights.assign(np.zeros(3, np.float32))
    latest = hd.latest_checkpoint(checkpoint_dir)
    checkpoint.restore(latest)
    with open(os.path.join(base, f"seen{task_id}"), "w") as f:
        f.write(f"rank {task_id} latest {os.path.basename(latest)} w {weights.numpy().tolist()} "
                f"step {int(step.numpy())} temp {os.path.exists(write_dir)}")
    """
)


def test_non_chief_saves_to_a_temporary_directory_and_deletes_it(tmp_path):
    script = tmp_path / "multi_worker.py"
    script.write_text(_MULTI_WORKER)
    done = run_mpi(
        2, [str(script), str(tmp_path)], timeout=120, env=clean_env(HPCDIST_TIMEOUT_SECONDS="60")
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [(tmp_path / f"seen{rank}").read_text() for rank in (0, 1)]
    assert lines == [
        "rank 0 latest ckpt-3.h5 w [3.0, 3.0, 3.0] step 3 temp True",
        "rank 1 latest ckpt-3.h5 w [3.0, 3.0, 3.0] step 3 temp False",
    ]
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["checkpoint", "ckpt-3.h5"]
