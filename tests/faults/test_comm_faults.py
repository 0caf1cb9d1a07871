"""Communication faults: a stopped rank, an object that cannot be pickled.

Every job runs as a subprocess under a wall-clock bound (`tests.faults.scripts.comm_job`), so a
hang fails the test; whatever is left of a job (a stopped rank) is continued and killed.
"""

from __future__ import annotations

import re
import time

import pytest

from tests.faults.scripts.comm_job import alive, run_job

DEADLINE = 3.0


@pytest.mark.parametrize("impl", ["shm", "mpi"])
@pytest.mark.parametrize("n", [2, 4])
def test_a_stopped_rank_is_named_in_a_deadline_error_on_the_others(n, impl):
    job = run_job(
        n,
        ["tests/faults/scripts/comm_stop.py", impl],
        timeout=60,
        HPCDIST_TIMEOUT_SECONDS=str(DEADLINE),
    )
    stopped = n - 1
    print(f"n={n} {impl}: exit status {job.returncode} after {job.elapsed:.1f} s")
    assert job.returncode not in (0, None), job.output
    for rank in range(n - 1):
        assert f"rank {rank} DeadlineExceededError missing=[{stopped}]" in job.output, job.output
    assert f"rank(s) {stopped} never joined" in job.output
    assert job.elapsed < DEADLINE + 30, job.output
    # Nothing lingers: the stopped rank is gone once the test has continued and killed it.
    pid = int(re.search(rf"rank {stopped} pid (\d+)", job.output).group(1))
    end = time.monotonic() + 10
    while alive(pid) and time.monotonic() < end:
        time.sleep(0.1)
    assert not alive(pid), f"rank {stopped} (pid {pid}) is still there"


@pytest.mark.parametrize("deadline", [None, DEADLINE])
@pytest.mark.parametrize("n", [2, 4])
def test_an_object_that_cannot_be_pickled_raises_on_every_rank(n, deadline):
    env = {} if deadline is None else {"HPCDIST_TIMEOUT_SECONDS": str(deadline)}
    job = run_job(n, ["tests/faults/scripts/comm_objects.py"], timeout=60, **env)
    assert job.returncode == 0, job.output
    bad = n - 1
    for rank in range(n):
        for call in ("allgather_object", "broadcast_object"):
            line = re.search(rf"rank {rank} {call} (.*)", job.output)
            assert line, job.output
            if rank == bad:
                assert re.match(r"raised \w+: .*pickle", line.group(1)), job.output
            else:
                assert line.group(1).startswith(
                    f"raised CollectiveMismatchError: collective {call} #"
                ), job.output
                assert f"invalid arguments on rank(s) {bad}" in line.group(1), job.output
        assert f"rank {rank} usable" in job.output, job.output
    # Immediately: nobody waits for the deadline.
    assert job.elapsed < 30, job.output
