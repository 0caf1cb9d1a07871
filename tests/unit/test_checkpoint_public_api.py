"""`Checkpoint`'s public methods for the manager and the preemption handler: `track`,
`write_with_outcome` and `after_write` (synchronous and asynchronous writes)."""

import os
import threading

import numpy as np
import pytest

import hpcdist as hd
from hpcdist.checkpoint import Checkpoint, CheckpointManager, CheckpointOptions


def test_track_adds_an_object_to_what_is_saved(tmp_path):
    v = hd.Variable(np.float32(1.0))
    extra = hd.Variable(np.int64(7))
    ckpt = Checkpoint(v=v)
    ckpt.track("extra", extra)
    path = ckpt.write(str(tmp_path / "a"))
    extra.assign(0)
    ckpt.read(path).assert_consumed()
    assert int(extra.numpy()) == 7
    with pytest.raises(ValueError, match="reserved"):
        ckpt.track("save_counter", extra)
    with pytest.raises(ValueError):
        ckpt.track("bad", object())


def test_write_with_outcome_says_this_process_wrote(tmp_path):
    ckpt = Checkpoint(v=hd.Variable(np.float32(2.0)))
    outcome = ckpt.write_with_outcome(str(tmp_path / "b"))
    assert outcome.path == str(tmp_path / "b.h5") and outcome.written_here
    assert os.path.exists(outcome.path)


def test_after_write_runs_now_after_a_synchronous_write(tmp_path):
    ckpt = Checkpoint(v=hd.Variable(np.float32(2.0)))
    ckpt.write(str(tmp_path / "c"))
    ran = []
    ckpt.after_write(lambda: ran.append(threading.current_thread().name))
    assert ran == [threading.current_thread().name]


def test_after_write_follows_an_asynchronous_write_on_its_thread(tmp_path):
    ckpt = Checkpoint(v=hd.Variable(np.float32(2.0)))
    options = CheckpointOptions(experimental_enable_async_checkpoint=True)
    path = ckpt.write(str(tmp_path / "d"), options=options)
    seen = []
    ckpt.after_write(lambda: seen.append((os.path.exists(path), threading.current_thread().name)))
    ckpt.sync()
    assert seen and seen[0][0] and seen[0][1].startswith("hpcdist-ckpt")

    def fail():
        raise OSError(28, "no space left")

    ckpt.write(str(tmp_path / "e"), options=options)
    ckpt.after_write(fail)
    with pytest.raises(OSError, match="no space"):
        ckpt.sync()


def test_manager_async_save_names_complete_files(tmp_path):
    v = hd.Variable(np.float32(1.0))
    manager = CheckpointManager(Checkpoint(v=v), str(tmp_path), max_to_keep=2)
    options = CheckpointOptions(experimental_enable_async_checkpoint=True)
    paths = [manager.save(options=options) for _ in range(3)]
    manager.checkpoint.sync()
    assert hd.latest_checkpoint(str(tmp_path)) == paths[-1]
    assert [os.path.exists(p) for p in paths] == [False, True, True]
