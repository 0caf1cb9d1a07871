"""The server job's rank guard: the rank's exit code, a signal's death as a normal exit."""

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from hpcdist.cli.launch import launcher_command
from hpcdist.cli.ps_launch import RANK_GUARD

GUARD = [sys.executable, str(RANK_GUARD)]


def guarded(code: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([*GUARD, sys.executable, "-c", code], **kwargs)


@pytest.mark.parametrize("code", [0, 3, 17])
def test_the_guard_exits_with_the_rank_s_code(code):
    assert guarded(f"import sys; sys.exit({code})").wait(timeout=30) == code


def test_a_rank_killed_by_a_signal_is_a_normal_exit_of_128_plus_the_signal():
    job = guarded(
        "import os, time; print(os.getpid(), flush=True); time.sleep(60)",
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        rank = int(job.stdout.readline())
        assert rank != job.pid  # the rank is the guard's child
        os.kill(rank, signal.SIGKILL)
        # hydra reaps the guard: it exited, no signal ended it (WIFSIGNALED false)
        _, status = os.waitpid(job.pid, 0)
    finally:
        if job.poll() is None:
            job.kill()
    assert os.WIFEXITED(status) and not os.WIFSIGNALED(status)
    assert os.WEXITSTATUS(status) == 128 + signal.SIGKILL


@pytest.mark.parametrize("sig", [signal.SIGUSR1, signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_process_group_reaches_the_rank_and_the_guard_outlives_it(sig):
    # hydra and `hpcdist run` signal a rank's process group (killpg): the guard and its rank.
    # The rank here ignores SIGUSR1 (as the server ranks do) and dies of the others.
    code = (
        "import os, signal, sys, time\n"
        "signal.signal(signal.SIGUSR1, signal.SIG_IGN)\n"
        "print('ready', flush=True)\n"
        "time.sleep(2 if sys.argv[1] == 'USR1' else 60)\n"
    )
    job = subprocess.Popen(
        [*GUARD, sys.executable, "-c", code, sig.name[3:]],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert job.stdout.readline().strip() == "ready"
        time.sleep(0.1)
        os.killpg(job.pid, sig)
        got = job.wait(timeout=30)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    assert got == (0 if sig == signal.SIGUSR1 else 128 + sig)


def test_the_rank_keeps_the_guard_s_descriptors():
    # hydra hands each rank its PMI socket as an inherited descriptor (PMI_FD)
    read, write = os.pipe()
    try:
        code = f"import os; os.write({write}, b'pmi')"
        assert guarded(code, pass_fds=(write,)).wait(timeout=30) == 0
        assert os.read(read, 3) == b"pmi"
    finally:
        os.close(read)
        os.close(write)


def test_no_command_is_an_error_naming_what_was_expected():
    result = subprocess.run(GUARD, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert "expected a command" in result.stderr


def test_mpiexec_runs_each_rank_under_the_guard_and_srun_does_not():
    guard = [sys.executable, str(RANK_GUARD)]
    cmd = launcher_command(3, ["train.py"], {}, mpiexec_options=["-x"], guard=guard)
    assert cmd[0].endswith("mpiexec") and cmd[1:4] == ["-x", "-n", "3"]
    assert cmd[4:6] == guard and cmd[-3:] == ["-m", "hpcdist", "train.py"]
    cmd = launcher_command(3, ["train.py"], {"SLURM_JOB_ID": "7"}, guard=guard)
    if shutil.which("srun") is None:  # a job id without Slurm installed: still mpiexec
        assert cmd[0].endswith("mpiexec") and cmd[3:5] == guard
    else:
        assert cmd[0] == "srun" and str(RANK_GUARD) not in cmd


def test_the_guard_outlives_sigusr1_through_its_own_exit():
    # hydra signals SIGUSR1 when a rank closes its PMI socket, which may be while the guard
    # itself is ending (after its rank exited): the guard must still exit, not die of it.
    job = guarded(
        "import time; print('ready', flush=True); time.sleep(0.3)", stdout=subprocess.PIPE
    )
    assert job.stdout.readline() == b"ready\n"  # the guard runs its handlers by now
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(job.pid, signal.SIGUSR1)
        except ProcessLookupError:
            break
        pid, status = os.waitpid(job.pid, os.WNOHANG)
        if pid:
            break
        time.sleep(1e-4)
    else:
        job.kill()
        pytest.fail("the guard did not end")
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
