"""Checkpoints across processes: preemption and resume, resharding, writers killed at random."""

import os
import random
import signal
import subprocess
import sys
import time

import numpy as np

from hpcdist.checkpoint import PREEMPTION_EXIT_CODE
from tests.helpers import ROOT, clean_env, run_mpi

SCRIPTS = "tests/integration/scripts"


def test_preempted_run_resumes_to_bitwise_equal_weights(tmp_path):
    straight = run_mpi(
        2,
        [f"{SCRIPTS}/preemptible_train.py", str(tmp_path / "a"), str(tmp_path / "a.npz")],
        timeout=90,
    )
    assert straight.returncode == 0, straight.stderr
    first = run_mpi(
        2,
        [f"{SCRIPTS}/preemptible_train.py", str(tmp_path / "b"), str(tmp_path / "b.npz"), "5"],
        timeout=90,
    )
    assert first.returncode == PREEMPTION_EXIT_CODE, first.stdout + first.stderr
    assert "preemption signal: saved" in first.stderr
    assert not (tmp_path / "b.npz").exists()
    second = run_mpi(
        2,
        [f"{SCRIPTS}/preemptible_train.py", str(tmp_path / "b"), str(tmp_path / "b.npz")],
        timeout=90,
    )
    assert second.returncode == 0, second.stderr
    assert "starting at step 6" in second.stdout  # the signalled step finished before saving
    a, b = np.load(tmp_path / "a.npz"), np.load(tmp_path / "b.npz")
    assert int(b["start"]) == 6 and int(b["steps"]) == int(a["steps"]) == 14
    for key in a.files:
        if key.startswith("arr_"):
            assert np.array_equal(a[key], b[key]), key  # bitwise


def test_restore_on_a_different_number_of_ranks(tmp_path):
    saved = run_mpi(2, [f"{SCRIPTS}/save_restore.py", "save", str(tmp_path)], timeout=90)
    assert saved.returncode == 0, saved.stderr
    for ranks in (3, 1):
        restored = run_mpi(
            ranks, [f"{SCRIPTS}/save_restore.py", "restore", str(tmp_path)], timeout=90
        )
        assert restored.returncode == 0, restored.stderr
        assert f"restored on {ranks} rank(s) what 2 rank(s) saved" in restored.stdout


def test_writer_killed_at_random_moments_never_leaves_a_torn_checkpoint(tmp_path):
    import hpcdist as hd

    rng = random.Random(1234)
    seen = []
    for _ in range(12):
        proc = subprocess.Popen(
            [sys.executable, f"{SCRIPTS}/checkpoint_writer.py", str(tmp_path)],
            cwd=ROOT,
            env=clean_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(rng.uniform(1.2, 3.0))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        step = hd.get_strategy().Variable(np.int64(0), trainable=False)
        big = hd.get_strategy().Variable(np.zeros((256, 1024)))
        small = hd.get_strategy().Variable(np.zeros(7))
        manager = hd.CheckpointManager(
            hd.Checkpoint(step=step, big=big, small=small), str(tmp_path), max_to_keep=3
        )
        latest = manager.restore_or_initialize()
        assert latest is not None
        s = int(step.numpy())
        assert s > 0 and (big.numpy() == s).all() and (small.numpy() == s).all()  # consistent
        seen.append(s)
    # Each run resumed from the last complete checkpoint (a kill during start-up, on a loaded
    # machine, may save nothing new): never backwards, and forwards overall.
    assert seen == sorted(seen) and seen[-1] > seen[0], seen
    leftovers = [f for f in os.listdir(tmp_path) if f.startswith(".tmp-")]
    assert len(leftovers) <= 12  # only the files being written at the kills, never visible
