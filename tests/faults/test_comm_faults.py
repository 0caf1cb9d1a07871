"""Communication faults: a stopped rank, an unpicklable object, a sender dying mid-message.

Every job runs as a subprocess under a wall-clock bound (`tests.faults.scripts.comm_job`), so a
hang fails the test; whatever is left of a job (a stopped rank) is continued and killed.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest

from tests.faults.scripts.comm_job import alive, run_job
from tests.helpers import ROOT, clean_env, mpiexec

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


def test_a_sender_dying_halfway_through_its_message_does_not_block_the_receivers_poll(tmp_path):
    # Two one-process jobs joined on a port (as `hpcdist run --workers`): the start of a 256 MiB
    # message arrives, its sender is SIGKILLed; a blocking receive would wait for ever.
    script = "tests/faults/scripts/p2p_dying_sender.py"
    env = clean_env(UCX_RNDV_THRESH="inf")
    jobs = [
        subprocess.Popen(
            [mpiexec(), "-n", "1", sys.executable, script, role, str(tmp_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=ROOT,
        )
        for role in ("accept", "connect")
    ]
    try:
        out = jobs[0].communicate(timeout=60)[0]
        jobs[1].wait(timeout=30)
    finally:
        for job in jobs:
            job.kill()
            job.wait()
    assert jobs[0].returncode == 0, out
    assert "MATCHED" in out and "DONE" in out, out
    polled = re.search(r"POLLED none in 2 s, slowest poll (\S+) ms", out)
    assert polled, out  # not "COMPLETE": the message must have been cut short
    assert float(polled.group(1)) < 100, out
    assert jobs[1].returncode != 0  # the sender was killed
