"""CheckpointManager: which saves happen, their names, which files are kept, what restores.

File names are compared without hpcdist's ``.h5`` extension (a documented difference: the files
are HDF5, TF's are an index and data shards under the same prefix).
"""

import os
import time

import numpy as np
import pytest

from tests.conformance.helpers import assert_documented, conform

HDF5_FILES = "docs/differences-from-tensorflow.md: Files are HDF5, not TF's format"


def name(path):
    """A checkpoint path's file name without hpcdist's .h5 extension (None stays None)."""
    return None if path is None else os.path.basename(str(path)).removesuffix(".h5")


def names(paths):
    return [name(p) for p in paths]


def on_disk(directory):
    """The checkpoint prefixes present in ``directory`` (TF: <prefix>.index; hpcdist: .h5)."""
    found = set()
    for f in os.listdir(directory):
        if f.endswith(".index"):
            found.add(f.removesuffix(".index"))
        elif f.endswith(".h5"):
            found.add(f.removesuffix(".h5"))
    return sorted(found)


@pytest.fixture
def where(tmp_path):
    """A fresh directory per side."""
    return lambda lib: str(tmp_path / lib.name)


def test_file_names_are_a_documented_difference():
    assert_documented(HDF5_FILES)


def test_save_counter_numbering_and_max_to_keep(where):
    def case(lib):
        v = lib.tf.Variable(np.zeros(2, np.float32))
        ckpt = lib.train.Checkpoint(v=v)
        manager = lib.train.CheckpointManager(ckpt, where(lib), max_to_keep=2)
        saved = []
        for i in range(4):
            v.assign(np.full(2, float(i), np.float32))
            saved.append(name(manager.save()))
        return {
            "saved": saved,
            "checkpoints": names(manager.checkpoints),
            "latest": name(manager.latest_checkpoint),
            "latest_fn": name(lib.train.latest_checkpoint(where(lib))),
            "save_counter": int(ckpt.save_counter.numpy()),
            "on_disk": on_disk(where(lib)),
        }

    out = conform(case)
    assert out["saved"] == ["ckpt-1", "ckpt-2", "ckpt-3", "ckpt-4"]
    assert out["on_disk"] == ["ckpt-3", "ckpt-4"]


def test_interval_and_step_counter_keep_ckpt_3_and_ckpt_4(where):
    """Interval 3, max_to_keep 2, steps 0..9: saves at steps 0, 3, 6, 9 named by save_counter."""

    def case(lib):
        step = lib.tf.Variable(np.int64(0), trainable=False)
        ckpt = lib.train.Checkpoint(step=step)
        manager = lib.train.CheckpointManager(
            ckpt, where(lib), max_to_keep=2, step_counter=step, checkpoint_interval=3
        )
        saved, again = [], []
        for s in range(10):
            step.assign(s)
            path = manager.save()
            if path is not None:
                saved.append((s, name(path)))
            again.append(manager.save())  # the same step twice: never
        counter = int(ckpt.save_counter.numpy())
        step.assign(20)
        numbered = name(manager.save(checkpoint_number=100))
        step.assign(21)
        forced = name(manager.save(check_interval=False))
        return {
            "saved": saved,
            "again": again,
            "counter": counter,
            "numbered": numbered,
            "forced": forced,
            "counter_after": int(ckpt.save_counter.numpy()),
            "checkpoints": names(manager.checkpoints),
            "on_disk": on_disk(where(lib)),
        }

    out = conform(case)
    assert out["saved"] == [(0, "ckpt-1"), (3, "ckpt-2"), (6, "ckpt-3"), (9, "ckpt-4")]


