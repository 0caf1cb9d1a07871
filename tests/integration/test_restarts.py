"""``hpcdist run --max-restarts``: a job whose rank is killed comes back by itself.

Every job runs through the real command line (mpiexec underneath), bounded by a timeout.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np

from tests.helpers import ROOT, clean_env

SCRIPT = "tests/integration/scripts/restartable_train.py"


def hpcdist_run(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hpcdist", "run", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=clean_env(HPCDIST_TIMEOUT_SECONDS="20"),
        cwd=ROOT,
    )


def weights(path) -> tuple[list[np.ndarray], np.ndarray, int]:
    with np.load(path) as f:
        arrays = [f[f"arr_{i}"] for i in range(len(f.files) - 2)]
        return arrays, f["losses"], int(f["attempt"])


def test_a_killed_rank_restarts_the_job_which_ends_as_if_uninterrupted(tmp_path) -> None:
    clean = hpcdist_run("-n", "2", SCRIPT, str(tmp_path / "a"), str(tmp_path / "a.npz"))
    assert clean.returncode == 0, clean.stdout + clean.stderr
    job = hpcdist_run(
        "-n", "2", "--max-restarts", "2", SCRIPT, str(tmp_path / "b"), str(tmp_path / "b.npz"), "6"
    )
    assert job.returncode == 0, job.stdout + job.stderr
    assert "restart 1 of 2 on 2 rank(s)" in job.stderr, job.stderr
    assert "attempt 1 rank 0 of 2 starts at step 6" in job.stdout, job.stdout
    want, _, _ = weights(tmp_path / "a.npz")
    got, losses, attempt = weights(tmp_path / "b.npz")
    assert attempt == 1 and len(losses) == 6  # steps 6..11 after the restart
    for w, g in zip(want, got, strict=True):
        np.testing.assert_array_equal(g, w)  # bitwise: same data, same order, same sums


def test_restart_on_fewer_ranks_reshards_and_keeps_learning(tmp_path) -> None:
    job = hpcdist_run(
        "-n", "2", "--max-restarts", "1", "--min-ranks", "1",
        SCRIPT, str(tmp_path / "c"), str(tmp_path / "c.npz"), "6",
    )  # fmt: skip
    assert job.returncode == 0, job.stdout + job.stderr
    assert "restart 1 of 1 on 1 rank(s)" in job.stderr, job.stderr
    assert "attempt 1 rank 0 of 1 starts at step 6" in job.stdout, job.stdout
    _, losses, attempt = weights(tmp_path / "c.npz")
    assert attempt == 1 and len(losses) == 6
    assert losses[-1] < losses[0], losses  # still learning after the reshard


def test_restarts_used_up_give_the_jobs_exit_code_and_one_line(tmp_path) -> None:
    bad = tmp_path / "fail.py"
    bad.write_text(
        "import os, sys\nprint('attempt', os.environ['HPCDIST_RESTART_COUNT'])\nsys.exit(3)\n"
    )
    job = hpcdist_run("-n", "1", "--max-restarts", "2", str(bad), timeout=120)
    assert job.returncode == 3, job.stdout + job.stderr
    assert [line for line in job.stdout.splitlines() if line.startswith("attempt")] == [
        "attempt 0",
        "attempt 1",
        "attempt 2",
    ]
    last = job.stderr.strip().splitlines()[-1]
    assert last.startswith("hpcdist run: the job failed with exit code 3 after"), last
    assert last.endswith("and 2 restart(s) were used up; giving up"), last


def test_a_preempted_job_is_not_restarted(tmp_path) -> None:
    preempted = tmp_path / "preempted.py"
    preempted.write_text("import sys\nfrom hpcdist.exit_codes import PREEMPTION_EXIT_CODE\n"
                         "sys.exit(PREEMPTION_EXIT_CODE)\n")  # fmt: skip
    job = hpcdist_run("-n", "1", "--max-restarts", "3", str(preempted), timeout=120)
    assert job.returncode == 42
    assert "was preempted (exit code 42)" in job.stderr and "restart 1" not in job.stderr
