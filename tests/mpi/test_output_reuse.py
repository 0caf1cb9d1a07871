"""Out-of-place all-reduce results stay intact while held, and are right when reused."""

from __future__ import annotations

import numpy as np
import pytest

import hpcdist as hd

pytestmark = pytest.mark.mpi


def test_held_results_are_never_overwritten() -> None:
    comm = hd.comm.world()
    n = 1 << 18  # 1 MiB of float32: pooled
    results = []
    for step in range(4):
        x = np.full(n, float(step + comm.rank), np.float32)
        results.append(comm.allreduce(x))
    for step, y in enumerate(results):
        want = sum(step + r for r in range(comm.size))
        np.testing.assert_array_equal(y, np.full(n, want, np.float32))


def test_reused_outputs_give_right_answers_in_a_loop() -> None:
    comm = hd.comm.world()
    g = np.full(1 << 18, 1.0, np.float32)
    for _ in range(5):
        g = comm.allreduce(g) / comm.size  # the previous result is dropped each step
    np.testing.assert_array_equal(g, np.ones(1 << 18, np.float32))
    y = comm.allreduce(np.ones((512, 512), np.float64), op="max")
    assert y.shape == (512, 512) and float(y.max()) == 1.0
