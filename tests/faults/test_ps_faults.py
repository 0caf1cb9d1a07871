"""Parameter-server liveness: a worker that sleeps past the deadline, or is stopped (SIGSTOP).

Each job runs under ``mpiexec -n 4`` (coordinator, one ps, two workers) with a deadline of 2 s
and a stall warning at 0.5 s, in a subprocess with a ``timeout=``. A stopped worker is always
continued or killed afterwards, so nothing lingers.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time

import pytest

from tests.helpers import clean_env, run_mpi

ENV = {
    "HPCDIST_NUM_PS": "1",
    "HPCDIST_TIMEOUT_SECONDS": "2",
    "HPCDIST_STALL_WARNING_SECONDS": "0.5",
}


def _checks(stdout: str) -> dict[str, str]:
    return dict(re.findall(r"^CHECK (\w+) (PASS|FAIL.*)$", stdout, re.M))


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def _reap(stdout: str) -> list[int]:
    """Continue and kill the job's workers that are still there; the pids that lingered."""
    found = re.search(r"^PIDS (.*)$", stdout or "", re.M)
    lingered = []
    for pid in json.loads(found.group(1)).values() if found else ():
        if _alive(pid):
            lingered.append(pid)
            os.kill(pid, signal.SIGCONT)
            os.kill(pid, signal.SIGKILL)
    return lingered


def _run(script: str, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    try:
        result = run_mpi(4, [script, *args], timeout=timeout, env=clean_env(**ENV))
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        _reap(out)
        pytest.fail(f"{script} hung past {timeout} s:\n{out[-2000:]}")
    return result


def _assert_checks(result: subprocess.CompletedProcess, names: list[str]) -> None:
    checks = _checks(result.stdout)
    report = result.stdout[-2000:] + result.stderr[-3000:]
    for name in names:
        assert checks.get(name) == "PASS", f"{name}: {checks.get(name)}\n{report}"


def test_function_past_deadline_fails_and_the_worker_is_dropped():
    start = time.monotonic()
    result = _run("tests/faults/scripts/ps_deadline.py")
    elapsed = time.monotonic() - start
    _assert_checks(
        result,
        [
            "join_raises_deadline",
            "deadline_on_time",
            "remote_value_raises_deadline",
            "new_segment_refused_while_stuck",
            "others_ran_on_the_live_worker",
            "error_raised_once",
            "stuck_worker_not_used_again",
            "all_updates_counted",
        ],
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert elapsed < 30, f"the job took {elapsed:.1f} s"


def test_stall_warning_names_the_worker_and_the_function():
    result = _run("tests/faults/scripts/ps_deadline.py")
    warned = re.search(
        r"WARNING .*scheduled function slow has been running for (\d+\.\d) s on worker [01] "
        r"\(rank [23]\); it fails at the deadline of 2 s",
        result.stderr,
    )
    assert warned, result.stderr[-3000:]
    # warned at the first check after 0.5 s (later if the coordinator was off the CPU)
    assert 0.5 <= float(warned[1]) < 2.0, warned[0]
    assert re.search(
        r"worker [01] \(rank [23]\) returned from slow after its deadline", result.stderr
    )


def test_stopped_worker_fails_its_function_and_the_job_ends_after_sigcont():
    result = _run("tests/faults/scripts/ps_sigstop.py", "continue")
    lingered = _reap(result.stdout)
    _assert_checks(
        result,
        [
            "join_raises_deadline",
            "ran_on_the_live_worker",
            "one_function_failed",
            "stopped_worker_not_used_again",
        ],
    )
    assert "FAIL" not in result.stdout, result.stdout
    assert result.returncode == 0, result.stderr[-3000:]
    assert not lingered, f"worker processes {lingered} outlived the job"


def test_worker_stopped_at_exit_aborts_the_job_instead_of_hanging():
    start = time.monotonic()
    result = _run("tests/faults/scripts/ps_sigstop.py", "abandon")
    elapsed = time.monotonic() - start
    time.sleep(0.5)
    lingered = _reap(result.stdout)
    _assert_checks(result, ["join_raises_deadline", "stopped_worker_not_used_again"])
    assert "END OF PROGRAM" in result.stdout
    assert result.returncode != 0
    assert re.search(r"worker 0 \(rank 2\) is still in rank, past the deadline", result.stderr), (
        result.stderr[-3000:]
    )
    assert elapsed < 30, f"the job took {elapsed:.1f} s"
    assert not lingered, f"worker processes {lingered} outlived the aborted job"
