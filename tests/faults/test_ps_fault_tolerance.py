"""Parameter-server training that survives worker deaths: ``hpcdist run --ps P --workers W``.

The cases (``scripts/ps_ft_cases.py``) port TF's fault_tolerance_test and run in one launch per
layout, 1 ps + 1 worker and 2 ps + 2 workers: a worker is SIGKILLed from the coordinator and the
launcher restarts it. Each launch runs under a wall-clock ``timeout=``; afterwards no process
of it may be left (they are found by the launch's unique output directory on their command
line). Strangers on the admission socket (a wrong token, garbage, a pickle) change nothing.
Also: a dead ps (``UnavailableError`` naming it; the whole launch restarted from a checkpoint
with ``--max-restarts``), a hung worker killed and restarted at its deadline, ``Model.fit``
through a worker kill, and a worker dying between its admission and its MPI ``Connect``.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from hpcdist.cluster.launched import PSLaunch, read_launch, write_launch
from hpcdist.errors import ClusterConfigError, UnavailableError
from hpcdist.strategies.ps.admission import AdmissionServer, request_admission
from hpcdist.strategies.ps.ps_failure import PS_FAILURE_EXIT_CODE
from tests.helpers import ROOT, clean_env

CASES = "tests/faults/scripts/ps_ft_cases.py"
MODES = "tests/faults/scripts/ps_ft_modes.py"
FIT = "tests/faults/scripts/ps_ft_fit.py"
THREADS = "tests/faults/scripts/ps_ft_threads.py"
HPCDIST = [sys.executable, "-m", "hpcdist"]
CHECKS = [
    "between_functions_2",
    "between_functions_4",
    "midst_function",
    "numpy_fetched_after_death",
    "dataset_rebuilt",
    "usable_after_restart",
    "all_workers_back",
    "every_worker_preempted",
    "continuous_failure",
    "cancellation_join_raises",
    "cancellation_long_cancelled",
    "cancellation_then_ok",
    "worker_preemption_error_type",
    "update_not_torn",
    "idle_coordinator_takes_changes_in",
    "stranger_gets_only_the_challenge",
    "stranger_rejected",
    "stranger_not_unpickled",
    "stranger_changes_nothing",
]


def _leftovers(marker: str) -> list[str]:
    """Command lines of live processes that mention ``marker`` (none may outlive a launch)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker in cmdline and state != "Z":
            found.append(f"{entry.name}: {cmdline}")
    return found


