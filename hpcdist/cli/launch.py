"""Start a job with mpiexec or srun, and stop the whole job when the launcher is told to stop.

``hpcdist run`` is what a user, ``timeout``, a workstation scheduler or a closing terminal
signals. While a job runs, `JobSignals` catches SIGTERM, SIGINT and SIGHUP in the launcher
and forwards each to the job's launcher process (mpiexec or srun, started in a session and
process group of its own, so that a terminal's Ctrl-C reaches the job once, through here).
mpiexec (MPICH's hydra) and srun pass the signal on to every rank. The job then has
``kill_after`` seconds to end; after that, or on a second signal, every process of the job is
killed (SIGKILL): mpiexec's process group, and the process tree below it, followed through
/proc on Linux because hydra starts its proxies and ranks in sessions of their own. The
launcher then exits with 128 + the signal's number, as a shell reports a signalled command,
and prints no traceback.

srun turns a single SIGINT into a status report; two within a second end the job
(Slurm's documented Ctrl-C sequence), so SIGINT is sent to srun twice.

Nothing here starts MPI: this runs in the launching process.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType, TracebackType

__all__ = [
    "DEFAULT_KILL_AFTER_S",
    "FORWARDED_SIGNALS",
    "JobSignals",
    "JobTree",
    "in_slurm_allocation",
    "launcher_command",
    "process_running",
    "run_job",
]

#: Signals that stop a job started by ``hpcdist run`` (forwarded, then the job is killed).
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
#: Seconds a signalled job has to end before every process of it is killed (Slurm's KillWait).
DEFAULT_KILL_AFTER_S = 30.0

_POLL_S = 0.5  # how often the launcher looks at a running job
_STOPPING_POLL_S = 0.05  # and at a job that was told to stop
_SRUN_REPEAT_S = 0.3  # delay of srun's second SIGINT (two within one second end the job)
_SETTLE_S = 5.0  # how long killed processes may take to disappear
_PROC = Path("/proc")


def in_slurm_allocation(environ: Mapping[str, str] | None = None) -> bool:
    """Whether jobs are started as Slurm job steps (inside an allocation, ``srun`` found)."""
    environ = os.environ if environ is None else environ
    return "SLURM_JOB_ID" in environ and shutil.which("srun") is not None


def launcher_command(
    nprocs: int,
    argv: list[str],
    environ: Mapping[str, str] | None = None,
    srun_options: Sequence[str] = (),
    mpiexec_options: Sequence[str] = (),
    guard: Sequence[str] = (),
) -> list[str]:
    """The command that starts ``argv`` on ``nprocs`` ranks: srun inside Slurm, else mpiexec.

    ``srun_options`` go to ``srun`` (a job step's options), ``mpiexec_options`` to mpiexec;
    under mpiexec each rank runs under ``guard`` (a command prefix), if given.
    """
    python_prefix = [sys.executable, "-m", "hpcdist"] if argv and argv[0].endswith(".py") else []
    if in_slurm_allocation(environ):
        return ["srun", "--mpi=pmi2", *srun_options, "-n", str(nprocs), *python_prefix, *argv]
    local = Path(sys.executable).parent / "mpiexec"
    mpiexec = str(local) if local.exists() else shutil.which("mpiexec") or "mpiexec"
    return [mpiexec, *mpiexec_options, "-n", str(nprocs), *guard, *python_prefix, *argv]


class JobSignals:
    """While entered, SIGTERM, SIGINT and SIGHUP stop the current job instead of the launcher.

    One instance spans every attempt of ``hpcdist run --max-restarts``: a signal that arrives
    between two attempts is kept, and the next attempt is not started. The handlers are
    installed only in the main thread (where Python runs signal handlers); elsewhere the
    signals keep their previous handling.

    Attributes:
        received: The first stop signal received, or None.
        forced: Whether a second stop signal was received (kill at once).
    """

    def __init__(self) -> None:
        self.received: signal.Signals | None = None
        self.forced = False
        self._job: subprocess.Popen | None = None
        self._previous: dict[signal.Signals, object] = {}
        self._repeat_at: float | None = None
        self._tracked: dict[int, str] = {}  # pid -> start time, to tell a reused pid from ours

    def __enter__(self) -> JobSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in FORWARDED_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    @property
    def exit_code(self) -> int | None:
        """128 + the received signal's number, or None when no stop signal came."""
        return None if self.received is None else 128 + int(self.received)

    def attach(self, job: subprocess.Popen | None) -> None:
        """Make ``job`` the one that stop signals go to (None: no job is running)."""
        self._job = job
        self._tracked = {}
        if job is not None and self.received is not None:
            self._forward(self.received)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is not None:
            self.forced = True
            return
        self.received = signal.Signals(signum)
        if self._job is not None:
            self._forward(self.received)

    def _forward(self, sig: signal.Signals) -> None:
        job = self._job
        if job is None or job.poll() is not None:
            return
        _track(job.pid, self._tracked)  # before mpiexec can end and leave ranks unparented
        _signal_group(job.pid, sig)
        if sig == signal.SIGINT and _is_srun(job.args):
            self._repeat_at = time.monotonic() + _SRUN_REPEAT_S

    def resend_if_due(self) -> None:
        """Send srun's second SIGINT once it is due (two within a second end an srun step)."""
        job = self._job
        if self._repeat_at is None or time.monotonic() < self._repeat_at:
            return
        self._repeat_at = None
        if job is not None and job.poll() is None:
            _signal_group(job.pid, signal.SIGINT)

    def job_processes(self) -> dict[int, str]:
        """The live processes of the current job below its launcher: {pid: start time}.

        Followed through /proc from the launcher process, and from every process seen below
        it since the stop signal (a rank stays tracked when its parent ends first).
        """
        if self._job is None:
            return {}
        _track(self._job.pid, self._tracked)
        return {pid: start for pid, start in self._tracked.items() if _start_time(pid) == start}


class JobTree:
    """One started job (mpiexec and the processes below it) that can be signalled as a whole.

    The launcher of several jobs (``hpcdist run --workers``, `hpcdist.cli.ps_launch`) keeps
    one per job: processes below the job are followed through /proc as in `JobSignals`.

    Args:
        job: The job's launcher process, started in a session of its own.
    """

    def __init__(self, job: subprocess.Popen) -> None:
        self.job = job
        self._tracked: dict[int, str] = {}

    def track(self) -> None:
        """Record the processes below the job now (before its launcher can end)."""
        if self.job.poll() is None:
            _track(self.job.pid, self._tracked)

    def alive(self) -> dict[int, str]:
        """The job's processes still running: {pid: start time} (the launcher not counted)."""
        self.track()
        return {pid: start for pid, start in self._tracked.items() if _start_time(pid) == start}

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the job's process group (mpiexec passes it on to the ranks)."""
        self.track()
        if self.job.poll() is None:
            _signal_group(self.job.pid, sig)

    def kill(self) -> None:
        """SIGKILL the job's process group and every process below it; reap the launcher."""
        alive = self.alive()
        if self.job.poll() is None:
            _signal_group(self.job.pid, signal.SIGKILL)
        for pid, start in alive.items():
            if _start_time(pid) == start:
                _signal_pid(pid, signal.SIGKILL)
        self.job.wait()
        settle = time.monotonic() + _SETTLE_S
        while self.alive() and time.monotonic() < settle:
            time.sleep(_STOPPING_POLL_S)


def run_job(
    command: Sequence[str],
    signals: JobSignals,
    env: Mapping[str, str] | None = None,
    kill_after: float = DEFAULT_KILL_AFTER_S,
) -> int:
    """Run ``command`` to its end, or until a stop signal has ended (or killed) all of it.

    Args:
        command: The launch command (mpiexec or srun and the program).
        signals: The entered `JobSignals` that stop signals arrive through.
        env: The job's environment (default: this process's).
        kill_after: Seconds the job has to end after a stop signal before it is killed.

    Returns:
        The job's exit code; 128 + the signal's number when a stop signal ended it.
    """
    if signals.received is not None:
        return 128 + int(signals.received)
    # A session of its own: a terminal's Ctrl-C reaches the job once, forwarded from here.
    job = subprocess.Popen(
        list(command), env=None if env is None else dict(env), start_new_session=True
    )
    signals.attach(job)
    try:
        while signals.received is None:
            try:
                job.wait(timeout=_POLL_S)
                break
            except subprocess.TimeoutExpired:
                continue
        if signals.received is not None:
            _stop(job, signals, kill_after)
        return job.wait() if signals.exit_code is None else signals.exit_code
    finally:
        signals.attach(None)


def _stop(job: subprocess.Popen, signals: JobSignals, kill_after: float) -> None:
    """Wait for a signalled job and every process below it to end; kill them at the deadline."""
    deadline = time.monotonic() + kill_after
    while True:
        signals.resend_if_due()
        alive = signals.job_processes()
        if job.poll() is not None and not alive:
            return
        if signals.forced or time.monotonic() >= deadline:
            why = "a second signal" if signals.forced else f"{kill_after:g} s after the first"
            sys.stderr.write(
                f"hpcdist run: {signals.received.name} did not end the job; killing it "
                f"(SIGKILL, {why})\n"
            )
            _signal_group(job.pid, signal.SIGKILL)
            for pid, start in alive.items():
                if _start_time(pid) == start:
                    _signal_pid(pid, signal.SIGKILL)
            job.wait()
            settle = time.monotonic() + _SETTLE_S
            while signals.job_processes() and time.monotonic() < settle:
                time.sleep(_STOPPING_POLL_S)
            return
        time.sleep(_STOPPING_POLL_S)


def _track(root: int, tracked: dict[int, str]) -> None:
    """Add the live processes below ``root`` and below those already tracked to ``tracked``."""
    if not _PROC.is_dir():
        return
    children: dict[int, list[int]] = {}
    starts: dict[int, str] = {}
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        stat = _read_stat(int(entry.name))
        if stat is None or stat[0] == "Z":
            continue
        children.setdefault(stat[1], []).append(int(entry.name))
        starts[int(entry.name)] = stat[2]
    todo = [root, *(pid for pid, start in tracked.items() if starts.get(pid) == start)]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in tracked and child in starts:
                tracked[child] = starts[child]
                todo.append(child)


def _read_stat(pid: int) -> tuple[str, int, str] | None:
    """(state, parent pid, start time) of a process from /proc, or None if it is gone."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()  # the command name may hold spaces
    return fields[0], int(fields[1]), fields[19]


def process_running(pid: int) -> bool:
    """Whether process ``pid`` exists and has not ended (a zombie has ended)."""
    return _start_time(pid) is not None


def _start_time(pid: int) -> str | None:
    stat = _read_stat(pid)
    return None if stat is None or stat[0] == "Z" else stat[2]


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        _signal_pid(pgid, sig)


def _signal_pid(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _is_srun(command: object) -> bool:
    args = [command] if isinstance(command, (str, bytes)) else list(command or [])
    return bool(args) and os.path.basename(str(args[0])) == "srun"