def test_a_new_manager_restores_and_numbers_on(where):
    def case(lib):
        step = lib.tf.Variable(np.int64(0), trainable=False)
        v = lib.tf.Variable(np.zeros(2, np.float32))
        manager = lib.train.CheckpointManager(
            lib.train.Checkpoint(step=step, v=v),
            where(lib),
            max_to_keep=3,
            step_counter=step,
            checkpoint_interval=2,
        )
        for s in range(5):
            step.assign(s)
            v.assign(np.full(2, float(s), np.float32))
            manager.save()
        step2 = lib.tf.Variable(np.int64(0), trainable=False)
        v2 = lib.tf.Variable(np.zeros(2, np.float32))
        ckpt2 = lib.train.Checkpoint(step=step2, v=v2)
        again = lib.train.CheckpointManager(
            ckpt2, where(lib), max_to_keep=3, step_counter=step2, checkpoint_interval=2
        )
        restored = name(again.restore_or_initialize())
        state = (int(step2.numpy()), v2.numpy(), int(ckpt2.save_counter.numpy()))
        step2.assign(5)
        within = again.save()
        step2.assign(6)
        after = name(again.save())
        return restored, state, within, after, names(again.checkpoints), on_disk(where(lib))

    conform(case)


def test_step_counter_without_interval(where):
    def case(lib):
        step = lib.tf.Variable(np.int64(5), trainable=False)
        manager = lib.train.CheckpointManager(
            lib.train.Checkpoint(step=step), where(lib), None, step_counter=step
        )
        return name(manager.save()), name(manager.save()), on_disk(where(lib))

    conform(case)


def test_manager_after_checkpoint_save(where):
    """Files written by Checkpoint.save are not the manager's: it never deletes them."""

    def case(lib):
        directory = where(lib)
        ckpt = lib.train.Checkpoint(v=lib.tf.Variable(1.0))
        first = name(ckpt.save(os.path.join(directory, "ckpt")))
        second = name(ckpt.save(os.path.join(directory, "ckpt")))
        manager = lib.train.CheckpointManager(ckpt, directory, max_to_keep=2)
        before = (names(manager.checkpoints), name(manager.latest_checkpoint))
        third = name(manager.save())
        listed = names(manager.checkpoints)
        manager.save()
        manager.save()
        return first, second, before, third, listed, on_disk(directory)

    conform(case)


def test_restore_or_initialize_on_an_empty_directory(where):
    def case(lib):
        called = []
        manager = lib.train.CheckpointManager(
            lib.train.Checkpoint(v=lib.tf.Variable(1.0)),
            where(lib),
            max_to_keep=1,
            init_fn=lambda: called.append(1),
        )
        return manager.restore_or_initialize(), called, manager.latest_checkpoint

    conform(case)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_to_keep": 0},
        {"max_to_keep": -1},
        {"max_to_keep": 1, "checkpoint_interval": 2},
        {"max_to_keep": None},
    ],
)
def test_manager_arguments(where, kwargs):
    def case(lib):
        manager = lib.train.CheckpointManager(
            lib.train.Checkpoint(v=lib.tf.Variable(1.0)), where(lib), **kwargs
        )
        return name(manager.save()), names(manager.checkpoints)

    conform(case)


def test_keep_checkpoint_every_n_hours(where, monkeypatch):
    """max_to_keep 1, n = 1 hour, a save every half hour: TF preserves ckpt-3 (and ckpt-5)."""
    clock = [1.0e9]
    monkeypatch.setattr(time, "time", lambda: clock[0])

    def case(lib):
        clock[0] = 1.0e9
        manager = lib.train.CheckpointManager(
            lib.train.Checkpoint(v=lib.tf.Variable(1.0)),
            where(lib),
            max_to_keep=1,
            keep_checkpoint_every_n_hours=1,
        )
        for _ in range(5):
            manager.save()
            clock[0] += 1800
        return on_disk(where(lib)), names(manager.checkpoints)

    out = conform(case)
    assert out[0] == ["ckpt-3", "ckpt-5"]


def test_checkpoint_restore_of_a_missing_path_raises(where):
    def case(lib):
        ckpt = lib.train.Checkpoint(v=lib.tf.Variable(1.0))
        return ckpt.restore(os.path.join(where(lib), "nothing-here"))

    conform(case)
