"""Launch an MPI job for the communication fault tests, and leave nothing behind.

Not a job script itself: the tests in ``tests/faults`` import `run_job`. The job runs in a
session of its own under a wall-clock bound; whatever is left of it when it ends or times out
(a rank stopped with SIGSTOP, a launcher waiting for it) is continued and killed, and the ranks
that printed ``pid N`` are killed too.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from tests.helpers import ROOT, clean_env, mpiexec


@dataclass
class Job:
    """How a job ended."""

    returncode: int | None  # None: it did not end within the bound and was killed
    output: str  # stdout and stderr, interleaved
    elapsed: float  # seconds from launch to end
    ended_at: float  # ``time.time()`` when it ended

    def stamp(self, name: str) -> float:
        """The ``time.time()`` a rank printed as ``NAME at T``."""
        found = re.search(rf"{name} at (\d+\.\d+)", self.output)
        assert found, f"no '{name} at' line in:\n{self.output}"
        return float(found.group(1))


def _signal_all(pgid: int, pids: list[int], sig: int) -> None:
    for target in [-pgid, *pids]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(target, sig)


def run_job(n: int, args: list[str], timeout: float, **env: str) -> Job:
    """Run ``mpiexec -n N python ARGS`` with ``HPCDIST_*`` settings ``env``; kill leftovers."""
    start = time.monotonic()
    proc = subprocess.Popen(
        [mpiexec(), "-n", str(n), sys.executable, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env=clean_env(**env),
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=timeout)
        returncode: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        _signal_all(proc.pid, [], signal.SIGCONT)
        _signal_all(proc.pid, [], signal.SIGKILL)
        output, _ = proc.communicate()
        returncode = None
    end = time.monotonic()
    ended_at = time.time()
    pids = [int(p) for p in re.findall(r"\bpid (\d+)", output)]
    _signal_all(proc.pid, pids, signal.SIGCONT)
    _signal_all(proc.pid, pids, signal.SIGKILL)
    return Job(returncode, output, end - start, ended_at)


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
