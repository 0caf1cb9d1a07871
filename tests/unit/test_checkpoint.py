"""Checkpoints: format, round trips, TF's manager rules, corruption, async writes."""

import json
import os

import h5py
import numpy as np
import pytest

import hpcdist as hd
from hpcdist.checkpoint import Checkpoint, CheckpointError, CheckpointManager, CheckpointOptions
from hpcdist.checkpoint import format as format_module
from hpcdist.checkpoint.checkpoint import _host_copy
from hpcdist.checkpoint.format import (
    CheckpointCorruptError,
    CheckpointMismatchError,
    CheckpointWriteError,
)
from tests import training_cases as cases


def test_round_trip_of_a_model_optimizer_and_variables(tmp_path):
    x, y = cases.data()
    model = cases.build()
    model.fit(x, y, epochs=1, verbose=0)
    step = hd.get_strategy().Variable(np.int64(7), trainable=False)
    ckpt = Checkpoint(model=model, optimizer=model.optimizer, step=step)
    path = ckpt.save(str(tmp_path / "ckpt"))
    assert path.endswith("ckpt-1.h5") and int(ckpt.save_counter.numpy()) == 1
    with h5py.File(path) as f:  # plain HDF5, no pickled objects
        assert f.attrs["format"] == "hpcdist-checkpoint"
        assert "optimizer/slots/momentum/model/weights/0" in f
    expected = model.get_weights()
    momentum = model.optimizer.slot(model.trainable_variables[0], "momentum").numpy()

    fresh = cases.build()  # new objects, optimizer without slots yet
    fresh_step = hd.get_strategy().Variable(np.int64(0), trainable=False)
    restored = Checkpoint(model=fresh, optimizer=fresh.optimizer, step=fresh_step)
    restored.restore(path).assert_consumed()
    for a, b in zip(expected, fresh.get_weights(), strict=True):
        assert np.array_equal(a, b)
    assert np.array_equal(
        fresh.optimizer.slot(fresh.trainable_variables[0], "momentum").numpy(), momentum
    )
    assert int(fresh_step.numpy()) == 7 and int(restored.save_counter.numpy()) == 1
    # Training on continues identically from the restored state.
    model.fit(x, y, epochs=1, verbose=0, seed=3)
    fresh.fit(x, y, epochs=1, verbose=0, seed=3)
    for a, b in zip(model.get_weights(), fresh.get_weights(), strict=True):
        assert np.array_equal(a, b)


def test_partial_matches_are_reported(tmp_path):
    a = hd.get_strategy().Variable(np.ones(2))
    path = Checkpoint(a=a, extra=hd.get_strategy().Variable(np.zeros(1))).write(str(tmp_path / "w"))
    b = hd.get_strategy().Variable(np.zeros(2))
    status = Checkpoint(a=b, other=hd.get_strategy().Variable(np.zeros(1))).read(path)
    assert (b.numpy() == 1).all()
    assert status.missing == ["other"] and status.unused == ["extra"]
    with pytest.raises(AssertionError, match="other"):
        status.assert_consumed()
    status.expect_partial()
    with pytest.raises(CheckpointError, match="shape"):
        Checkpoint(a=hd.get_strategy().Variable(np.zeros(3))).read(path)


def test_corrupt_truncated_and_foreign_files_name_the_file(tmp_path):
    v = hd.get_strategy().Variable(np.arange(1000.0))
    path = Checkpoint(v=v).write(str(tmp_path / "c"))
    with open(path, "rb") as f:
        data = f.read()
    truncated = tmp_path / "truncated.h5"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"truncated\.h5"):
        Checkpoint(v=v).read(str(truncated))
    with h5py.File(path, "r+") as f:  # flip a value behind the checksum's back
        f["v"][3] = -1.0
    with pytest.raises(CheckpointError, match="checksum"):
        Checkpoint(v=v).read(path)
    foreign = tmp_path / "foreign.h5"
    with h5py.File(foreign, "w") as f:
        f["v"] = np.zeros(3)
    with pytest.raises(CheckpointError, match="not an hpcdist checkpoint"):
        Checkpoint(v=v).read(str(foreign))
    with pytest.raises(CheckpointError, match="does not exist"):
        Checkpoint(v=v).read(str(tmp_path / "nope.h5"))


