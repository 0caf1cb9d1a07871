"""The preempt-requeue-resume check, shared by the one-node and two-node Slurm tests.

``run(cmd, timeout, **env)`` runs a Slurm command (srun, sbatch, scontrol, scancel) against the
cluster under test and returns the completed process; the check needs nothing else.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from tests.helpers import read_log

Run = Callable[..., subprocess.CompletedProcess]
SCRIPT = "tests/integration/scripts/preemptible_train.py"


def job_state(run: Run, job: str) -> tuple[str, str]:
    """The job's ``JobState`` and the whole ``scontrol show job`` text."""
    out = run(["scontrol", "show", "job", job], timeout=30).stdout
    for field in out.split():
        if field.startswith("JobState="):
            return field.split("=", 1)[1], out
    return "UNKNOWN", out


def wait_state(run: Run, job: str, wanted: set[str], limit: float = 150) -> tuple[str, str]:
    """Poll the job's state until it is one of ``wanted`` or ``limit`` seconds pass."""
    deadline = time.monotonic() + limit
    state, text = job_state(run, job)
    while state not in wanted and time.monotonic() < deadline:
        time.sleep(1)
        state, text = job_state(run, job)
    return state, text


def check_preempted_job_resumes(
    run: Run, tmp_path: Path, srun_args: list[str], sbatch_args: list[str]
) -> str:
    """A job signalled by ``scancel --signal=USR2`` checkpoints, requeues and ends bitwise
    equal to an uninterrupted ``srun SRUN_ARGS`` run of the same script. Returns the job's log.
    """
    straight = run(
        [
            "srun",
            "--mpi=pmi2",
            *srun_args,
            sys.executable,
            SCRIPT,
            str(tmp_path / "a"),
            str(tmp_path / "a.npz"),
        ],
        timeout=100,
    )
    assert straight.returncode == 0, straight.stderr
    out = tmp_path / "job.out"
    sub = run(
        [
            "sbatch",
            "--parsable",
            "--time=00:10:00",
            f"--output={out}",
            *sbatch_args,
            "slurm/preemptible.sbatch",
        ],
        timeout=60,
        SCRIPT=SCRIPT,
        SCRIPT_ARGS=f"{tmp_path / 'b'} {tmp_path / 'b.npz'}",
        PYTHON=sys.executable,
        STEP_SLEEP="0.5",
    )
    assert sub.returncode == 0, sub.stderr
    job = sub.stdout.strip().split(";")[0]
    try:
        deadline = time.monotonic() + 120
        while "starting at step" not in read_log(out):
            assert time.monotonic() < deadline, job_state(run, job)[1]
            time.sleep(0.5)
        time.sleep(2.0)  # a few steps in
        signal = run(["scancel", "--signal=USR2", job], timeout=30)  # to the job's steps
        assert signal.returncode == 0, signal.stderr
        state, text = wait_state(run, job, {"PENDING", "REQUEUED", "COMPLETED", "FAILED"}, 120)
        assert state in ("PENDING", "REQUEUED"), text + read_log(out)
        # slurmd refuses a credential issued in the second its job was revoked ("Job credential
        # revoked"): let the clock move past the requeue before starting the job again.
        time.sleep(2.0)
        run(["scontrol", "update", f"JobId={job}", "StartTime=now"], timeout=30)
        state, text = wait_state(run, job, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}, 150)
        log = read_log(out)
        assert state == "COMPLETED", text + log
    finally:
        run(["scancel", job], timeout=30)
    assert "run 0 of job" in log and "run 1 of job" in log
    assert "preemption signal: saved" in log  # "run 1 of job" above proves the requeue
    a, b = np.load(tmp_path / "a.npz"), np.load(tmp_path / "b.npz")
    assert int(b["start"]) > 0 and int(b["steps"]) == int(a["steps"])
    for key in a.files:
        if key.startswith("arr_"):
            assert np.array_equal(a[key], b[key]), key  # bitwise
    return log
