"""Creating a communicator is bounded: ranks that never join are named, and the job ends.

`hpcdist.comm.creation`: a rank that never calls `hd.comm.world()` (or never creates a
``p2p.Channel``, or a `Communicator` over a sub-communicator) makes every rank that did raise
`DeadlineExceededError` within the deadline, naming it; the job then ends (aborted at the exit
of the program, exit code 18, or 17 through the abort hook) instead of hanging in MPI. A rank
that is only late (past the one-second grace, within the deadline) changes nothing, and leaves
no message behind in ``COMM_WORLD``. Each job runs under a wall-clock bound
(`tests.faults.scripts.comm_job.run_job`).
"""

from __future__ import annotations

import re

import pytest

from hpcdist.exit_codes import ABORT_EXIT_CODE, EXIT_DEADLINE_CODE
from tests.faults.scripts.comm_job import run_job

DEADLINE = 4.0
#: From the call to the error on each rank: the deadline plus polls and messages.
SLACK = 2.0
#: From the first error to the end of the job (abort at exit, the launcher's teardown).
END_BOUND = 10.0
#: Launching and starting MPI on every rank (oversubscribed 2-core machines: a few seconds).
LAUNCH_ALLOWANCE = 25.0
SCRIPT = "tests/faults/scripts/comm_create.py"


def errors(output: str) -> dict[int, tuple[list[int], float, float, str]]:
    """Each rank's ``(missing ranks, seconds waited, time.time() of the error, message)``."""
    found = {}
    pattern = r"rank (\d+) DeadlineExceededError missing=\[([\d, ]*)\] after ([\d.]+) s at "
    # a message ends at its line's end, or where another rank's line begins (lines written
    # at once by several ranks may interleave)
    ends = r"(?=rank \d+ DeadlineExceededError|$)"
    for m in re.finditer(pattern + r"([\d.]+): (.*?)" + ends, output, re.M):
        missing = [int(r) for r in m.group(2).split(",") if r.strip()]
        found[int(m.group(1))] = (missing, float(m.group(3)), float(m.group(4)), m.group(5))
    return found


def check_named(job, joined: list[int], missing: list[int], n: int, code: int) -> None:
    """Every rank of ``joined`` raised in time naming ``missing``; the job ended with ``code``."""
    assert job.returncode is not None, f"the job hung:\n{job.output}"
    got = errors(job.output)
    assert sorted(got) == joined, job.output
    for rank in joined:
        named, waited, _, message = got[rank]
        assert named == missing, job.output
        assert DEADLINE <= waited < DEADLINE + SLACK, job.output
        assert f"rank(s) {','.join(map(str, missing))} never joined" in message, job.output
        assert f"within {DEADLINE:g} s" in message and f"on rank {rank} of {n}" in message
    first = min(stamp for _, _, stamp, _ in got.values())
    print(
        f"n={n} missing={missing}: exit status {job.returncode}, job {job.elapsed:.1f} s, "
        f"ended {job.ended_at - first:.1f} s after the first error; waited "
        + ", ".join(f"{got[r][1]:.2f} s" for r in joined)
    )
    assert job.returncode == code, job.output
    assert job.ended_at - first < END_BOUND, job.output
    assert job.elapsed < DEADLINE + END_BOUND + LAUNCH_ALLOWANCE, job.output


@pytest.mark.parametrize(
    ("n", "missing"),
    [(3, [2]), (3, [1, 2]), (4, [0, 2])],
    ids=["one-of-3", "two-of-3", "rank0-and-2-of-4"],
)
def test_ranks_that_never_create_the_world_are_named_on_every_other_rank(n, missing):
    job = run_job(
        n,
        [SCRIPT, "world", ",".join(map(str, missing)), "never", "catch"],
        timeout=DEADLINE + END_BOUND + LAUNCH_ALLOWANCE,
        HPCDIST_TIMEOUT_SECONDS=str(DEADLINE),
    )
    joined = [r for r in range(n) if r not in missing]
    # The ranks caught the error and called sys.exit(1): the exit aborts the job.
    check_named(job, joined, missing, n, EXIT_DEADLINE_CODE)
    assert "Aborting the job so that it does not hang" in job.output, job.output