def test_manager_interval_rule_from_tf(tmp_path):
    # TF 2.21's numbers (tf.train.CheckpointManager, checked by running it): interval 3,
    # max_to_keep 2, steps 0..9 -> saves at steps 0, 3, 6, 9 as ckpt-1..ckpt-4 (numbered by
    # save_counter, not by step); ckpt-3 and ckpt-4 are kept.
    step = hd.get_strategy().Variable(np.int64(0), trainable=False)
    ckpt = Checkpoint(step=step)
    manager = CheckpointManager(
        ckpt,
        str(tmp_path),
        max_to_keep=2,
        step_counter=step,
        checkpoint_interval=3,
    )
    saved = []
    for s in range(10):
        step.assign(s)
        path = manager.save()
        if path is not None:
            saved.append((s, os.path.basename(path)))
        assert manager.save() is None  # the same step is never saved twice
    assert saved == [(0, "ckpt-1.h5"), (3, "ckpt-2.h5"), (6, "ckpt-3.h5"), (9, "ckpt-4.h5")]
    assert [os.path.basename(p) for p in manager.checkpoints] == ["ckpt-3.h5", "ckpt-4.h5"]
    assert os.path.basename(manager.latest_checkpoint) == "ckpt-4.h5"
    assert sorted(f for f in os.listdir(tmp_path) if f.endswith(".h5")) == [
        "ckpt-3.h5",
        "ckpt-4.h5",
    ]
    # TF: a skipped save does not count; save(checkpoint_number=100) names the file and still
    # counts the save (save_counter 5), so the next default save is ckpt-6.
    assert int(ckpt.save_counter.numpy()) == 4
    step.assign(20)
    assert manager.save(checkpoint_number=100).endswith("ckpt-100.h5")
    assert int(ckpt.save_counter.numpy()) == 5
    step.assign(21)
    assert manager.save(check_interval=False).endswith("ckpt-6.h5")
    assert [os.path.basename(p) for p in manager.checkpoints] == ["ckpt-100.h5", "ckpt-6.h5"]
    # TF: a new manager restores save_counter with the checkpoint and numbers on from it.
    step2 = hd.get_strategy().Variable(np.int64(0), trainable=False)
    ckpt2 = Checkpoint(step=step2)
    again = CheckpointManager(
        ckpt2, str(tmp_path), max_to_keep=2, step_counter=step2, checkpoint_interval=3
    )
    assert again.restore_or_initialize().endswith("ckpt-6.h5")
    assert int(ckpt2.save_counter.numpy()) == 6 and int(step2.numpy()) == 21
    step2.assign(22)
    assert again.save() is None  # within the interval of the restored step
    step2.assign(24)
    assert again.save().endswith("ckpt-7.h5")


def test_manager_step_counter_without_interval_numbers_by_save_counter(tmp_path):
    # TF 2.21: step_counter=5 without an interval -> ckpt-1, ckpt-2 (the step is not the name).
    step = hd.get_strategy().Variable(np.int64(5), trainable=False)
    manager = CheckpointManager(Checkpoint(step=step), str(tmp_path), None, step_counter=step)
    assert os.path.basename(manager.save()) == "ckpt-1.h5"
    assert os.path.basename(manager.save()) == "ckpt-2.h5"


def test_manager_state_survives_and_restores(tmp_path):
    v = hd.get_strategy().Variable(np.zeros(3))
    manager = CheckpointManager(Checkpoint(v=v), str(tmp_path), max_to_keep=3)
    for i in range(5):
        v.assign(np.full(3, float(i)))
        manager.save()
    assert [os.path.basename(p) for p in manager.checkpoints] == [
        "ckpt-3.h5",
        "ckpt-4.h5",
        "ckpt-5.h5",
    ]
    state = json.loads((tmp_path / "checkpoint").read_text())
    assert state["latest"] == "ckpt-5.h5"
    w = hd.get_strategy().Variable(np.zeros(3))
    again = CheckpointManager(Checkpoint(v=w), str(tmp_path), max_to_keep=3)
    assert again.latest_checkpoint == manager.latest_checkpoint
    assert again.restore_or_initialize().endswith("ckpt-5.h5") and (w.numpy() == 4).all()
    # A corrupt newest file: fall back to the previous one, with a warning.
    with open(again.latest_checkpoint, "r+b") as f:
        f.truncate(100)
    assert again.restore_or_initialize().endswith("ckpt-4.h5") and (w.numpy() == 3).all()
    called = []
    empty = CheckpointManager(
        Checkpoint(v=w), str(tmp_path / "empty"), max_to_keep=None, init_fn=lambda: called.append(1)
    )
    assert empty.restore_or_initialize() is None and called == [1]


