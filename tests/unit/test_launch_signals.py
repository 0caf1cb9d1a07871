"""`hpcdist.cli.launch`: how a stop signal reaches the job's launcher process.

A stand-in for srun (no Slurm here) records the signals it receives and, like srun, ends only
on a second SIGINT within one second; the launcher's own process is signalled by a timer, as a
user's Ctrl-C would. The full jobs (mpiexec, ranks, processes left) are tested in
tests/integration/test_launcher_signals.py.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from hpcdist.cli.launch import JobSignals, run_job

STAND_IN = """#!{python}
import signal, sys, time
from pathlib import Path
log = Path(sys.argv[1])
seen = []
def handle(signum, frame):
    seen.append(time.monotonic())
    log.write_text(" ".join(signal.Signals(signum).name for _ in seen))
    if len(seen) >= 2 and seen[-1] - seen[-2] < 1.0:
        sys.exit(0)
for sig in (signal.SIGINT, signal.SIGTERM):
    signal.signal(sig, handle)
Path(sys.argv[2]).write_text("ready")
deadline = time.monotonic() + {lifetime}
while time.monotonic() < deadline:
    time.sleep(0.01)
"""


def stand_in(tmp_path: Path, name: str, lifetime: float = 8.0) -> Path:
    path = tmp_path / name
    path.write_text(STAND_IN.format(python=sys.executable, lifetime=lifetime))
    path.chmod(0o755)
    return path


def signal_me_when_ready(ready: Path, sig: signal.Signals) -> threading.Thread:
    def send() -> None:
        deadline = time.monotonic() + 60
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(os.getpid(), sig)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize(("name", "sent"), [("srun", "SIGINT SIGINT"), ("mpiexec", "SIGINT")])
def test_sigint_reaches_the_launcher_process_as_it_ends_a_job(tmp_path, name, sent):
    program, log, ready = stand_in(tmp_path, name), tmp_path / "log", tmp_path / "ready"
    before = signal.getsignal(signal.SIGINT)
    thread = signal_me_when_ready(ready, signal.SIGINT)
    with JobSignals() as signals:
        code = run_job([str(program), str(log), str(ready)], signals, kill_after=3)
    thread.join(timeout=10)
    assert code == 128 + signal.SIGINT
    assert signals.received == signal.SIGINT and not signals.forced
    assert log.read_text() == sent
    assert signal.getsignal(signal.SIGINT) is before  # the launcher's handler is restored


def test_a_signal_before_the_next_attempt_starts_nothing(tmp_path):
    program = stand_in(tmp_path, "mpiexec", lifetime=0.2)
    log, ready = tmp_path / "log", tmp_path / "ready"
    with JobSignals() as signals:
        assert run_job([str(program), str(log), str(ready)], signals) == 0
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.1)  # the handler runs in this thread, between two bytecodes
        ready.unlink()
        assert run_job([str(program), str(log), str(ready)], signals) == 128 + signal.SIGTERM
    assert not ready.exists()