@pytest.mark.parametrize("launcher", ["python", "python -m hpcdist"])
def test_an_uncaught_creation_deadline_ends_the_job(launcher):
    args = [SCRIPT, "world", "2", "never", "raise"]
    if launcher != "python":
        args = ["-m", "hpcdist", *args]
    job = run_job(
        3,
        args,
        timeout=DEADLINE + END_BOUND + LAUNCH_ALLOWANCE,
        HPCDIST_TIMEOUT_SECONDS=str(DEADLINE),
    )
    # ``python -m hpcdist`` has the abort hook from the start (17); plain python ends at exit.
    code = ABORT_EXIT_CODE if launcher != "python" else EXIT_DEADLINE_CODE
    check_named(job, [0, 1], [2], 3, code)


@pytest.mark.parametrize(
    ("what", "missing", "said"),
    [
        ("channel", 1, "creating a point-to-point channel did not complete"),
        # every rank creates the channel; rank 2 then never allocates the window over it
        ("window", 2, "allocating an RMA window did not complete"),
    ],
)
def test_a_rank_that_never_creates_a_channel_or_a_window_is_named(what, missing, said):
    job = run_job(
        3,
        [SCRIPT, what, str(missing), "never", "catch"],
        timeout=DEADLINE + END_BOUND + LAUNCH_ALLOWANCE,
        HPCDIST_TIMEOUT_SECONDS=str(DEADLINE),
    )
    joined = [r for r in range(3) if r != missing]
    check_named(job, joined, [missing], 3, EXIT_DEADLINE_CODE)
    assert said in job.output, job.output


def test_a_sub_communicator_names_the_missing_rank_by_both_of_its_ranks():
    # COMM_WORLD.Split(rank % 2): world ranks 1 and 3 are ranks 0 and 1 of the odd half.
    job = run_job(
        4,
        [SCRIPT, "sub", "3", "never", "catch"],
        timeout=DEADLINE + END_BOUND + LAUNCH_ALLOWANCE,
        HPCDIST_TIMEOUT_SECONDS=str(DEADLINE),
    )
    assert job.returncode is not None, f"the job hung:\n{job.output}"
    got = errors(job.output)
    assert sorted(got) == [1], job.output
    named, waited, _, message = got[1]
    assert named == [1], job.output
    assert DEADLINE <= waited < DEADLINE + SLACK, job.output
    assert "rank(s) 1 never joined (world ranks 3)" in message, job.output
    assert "on rank 0 of 2" in message, job.output
    assert job.returncode == EXIT_DEADLINE_CODE, job.output
    for rank in (0, 2):  # the even half is complete
        assert f"rank {rank} created the sub communicator" in job.output, job.output


@pytest.mark.parametrize("what", ["world", "channel", "window"])
@pytest.mark.parametrize("n", [2, 3])
def test_a_late_rank_within_the_deadline_changes_nothing(n, what):
    # 2.5 s late: past the grace (1 s), so every other rank announces itself; the clean-up
    # must leave no announcement in COMM_WORLD's queue.
    late = n - 1
    job = run_job(
        n,
        [SCRIPT, what, str(late), "late:2.5", "raise"],
        timeout=60,
        HPCDIST_TIMEOUT_SECONDS="20",
    )
    assert job.returncode == 0, job.output
    assert "DeadlineExceededError" not in job.output, job.output
    for rank in range(n):
        assert f"rank {rank} sum {n} leftover False" in job.output, job.output
    waited = re.search(rf"rank 0 created the {what} communicator in ([\d.]+) s", job.output)
    assert waited and 2.0 < float(waited.group(1)) < 20.0, job.output
