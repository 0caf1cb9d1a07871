"""A signal to ``hpcdist run`` ends the whole job: no process left, exit 128 + signal, no traceback.

Each test starts ``hpcdist run -n 2`` on a script that trains until it is stopped, waits until
both ranks are training, signals the launcher (as ``timeout``, Ctrl-C or a closed terminal
would), and counts the processes left whose environment carries the job's unique marker
(mpiexec, hydra's proxy and both ranks inherit it). Every step is bounded by a timeout.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.helpers import ROOT, clean_env

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="counts processes in /proc")

SCRIPT = "tests/integration/scripts/train_until_signalled.py"
MARKER = "SIGNAL_TEST_JOB"
START_TIMEOUT_S = 180
END_TIMEOUT_S = 120


def job_processes(marker: str) -> list[int]:
    """Pids of the live processes whose environment holds ``MARKER=marker``."""
    needle = f"{MARKER}={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue  # gone, or not ours
        if needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


class Job:
    """``hpcdist run ARGS -n 2 SCRIPT READY_DIR MODE``, started and cleaned up by the test."""

    def __init__(self, tmp_path: Path, *run_args: str, mode: str = "train") -> None:
        self.marker = uuid.uuid4().hex
        self.ready = tmp_path
        self.launcher = subprocess.Popen(
            [sys.executable, "-m", "hpcdist", "run", "-n", "2", *run_args, SCRIPT, str(tmp_path),
             mode],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=clean_env(**{MARKER: self.marker}),
            cwd=ROOT,
        )  # fmt: skip

    def wait_until_training(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not all((self.ready / f"ready.{rank}").exists() for rank in (0, 1)):
            if self.launcher.poll() is not None:
                out, err = self.launcher.communicate()
                pytest.fail(
                    f"the job ended before training: {self.launcher.returncode}\n{out}{err}"
                )
            if time.monotonic() > deadline:
                pytest.fail(f"the ranks did not start training within {START_TIMEOUT_S} s")
            time.sleep(0.1)

    def stop(self, sig: signal.Signals) -> tuple[int, str, str]:
        self.launcher.send_signal(sig)
        out, err = self.launcher.communicate(timeout=END_TIMEOUT_S)
        return self.launcher.returncode, out, err

    def cleanup(self) -> None:
        if self.launcher.poll() is None:
            self.launcher.kill()
            self.launcher.communicate(timeout=30)
        for pid in job_processes(self.marker):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def start(tmp_path):
    jobs: list[Job] = []

    def _start(*run_args: str, mode: str = "train") -> Job:
        job = Job(tmp_path, *run_args, mode=mode)
        jobs.append(job)
        job.wait_until_training()
        assert len(job_processes(job.marker)) >= 4  # launcher, mpiexec, proxy, two ranks
        return job

    yield _start
    for job in jobs:
        job.cleanup()


@pytest.mark.parametrize(
    "sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name
)
def test_a_signal_to_the_launcher_ends_the_whole_job(start, sig):
    job = start()
    code, out, err = job.stop(sig)
    assert job_processes(job.marker) == [], f"processes of the job left after {sig.name}"
    assert code == 128 + sig, out + err
    assert "Traceback" not in err, err
    if sig == signal.SIGINT:
        assert "interrupted (SIGINT); ending the job" in err, err


def test_a_job_that_ignores_the_signal_is_killed_after_the_deadline(start):
    job = start("--kill-after", "2", mode="stubborn")
    started = time.monotonic()
    code, out, err = job.stop(signal.SIGTERM)
    assert job_processes(job.marker) == []
    assert code == 128 + signal.SIGTERM, out + err
    assert "SIGTERM did not end the job; killing it (SIGKILL, 2 s after the first)" in err, err
    assert "Traceback" not in err, err
    assert time.monotonic() - started < 60


def test_a_signal_ends_the_restart_loop_without_a_restart(start):
    job = start("--max-restarts", "2")
    code, out, err = job.stop(signal.SIGTERM)
    assert job_processes(job.marker) == []
    assert code == 128 + signal.SIGTERM, out + err
    assert "stopped by SIGTERM" in err and "not restarting the job" in err, err
    assert "restart 1 of 2" not in err, err
    assert "Traceback" not in err, err
