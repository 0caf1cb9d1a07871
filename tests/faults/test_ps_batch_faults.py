"""Parameter-server batches and liveness: a function that hangs in the middle of a batch.

The job runs under ``mpiexec -n 4`` (coordinator, one ps, two workers) with a deadline of 2 s
and a stall warning at 0.5 s, in a subprocess with a ``timeout=``.
"""

from __future__ import annotations

import re
import subprocess
import time

import pytest

from tests.helpers import clean_env, run_mpi

ENV = {
    "HPCDIST_NUM_PS": "1",
    "HPCDIST_TIMEOUT_SECONDS": "2",
    "HPCDIST_STALL_WARNING_SECONDS": "0.5",
}
SCRIPT = "tests/faults/scripts/ps_batch_deadline.py"


def test_hang_mid_batch_fails_only_that_function_and_runs_the_rest_once():
    start = time.monotonic()
    try:
        result = run_mpi(4, [SCRIPT], timeout=60, env=clean_env(**ENV))
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{SCRIPT} hung past 60 s:\n{exc.stdout}")
    elapsed = time.monotonic() - start
    checks = dict(re.findall(r"^CHECK (\w+) (PASS|FAIL.*)$", result.stdout, re.M))
    report = result.stdout[-2000:] + result.stderr[-3000:]
    for name in [
        "join_raises_deadline",
        "deadline_on_time",
        "only_the_stuck_call_failed",
        "others_ran",
        "stuck_worker_not_used_again",
        "each_call_ran_once",
    ]:
        assert checks.get(name) == "PASS", f"{name}: {checks.get(name)}\n{report}"
    assert "FAIL" not in result.stdout, report
    assert "END OF PROGRAM" in result.stdout
    assert result.returncode == 0, report
    warned = re.search(
        r"WARNING .*scheduled function item has been running for (\d+\.\d) s on worker [01]",
        result.stderr,
    )
    assert warned, report
    assert 0.5 <= float(warned[1]) < 2.0, warned[0]  # after 0.5 s, before the 2 s deadline
    assert re.search(
        r"worker [01] \(rank [23]\) returned from item after its deadline", result.stderr
    )
    assert elapsed < 30, f"the job took {elapsed:.1f} s"