def test_manager_arguments_and_keep_every_n_hours(tmp_path, monkeypatch):
    v = hd.get_strategy().Variable(np.zeros(1))
    with pytest.raises(ValueError, match="max_to_keep"):
        CheckpointManager(Checkpoint(v=v), str(tmp_path), max_to_keep=0)
    with pytest.raises(ValueError, match="step_counter"):
        CheckpointManager(Checkpoint(v=v), str(tmp_path), max_to_keep=1, checkpoint_interval=2)
    clock = [1000.0]
    monkeypatch.setattr("hpcdist.checkpoint.manager.time.time", lambda: clock[0])
    manager = CheckpointManager(
        Checkpoint(v=v), str(tmp_path / "h"), max_to_keep=1, keep_checkpoint_every_n_hours=1
    )
    for _ in range(5):
        manager.save()
        clock[0] += 1800  # half an hour per save
    kept = sorted(f for f in os.listdir(tmp_path / "h") if f.endswith(".h5"))
    # TF's rule: a checkpoint leaving the window is preserved when it is at least n hours
    # younger than the last preserved one (the manager's start counts as the first): ckpt-3.
    assert kept == ["ckpt-3.h5", "ckpt-5.h5"]
    assert [os.path.basename(p) for p in manager.checkpoints] == ["ckpt-5.h5"]


def test_async_save(tmp_path):
    v = hd.get_strategy().Variable(np.arange(100000.0))
    ckpt = Checkpoint(v=v)
    manager = CheckpointManager(ckpt, str(tmp_path), max_to_keep=2)
    options = CheckpointOptions(experimental_enable_async_checkpoint=True)
    path = manager.save(options=options)
    v.assign_add(1.0)  # training goes on; the snapshot was taken before
    ckpt.sync()
    w = hd.get_strategy().Variable(np.zeros(100000))
    Checkpoint(v=w).read(path)
    assert np.array_equal(w.numpy(), np.arange(100000.0))
    assert json.loads((tmp_path / "checkpoint").read_text())["latest"] == os.path.basename(path)


def test_async_saves_refill_one_host_copy_and_each_file_keeps_its_values(tmp_path):
    v = hd.get_strategy().Variable(np.arange(50000.0))
    small = hd.get_strategy().Variable(np.zeros(3, np.float32))
    ckpt = Checkpoint(v=v, small=small)
    options = CheckpointOptions(experimental_enable_async_checkpoint=True)
    paths, copies = [], []
    for step in range(3):
        paths.append(ckpt.write(str(tmp_path / f"a{step}"), options))
        copies.append(ckpt._host_copies["v"])
        v.assign_add(1.0)  # training goes on while the file is written
    ckpt.sync()
    assert copies[0] is copies[1] is copies[2]  # later saves refill the first one's copy
    assert not np.shares_memory(copies[0], v.numpy())
    for step, path in enumerate(paths):
        w = hd.get_strategy().Variable(np.zeros(50000))
        Checkpoint(v=w).read(path)
        assert np.array_equal(w.numpy(), np.arange(50000.0) + step), step
    kept = np.ones(3, np.float32)
    assert _host_copy(np.arange(3, dtype=np.float32), kept) is kept and kept.tolist() == [0, 1, 2]
    for other in (np.arange(4, dtype=np.float32), np.arange(3.0)):  # new shape or dtype
        fresh = _host_copy(other, kept)
        assert fresh is not kept and fresh.dtype == other.dtype and np.array_equal(fresh, other)


