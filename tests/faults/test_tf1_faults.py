"""TF1 jobs (`hpcdist.compat.v1`) in which a task dies: every rank ends, fast, non-zero.

A worker or a ps raising an uncaught exception aborts the job (exit code 17) instead of leaving
the ps serving and the other worker training (or waiting for RMA traffic that never completes).
"""

from __future__ import annotations

import os
import time

import pytest

from hpcdist.abort import ABORT_EXIT_CODE
from tests.helpers import clean_env, run_mpi


@pytest.mark.parametrize("who", ["worker", "ps"])
def test_a_task_that_dies_ends_the_job(who: str) -> None:
    env = clean_env(HPCDIST_TIMEOUT_SECONDS="30", PATH=os.environ.get("PATH", ""))
    start = time.monotonic()
    job = run_mpi(3, ["tests/faults/scripts/tf1_task_fails.py", who], timeout=60, env=env)
    assert job.returncode == ABORT_EXIT_CODE, job.stdout + job.stderr
    message = {"worker": "worker 1 fails on purpose", "ps": "the ps fails on purpose"}[who]
    assert message in job.stderr, job.stderr
    assert time.monotonic() - start < 30, "the job outlived the failure by too long"