def _settle(marker: str, seconds: float = 10.0) -> list[str]:
    deadline = time.monotonic() + seconds
    while (left := _leftovers(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def _launch(args: list[str], timeout: float, **env: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            [*HPCDIST, "run", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=ROOT,
            env=clean_env(**env),
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        what = f"hpcdist run {' '.join(args)}"
        pytest.fail(f"{what} hung past {timeout} s:\n{out[-2000:]}{err[-2000:]}")


@pytest.fixture(scope="module", params=[(1, 1), (2, 2)], ids=["1ps-1worker", "2ps-2workers"])
def launch(request, tmp_path_factory):
    num_ps, num_workers = request.param
    out = tmp_path_factory.mktemp(f"ft-{num_ps}-{num_workers}")
    args = ["--ps", str(num_ps), "--workers", str(num_workers), "--worker-restarts", "12"]
    result = _launch([*args, CASES, str(out)], timeout=240)
    left = _settle(str(out))
    checks = dict(re.findall(r"^CHECK (\w+) (PASS|FAIL.*)$", result.stdout, re.M))
    return result, checks, left


def test_launch_ends_with_the_coordinators_code_and_leaves_nothing(launch):
    result, _, left = launch
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "DONE" in result.stdout
    assert not left, left


@pytest.mark.parametrize("name", CHECKS)
def test_case(launch, name):
    result, checks, _ = launch
    if (checks.get(name) or "").startswith("FAIL SKIP"):
        pytest.skip(checks[name][len("FAIL SKIP ") :])
    assert checks.get(name) == "PASS", f"{name}: {checks.get(name)}\n{result.stdout[-3000:]}"


def test_a_dead_worker_is_named_as_a_worker_not_a_ps(launch):
    # testWorkerPreemptionErrorType: the coordinator's message names the worker.
    result, _, _ = launch
    assert re.search(r"worker \d+ \(rank \d+\) died; its functions run again", result.stderr)
    assert "of the server job) died" not in result.stderr
    assert "of the server job died" not in result.stderr


def test_death_is_noticed_within_a_second(launch):
    result, _, _ = launch
    notices = [float(x) for x in re.findall(r"^MEASURE death_notice (\S+)$", result.stdout, re.M)]
    assert notices, result.stdout[-2000:]
    assert max(notices) < 1.0, notices


def test_training_goes_on_with_the_other_workers_when_no_restart_is_left(tmp_path):
    args = ["--ps", "1", "--workers", "2", MODES, "one_left", str(tmp_path)]
    result = _launch(args, timeout=120)
    left = _settle(str(tmp_path))
    assert "CHECK one_left PASS" in result.stdout, result.stdout[-2000:] + result.stderr[-3000:]
    assert "no restart left" in result.stderr
    assert result.returncode == 0, result.stderr[-3000:]
    assert not left, left


def test_a_hung_worker_is_killed_and_restarted_at_the_deadline(tmp_path):
    args = ["--ps", "1", "--workers", "2", "--worker-restarts", "1", MODES, "hung", str(tmp_path)]
    result = _launch(args, timeout=120, HPCDIST_TIMEOUT_SECONDS="8")
    out = result.stdout + result.stderr
    assert "CHECK hung PASS" in result.stdout, out[-3000:]
    assert "worker 0 is hung past its deadline; killing it" in result.stderr, out[-3000:]
    assert "restarting it (1 of 1)" in result.stderr
    assert result.returncode == 0, out[-3000:]
    assert not _settle(str(tmp_path))


def test_a_stopped_ps_fails_the_next_admission_at_the_deadline_and_the_launch_ends(tmp_path):
    # The ps is SIGSTOPped (its socket stays open), then a worker is killed: the server job's
    # Accept of the replacement needs every ps, so the coordinator waits for it at most the
    # deadline, then treats it as failed (UnavailableError naming it, as for a dead ps).
    deadline = 8.0
    args = ["--ps", "1", "--workers", "2", "--worker-restarts", "1", MODES, "stop_ps"]
    result = _launch([*args, str(tmp_path)], timeout=120, HPCDIST_TIMEOUT_SECONDS=str(deadline))
    out = result.stdout + result.stderr
    assert "CHECK stop_ps PASS" in result.stdout, out[-3000:]
    raised = re.search(r"^RAISED_AFTER (\S+)$", result.stdout, re.M)
    # the worker's death, its restart (a new process) and the admission's deadline
    assert raised and deadline <= float(raised.group(1)) < deadline + 30, out[-3000:]
    assert result.returncode != 0
    said = r"^hpcdist run: ps 0 \(rank 1\) of the server job did not answer within the deadline"
    assert re.search(said, result.stderr, re.M), out[-3000:]
    assert not _settle(str(tmp_path))


def test_a_server_rank_below_thread_multiple_is_an_error_on_every_server_rank(tmp_path):
    # the coordinator's and the ps's threads call MPI: an error on both (a worker job may run
    # below it, without its batch watchdog)
    args = ["--ps", "1", "--workers", "1", THREADS, str(tmp_path)]
    result = _launch(args, timeout=120, MPI4PY_RC_THREAD_LEVEL="serialized")
    out = result.stdout + result.stderr
    raised = dict(re.findall(r"^RAISED (\d) (.*)$", result.stdout, re.M))
    assert sorted(raised) == ["0", "1"], out[-3000:]
    for rank, message in raised.items():
        assert message.startswith(f"rank {rank}: ParameterServerStrategy expected MPI_THREAD")
        assert "lower thread level (MPI.Query_thread()) on rank(s) [0, 1]" in message, message
    assert result.returncode == 3, out[-3000:]
    assert not _settle(str(tmp_path))


def test_fit_survives_a_worker_kill_and_every_epoch_completes(tmp_path):
    args = ["--ps", "2", "--workers", "2", "--worker-restarts", "1", FIT, str(tmp_path)]
    result = _launch(args, timeout=180)
    out = result.stdout + result.stderr
    for name in ("fit_worker_died", "fit_every_epoch", "fit_every_step", "fit_losses"):
        assert f"CHECK {name} PASS" in result.stdout, out[-3000:]
    reran = int(re.search(r"^MEASURE fit_steps_reran (-?\d+)$", result.stdout, re.M).group(1))
    assert reran >= 0  # at-least-once: none lost
    assert result.returncode == 0, out[-3000:]
    assert not _settle(str(tmp_path))


def test_a_worker_dying_between_admission_and_connect_does_not_hang_the_accept(tmp_path):
    # Worker 0's first start exits after its "C" byte, before its MPI Connect (the test hook
    # HD_TEST_PS_DIE_BEFORE_CONNECT): the server job's Accept is released, the launcher
    # restarts the worker, and training runs on both workers.
    args = ["--ps", "1", "--workers", "2", "--worker-restarts", "1", MODES, "one_ok"]
    result = _launch([*args, str(tmp_path)], timeout=120, HD_TEST_PS_DIE_BEFORE_CONNECT="0")
    out = result.stdout + result.stderr
    assert "the server job's Accept was released" in result.stderr, out[-3000:]
    assert "CHECK one_ok PASS" in result.stdout, out[-3000:]
    assert result.returncode == 0, out[-3000:]
    assert not _settle(str(tmp_path))


def test_a_signal_to_the_launcher_ends_every_job(tmp_path):
    job = subprocess.Popen(
        [*HPCDIST, "run", "--ps", "1", "--workers", "2", MODES, "wait", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=clean_env(),
    )
    try:
        assert job.stdout is not None
        line = job.stdout.readline()
        while line and "READY" not in line:
            line = job.stdout.readline()
        assert "READY" in line
        job.send_signal(signal.SIGTERM)
        code = job.wait(timeout=60)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    assert code == 128 + signal.SIGTERM
    assert not _settle(str(tmp_path))


def test_a_program_blocked_after_a_ps_died_is_aborted_at_the_ps_failure_deadline(tmp_path):
    # The coordinator's program never calls schedule/join/done after the ps died: the abort
    # timer, armed by the admission thread the moment the ps's socket ended, aborts the server
    # job PS_FAILURE_ABORT_SECONDS (30 s) later with the message naming the ps.
    args = ["--ps", "2", "--workers", "2", MODES, "kill_ps_block", str(tmp_path)]
    t0 = time.monotonic()
    result = _launch(args, timeout=120)
    elapsed = time.monotonic() - t0
    out = result.stdout + result.stderr
    assert "KILLING" in result.stdout and "SURVIVED" not in result.stdout, out[-3000:]
    assert result.returncode != 0
    named = re.search(r"^hpcdist run: (.*) of the server job died", result.stderr, re.M)
    assert named is not None and "ps 1 (rank 2)" in named.group(1), out[-3000:]
    assert not _settle(str(tmp_path))
    # the coordinator lived on (its rank guard: hpcdist.cli.rank_guard) until the timer
    assert "did not end within 30 s; aborting the server job" in result.stderr, out[-3000:]
    assert "ps 1 (rank 2 of the server job) died" in result.stderr, out[-3000:]
    assert 30 <= elapsed < 60, elapsed


@pytest.mark.parametrize("mode", ["kill_ps", "kill_ps_schedule"])
def test_a_dead_ps_raises_unavailable_naming_it_and_the_launch_ends(tmp_path, mode):
    # testPSPreemptionErrorType, testJoinRaisesUnavailableErrorAtPsFailure and
    # testScheduleRaisesUnavailableErrorAtPsFailure at 2 ps + 2 workers: ps 1 is SIGKILLed.
    args = ["--ps", "2", "--workers", "2", MODES, mode, str(tmp_path)]
    result = _launch(args, timeout=120)
    out = result.stdout + result.stderr
    assert "KILLING" in result.stdout, out[-3000:]
    assert result.returncode != 0
    # The launcher names the dead ps, whether or not MPI let the coordinator live on.
    # (From the coordinator's note when it saw the ps's socket end; else from the ranks the
    # launcher found dead first, which may include ps 0 when hydra ended it too.)
    named = re.search(r"^hpcdist run: (.*) of the server job died", result.stderr, re.M)
    assert named is not None and "ps 1 (rank 2)" in named.group(1), out[-3000:]
    assert not _settle(str(tmp_path))
    seen = re.search(r"^RAISED_AFTER (\S+) NAMED (\S+)$", result.stdout, re.M)
    # The coordinator lives on to raise: hydra's proxy kills the whole job when it reaps a
    # rank that a signal ended, and the ps's guard (hpcdist.cli.rank_guard) exits normally.
    assert seen is not None, out[-3000:]
    assert seen.group(2) == "True", out[-3000:]  # the UnavailableError names ps 1
    assert float(seen.group(1)) < 2.0  # no deadline set: within 2 s
    # The coordinator's own check lines: join, done and schedule raise the error again.
    # The verdict is read as a word, not up to the line's end: hydra's "YOUR APPLICATION
    # TERMINATED ..." can land between the line and its newline ("CHECK kill_ps PASSYOUR ...").
    check = re.search(rf"^CHECK {mode} (PASS|FAIL.*)", result.stdout, re.M)
    assert check is not None and check.group(1) == "PASS", out[-3000:]
    again = re.search(rf"^CHECK {mode}_again (PASS|FAIL.*)", result.stdout, re.M)
    assert again is not None and again.group(1) == "PASS", out[-3000:]
    # the coordinator's abort (MPI cannot end the job in order)
    assert result.returncode == PS_FAILURE_EXIT_CODE


def test_a_dead_ps_restarts_the_whole_launch_from_its_checkpoint(tmp_path):
    args = ["--ps", "2", "--workers", "2", "--max-restarts", "1", MODES, "ps_restart"]
    result = _launch([*args, str(tmp_path)], timeout=180)
    out = result.stdout + result.stderr
    assert "restarting the whole launch (1 of 1)" in result.stderr, out[-3000:]
    assert "CHECK ps_restart PASS" in result.stdout, out[-3000:]
    assert result.returncode == 0, out[-3000:]
    assert not _settle(str(tmp_path))


def test_single_job_mode_still_ends_at_a_worker_death_and_says_how_to_survive(tmp_path):
    result = _launch(["-n", "3", MODES, "single", str(tmp_path)], timeout=120, HPCDIST_NUM_PS="1")
    assert "KILLING" in result.stdout
    assert "SURVIVED" not in result.stdout
    assert result.returncode != 0
    assert "--workers" in result.stderr, result.stderr[-2000:]
    assert not _settle(str(tmp_path))


# -- the admission socket and the launch file, in this process --------------------------------


def test_launch_file_readable_by_others_is_refused(tmp_path):
    path = tmp_path / "launch.json"
    launch = PSLaunch("worker", 0, 1, 1, "00" * 32, str(tmp_path / "address"))
    write_launch(path, launch)
    assert (path.stat().st_mode & 0o777) == 0o600
    assert read_launch(path) == launch
    path.chmod(0o644)
    with pytest.raises(ClusterConfigError, match="0600"):
        read_launch(path)


def _join(server: AdmissionServer, timeout: float = 10.0):
    event = server.wait_event(timeout)
    assert event is not None and event[0] == "join", event
    return event


def test_admission_binds_to_loopback_and_admits_only_the_secret(tmp_path):
    secret = os.urandom(32)
    address = str(tmp_path / "address")
    server = AdmissionServer(secret, "127.0.0.1", 2, address)
    try:
        assert server.address[0] == "127.0.0.1"
        assert (Path(address).stat().st_mode & 0o777) == 0o600
        with pytest.raises(UnavailableError):  # the wrong secret: closed, no event
            request_admission(address, os.urandom(32), 0, timeout=5)
        with pytest.raises(UnavailableError):  # an index out of range
            request_admission(address, secret, 2, timeout=5)
        assert server.wait_event(0.2) is None
        got: dict[str, object] = {}

        def admit() -> None:
            got["sock"], got["port"] = request_admission(address, secret, 1)

        worker = threading.Thread(target=admit)
        worker.start()
        _, index, admitted = _join(server)
        assert index == 1 and admitted is not None and admitted.alive()
        with pytest.raises(UnavailableError):  # the same index while it is in the job
            request_admission(address, secret, 1, timeout=5)
        assert admitted.go(secret, "tag#0$description#port-name")
        worker.join(10)
        assert got["port"] == "tag#0$description#port-name"
        server.watch(admitted)
        start = time.monotonic()
        got["sock"].close()  # the worker's process ends
        event = server.wait_event(5)
        assert event is not None and event[:2] == ("dead", 1)
        assert time.monotonic() - start < 1.0
        assert server.rejected == 3
    finally:
        server.close()
