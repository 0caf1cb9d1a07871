"""Exits are bounded: a rank that leaves early never leaves the job hanging.

With a deadline (``HPCDIST_TIMEOUT_SECONDS``), a job where one rank leaves while the others
still need it ends with a non-zero status within the deadline plus a few seconds, and the rank
that left is named; without one, the stall warning names it and says how to set the deadline.
A rank that leaves early when nobody needs it any more ends the job normally. Each job runs as a
subprocess under a wall-clock bound (`tests.faults.scripts.comm_job.run_job`).
"""

from __future__ import annotations

import re

import pytest

from tests.faults.scripts.comm_job import run_job

DEADLINE = 5.0
#: The bound the issue sets: from the moment the rank leaves to the end of the job.
EXIT_BOUND = DEADLINE + 5.0
#: Launching and starting MPI on every rank (oversubscribed 2-core machines: a few seconds).
LAUNCH_ALLOWANCE = 20.0
SCRIPT = "tests/faults/scripts/comm_exit.py"


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize(
    ("how", "others", "launcher"),
    [
        ("early", "catch", "python"),
        ("early", "raise", "python -m hpcdist"),
        ("caught", "catch", "python -m hpcdist"),
        ("caught", "raise", "python"),
    ],
)
def test_a_rank_that_leaves_early_ends_the_job_within_the_deadline(n, how, others, launcher):
    args = [SCRIPT, how, others]
    if launcher == "python -m hpcdist":
        args = ["-m", "hpcdist", *args]
    job = run_job(
        n, args, timeout=EXIT_BOUND + LAUNCH_ALLOWANCE, HPCDIST_TIMEOUT_SECONDS=str(DEADLINE)
    )
    leaver = n - 1
    assert job.returncode is not None, f"the job hung:\n{job.output}"
    after_leaving = job.ended_at - job.stamp(f"rank {leaver} leaves")
    print(
        f"n={n} {how}/{others} ({launcher}): exit status {job.returncode}, job {job.elapsed:.1f} s,"
        f" {after_leaving:.1f} s after rank {leaver} left (deadline {DEADLINE:g} s)"
    )
    assert job.returncode != 0, job.output
    assert after_leaving < EXIT_BOUND, job.output
    assert job.elapsed < EXIT_BOUND + LAUNCH_ALLOWANCE, job.output
    # The rank that left is named: by the ranks waiting for it, or by itself at its exit.
    named = re.search(
        f"rank\\(s\\) {leaver} never joined; rank {leaver} left the program", job.output
    )
    itself = re.search(f"rank {leaver} of {n} left the program, but the other ranks", job.output)
    assert named or itself, job.output


@pytest.mark.parametrize("n", [2, 4])
def test_a_rank_that_leaves_when_nobody_needs_it_ends_the_job_normally(n):
    deadline = 20.0  # far beyond the clean exit, so that waiting for it cannot pass unseen
    job = run_job(n, [SCRIPT, "clean", "raise"], timeout=60, HPCDIST_TIMEOUT_SECONDS=str(deadline))
    assert job.returncode == 0, job.output
    assert "Abort" not in job.output and "hpcdist WARNING" not in job.output, job.output
    # The others finish 1 s after the leaver; the exit itself (interpreter teardown, MPI
    # finalize, the launcher) takes a few seconds on a loaded machine, never the deadline.
    assert job.ended_at - job.stamp(f"rank {n - 1} leaves") < 1.0 + 8.0, job.output


def test_without_a_deadline_the_stall_warning_names_the_rank_that_left():
    job = run_job(
        2,
        [SCRIPT, "early", "raise"],
        timeout=8,
        HPCDIST_STALL_WARNING_SECONDS="1",
    )
    assert job.returncode is None, (
        f"without a deadline the job waits (killed by the test):\n{job.output}"
    )
    assert re.search(
        r"allreduce #2 SUM float64\[4\] has waited \d+ s; ranks not yet arrived: 1; "
        r"rank 1 left the program",
        job.output,
    ), job.output
    assert "set HPCDIST_TIMEOUT_SECONDS=<seconds>" in job.output
    # The rank that left says whom it waits for at the end of the program.
    assert re.search(
        r"\[rank 1/2\] the end of the program has waited \d+ s; ranks not yet arrived: 0; "
        r"rank 0 last entered collective #2",
        job.output,
    ), job.output