def test_model_checkpoint_and_backup_and_restore(tmp_path):
    x, y = cases.data()
    model = cases.build()
    saver = hd.nn.callbacks.ModelCheckpoint(
        str(tmp_path / "m-{epoch:02d}"), monitor="loss", save_best_only=True
    )
    model.fit(x, y, epochs=3, verbose=0, callbacks=[saver])
    assert [os.path.basename(p) for p in saver.saved] == ["m-01.h5", "m-02.h5", "m-03.h5"]
    fresh = cases.build()
    Checkpoint(model=fresh, optimizer=fresh.optimizer).read(saver.saved[-1]).assert_consumed()
    assert all(
        np.array_equal(a, b) for a, b in zip(model.get_weights(), fresh.get_weights(), strict=True)
    )

    # Interrupted after 2 epochs (EarlyStopping plays the failure), resumed by a new fit.
    straight = cases.build()
    straight.fit(x, y, epochs=4, verbose=0, seed=9)
    backup = str(tmp_path / "backup")

    class StopAfter(hd.nn.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 1:
                self.model.stop_training = True

    first = cases.build()
    first.fit(
        x,
        y,
        epochs=4,
        verbose=0,
        seed=9,
        callbacks=[hd.nn.callbacks.BackupAndRestore(backup, delete_checkpoint=False), StopAfter()],
    )
    resumed = cases.build()
    history = resumed.fit(
        x, y, epochs=4, verbose=0, seed=9, callbacks=[hd.nn.callbacks.BackupAndRestore(backup)]
    )
    assert len(history.history["loss"]) == 2  # epochs 3 and 4 only
    for a, b in zip(straight.get_weights(), resumed.get_weights(), strict=True):
        assert np.array_equal(a, b)
    assert not os.path.exists(backup)  # removed after a completed fit


def test_preemption_handler_in_one_process(tmp_path):
    import signal

    v = hd.get_strategy().Variable(np.zeros(2))
    manager = CheckpointManager(Checkpoint(v=v), str(tmp_path), max_to_keep=1)
    exits = []
    handler = hd.PreemptionCheckpointHandler(manager, exit_fn=lambda: exits.append(1))
    try:
        for i in range(3):
            handler.run(lambda: v.assign_add(np.ones(2)))
            if i == 1:
                signal.raise_signal(signal.SIGUSR2)
        assert exits == [1] and handler.total_run_calls == 3
    finally:
        handler.close()
    w = hd.get_strategy().Variable(np.zeros(2))
    again = hd.PreemptionCheckpointHandler(
        CheckpointManager(Checkpoint(v=w), str(tmp_path), max_to_keep=1), exit_fn=lambda: None
    )
    again.close()
    assert again.total_run_calls == 3 and (w.numpy() == 3).all()


class _Pieces:
    """A value given as consecutive first-axis pieces (how sharded variables are saved)."""

    def __init__(self, parts, rows=None):
        self.parts = parts
        self.shape = (rows or sum(len(p) for p in parts), *parts[0].shape[1:])
        self.dtype = parts[0].dtype

    def slices(self):
        yield from self.parts


def test_sliced_values_are_written_piece_by_piece_and_checked(tmp_path):
    from hpcdist.checkpoint.format import CheckpointError, read_arrays, write_arrays

    full = np.arange(30, dtype=np.float32).reshape(10, 3)
    path = str(tmp_path / "sliced.h5")
    write_arrays(path, {"table": _Pieces([full[:4], full[4:7], full[7:]]), "plain": full[0]})
    arrays, _ = read_arrays(path)
    assert np.array_equal(arrays["table"], full)  # the checksum of the whole was checked too
    with pytest.raises(ValueError, match="cover 7 of 10 rows"):
        write_arrays(str(tmp_path / "short.h5"), {"t": _Pieces([full[:4], full[4:7]], rows=10)})
    assert not (tmp_path / "short.h5").exists()  # a failed write leaves nothing
    import h5py

    with h5py.File(path, "r+") as f:
        f["table"][5, 1] = -1.0
    with pytest.raises(CheckpointError, match="checksum"):
        read_arrays(path)


def test_a_restore_that_does_not_fit_changes_nothing(tmp_path):
    v = hd.get_strategy().Variable
    path = Checkpoint(a=v(np.ones(2)), b=v(np.ones(4)), it=Position(5)).write(str(tmp_path / "x"))
    a, b, it = v(np.zeros(2)), v(np.zeros(3)), Position(0)
    ckpt = Checkpoint(a=a, b=b, it=it)
    with pytest.raises(CheckpointMismatchError, match=r"b has shape \(4,\) in the file.* \(3,\)"):
        ckpt.restore(path)
    # Verified first, assigned after: `a` (which fits and comes first) and the state are as before.
    assert (a.numpy() == 0).all() and it.steps == 0 and int(ckpt.save_counter.numpy()) == 0
    with pytest.raises(CheckpointMismatchError, match=r"it has state keys \['steps'\] in the file"):
        Checkpoint(it=Other(0)).read(path)


class Position:
    """A state object (like a distributed iterator's position)."""

    def __init__(self, steps):
        self.steps = steps

    def checkpoint_state(self):
        return {"steps": np.int64(self.steps)}

    def restore_state(self, state):
        self.steps = int(state["steps"])


class Other(Position):
    """Saves other keys than `Position`: a changed structure."""

    def checkpoint_state(self):
        return {"epoch": np.int64(0)}


def test_a_future_format_version_is_rejected(tmp_path):
    v = hd.get_strategy().Variable(np.ones(2))
    path = Checkpoint(v=v).write(str(tmp_path / "future"))
    with h5py.File(path, "r+") as f:
        f.attrs["version"] = 99
    with pytest.raises(
        CheckpointMismatchError, match=r"future\.h5' has format version 99.*up to 2"
    ):
        Checkpoint(v=v).read(path)
    # Not "damaged": the manager raises rather than skipping it for an older checkpoint.
    assert not issubclass(CheckpointMismatchError, CheckpointCorruptError)


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_checkpoint_files_follow_the_umask(tmp_path, umask):
    v = hd.get_strategy().Variable(np.ones(2))
    old = os.umask(umask)
    try:
        manager = CheckpointManager(Checkpoint(v=v), str(tmp_path), max_to_keep=1)
        path = manager.save()
    finally:
        os.umask(old)
    for name in (path, str(tmp_path / "checkpoint")):
        assert os.stat(name).st_mode & 0o777 == 0o666 & ~umask, name


def test_a_corrupt_state_file_warns_naming_it(tmp_path):
    v = hd.get_strategy().Variable(np.ones(2))
    (tmp_path / "checkpoint").write_text('{"checkpoints": [{"file": "ckpt-1.h5"')  # torn JSON
    with pytest.warns(RuntimeWarning, match=r"state file '.*/checkpoint' is unreadable"):
        manager = CheckpointManager(Checkpoint(v=v), str(tmp_path), max_to_keep=1)
    assert manager.checkpoints == []
    (tmp_path / "checkpoint").write_text("[1, 2]")  # JSON, but not the manager's
    with pytest.warns(RuntimeWarning, match="AttributeError"):
        CheckpointManager(Checkpoint(v=v), str(tmp_path), max_to_keep=1)


def test_a_failed_state_update_deletes_no_checkpoint(tmp_path):
    v = hd.get_strategy().Variable(np.ones(2))
    manager = CheckpointManager(Checkpoint(v=v), str(tmp_path), max_to_keep=1)
    first = manager.save()
    os.remove(tmp_path / "checkpoint")
    os.mkdir(tmp_path / "checkpoint")  # the state file cannot be replaced now
    with pytest.raises(CheckpointWriteError, match=r"cannot write '.*/checkpoint'.*errno 21"):
        manager.save()
    assert os.path.exists(first) and manager.checkpoints == [first]


def test_h5py_write_failures_become_errors_naming_file_and_errno(tmp_path):
    # h5py reports some failed writes as RuntimeError, with the errno only in its text.
    h5py_error = RuntimeError(
        "Can't decrement id ref count (file write failed: time = ..., filename = 'x', "
        "file descriptor = 3, errno = 28, error message = 'No space left on device')"
    )
    error = format_module._write_error("/c/ckpt-3.h5", h5py_error)
    assert isinstance(error, OSError) and isinstance(error, CheckpointError)
    assert error.errno == 28 and error.filename == "/c/ckpt-3.h5"
    assert "'/c/ckpt-3.h5': No space left on device (errno 28)" in str(error)
