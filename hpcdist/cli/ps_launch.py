"""``hpcdist run --ps P --workers W``: a parameter-server job whose workers may die.

One MPI job cannot survive a dead rank, so this launch starts one job per failure domain,
each with ``mpiexec``, or inside a Slurm allocation as a job step with ``srun``
(`hpcdist.cli.launch.launcher_command`), running the same program:

* the **server job**: the coordinator (rank 0) and the ``P`` ps ranks, ``mpiexec -n 1+P``;
* one **worker job** per worker index ``i`` (``mpiexec -n 1``).

Job steps and where they run: `_Launch._step_options`.

Each job gets a launch file (``HPCDIST_PS_LAUNCH``, 0600, in a 0700 directory of its own:
`hpcdist.cluster.launched`) naming its role, its worker index and the job's secret, a fresh
random token. The workers join the coordinator by proving the secret
(`hpcdist.strategies.ps.admission`). ``UCX_RNDV_THRESH=inf`` is set (unless already set) so
that MPI never reads a dying peer's memory (rendezvous transfers do).

A worker job that fails (ends with a code other than 0) while the server job runs is started
again with the same index, up to ``--worker-restarts`` times each (``HPCDIST_RESTART_COUNT``
tells it which start it is); with none left, training goes on with the others. The launch
ends when the server job ends: the workers it stopped exit by themselves, those still running
after `WORKER_GRACE_S` are killed (at once when the server job failed), and the exit code is
the server job's. The server job runs with ``-disable-auto-cleanup`` and each of its ranks
under a guard process (under ``mpiexec``: `hpcdist.cli.rank_guard`; ``srun
--kill-on-bad-exit=0`` in Slurm): a dead ps then does not take the coordinator down with it,
and the coordinator reports which ps died (`hpcdist.strategies.ps.membership`). A worker the
coordinator finds hung past its deadline (``HPCDIST_TIMEOUT_SECONDS``) is named in a request
file ``kill-worker-<index>`` of the launch directory: its job is killed, and restarted as any
failed worker.
``--max-restarts K`` starts a failed launch again as a whole, up to K times. A SIGTERM, SIGINT
or SIGHUP is forwarded to every job; after ``--kill-after`` seconds (or a second signal)
every process of every job is killed. Nothing here starts MPI.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from hpcdist.cli.launch import (
    DEFAULT_KILL_AFTER_S,
    JobSignals,
    JobTree,
    in_slurm_allocation,
    launcher_command,
    process_running,
)
from hpcdist.cluster.launched import PSLaunch, write_launch

__all__ = ["WORKER_GRACE_S", "run_fault_tolerant"]

#: Seconds the workers have to exit by themselves once the server job ended.
WORKER_GRACE_S = 10.0
#: The guard each rank of the server job runs under with mpiexec (run by its path).
RANK_GUARD = Path(__file__).with_name("rank_guard.py")
_POLL_S = 0.05


def _say(message: str) -> None:
    sys.stderr.write(f"hpcdist run: {message}\n")
    sys.stderr.flush()


class _Launch:
    """The jobs of one fault-tolerant launch and the files they share."""

    def __init__(
        self, argv: list[str], num_ps: int, num_workers: int, environ: Mapping[str, str]
    ) -> None:
        self.argv, self.num_ps, self.num_workers = argv, num_ps, num_workers
        self.slurm = in_slurm_allocation(environ)
        if self.slurm:  # job steps may run on every node: the files go where all can read them
            shared = environ.get("SLURM_SUBMIT_DIR") or os.getcwd()
            self.dir = Path(tempfile.mkdtemp(prefix=".hpcdist-ps-", dir=shared))  # 0700
        else:
            self.dir = Path(tempfile.mkdtemp(prefix="hpcdist-ps-"))  # 0700
        base = PSLaunch(
            role="server",
            index=0,
            num_ps=num_ps,
            num_workers=num_workers,
            secret=secrets.token_hex(32),
            address_file=str(self.dir / "address"),
            bind="" if self.slurm else "127.0.0.1",  # "": the coordinator's host address
        )
        write_launch(self.dir / "server.json", base)
        for i in range(num_workers):
            write_launch(
                self.dir / f"worker-{i}.json", dataclasses.replace(base, role="worker", index=i)
            )
        env = {k: v for k, v in environ.items() if k not in ("HPCDIST_NUM_PS",)}
        env.setdefault("UCX_RNDV_THRESH", "inf")
        self.env = env

    def start(self, role: str, index: int = 0, restart: int = 0) -> JobTree:
        name = "server.json" if role == "server" else f"worker-{index}.json"
        env = dict(self.env, HPCDIST_PS_LAUNCH=str(self.dir / name))
        env["HPCDIST_RESTART_COUNT"] = str(restart)
        nprocs = 1 + self.num_ps if role == "server" else 1
        options = self._step_options(role, index, restart) if self.slurm else []
        server = role == "server"
        command = launcher_command(
            nprocs,
            self.argv,
            environ=self.env,
            srun_options=options,
            # A dead ps must not take the coordinator down: hydra then only signals SIGUSR1
            # to the others (the server ranks ignore it), and a ps that a signal ended is
            # seen by hydra as its guard's exit code (`hpcdist.cli.rank_guard`).
            mpiexec_options=["-disable-auto-cleanup"] if server else [],
            guard=[sys.executable, str(RANK_GUARD)] if server else [],
        )
        return JobTree(subprocess.Popen(command, env=env, start_new_session=True))

    def _step_options(self, role: str, index: int, restart: int) -> list[str]:
        """The ``srun`` options of a job step of this launch (inside a Slurm allocation).

        ``--exact``: a step takes only the CPUs it asks for, so the steps run side by side. A
        dead ps does not end the server step (``--kill-on-bad-exit=0``) before the coordinator
        names it. On several nodes the server step stays on the first node when it fits there,
        and the workers first start round-robin on the others (``--relative``), so losing a
        worker's node never takes the variables with it; a restarted worker goes where Slurm
        finds a free CPU (never on a node Slurm has marked down).
        """
        nodes = int(self.env.get("SLURM_JOB_NUM_NODES") or self.env.get("SLURM_NNODES") or 1)
        if role == "server":
            options = ["--exact", "--job-name=hpcdist-server", "--kill-on-bad-exit=0"]
            if nodes > 1 and 1 + self.num_ps <= _first_node_cpus(self.env):
                options += ["-N", "1", "--relative=0"]
            return options
        options = ["--exact", f"--job-name=hpcdist-worker-{index}", "-N", "1"]
        if nodes > 1 and restart == 0:
            options.append(f"--relative={1 + index % (nodes - 1)}")
        return options

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def _first_node_cpus(env: Mapping[str, str]) -> int:
    """CPUs of the allocation's first node, from ``SLURM_JOB_CPUS_PER_NODE`` (``"4(x2),2"``)."""
    first = env.get("SLURM_JOB_CPUS_PER_NODE", "").split(",")[0].split("(")[0]
    return int(first) if first.isdigit() else 0


class _ServerRanks:
    """Which rank of the server job died first, from the host and pid each rank writes.

    Ranks on other hosts (Slurm job steps) are not looked at.

    Inside one MPICH job a dead rank may take the others down within milliseconds (hydra
    kills them), before the coordinator can say which ps died: the launcher then says it.
    """

    def __init__(self, launch: _Launch) -> None:
        self.launch = launch
        self.pids: dict[int, int] = {}  # rank -> pid
        self.first_dead: list[int] | None = None  # the ranks found dead at the first look

    def check(self) -> None:
        """Read new pid files; record the ranks found dead the first time any is."""
        if self.first_dead is not None:
            return
        for rank in range(1 + self.launch.num_ps):
            if rank not in self.pids:
                try:
                    host, pid = (self.launch.dir / f"rank-{rank}.pid").read_text().split()
                except (OSError, ValueError):
                    continue
                if host == socket.gethostname():
                    self.pids[rank] = int(pid)
        dead = [rank for rank, pid in self.pids.items() if not process_running(pid)]
        if dead:
            self.first_dead = dead

    def report(self, code: int) -> None:
        """Say which rank of the server job died (or hung), if one did before the job ended."""
        try:  # the coordinator saw a ps's socket end (or a ps miss a deadline): it knows which
            who = (self.launch.dir / "failure").read_text().strip()
        except OSError:
            who = ""
        if not who:
            if not self.first_dead:
                return
            died = [r for r in self.first_dead if r != 0] or self.first_dead
            who = ", ".join(
                "the coordinator (rank 0)" if r == 0 else f"ps {r - 1} (rank {r})" for r in died
            )
            who += " of the server job died"
        _say(
            f"{who}; the server job ended with exit code {code}. "
            "A parameter-server job cannot go on without its ps (as in TensorFlow): restart "
            "it from its last checkpoint (hpcdist run --max-restarts K does)"
        )


def run_fault_tolerant(
    argv: list[str],
    num_ps: int,
    num_workers: int,
    worker_restarts: int = 0,
    kill_after: float = DEFAULT_KILL_AFTER_S,
    environ: Mapping[str, str] | None = None,
    max_restarts: int = 0,
) -> int:
    """Run ``argv`` as a server job and ``num_workers`` worker jobs (see the module).

    With ``max_restarts`` K, a launch whose server job failed (a ps or the coordinator died,
    or the program raised) is started again as a whole, with fresh secret and files, up to K
    times (``HPCDIST_RESTART_COUNT`` of the server job counts the attempts before): a script
    that restores its last checkpoint resumes there, as TF's guidance for a ps failure.

    Returns:
        The server job's exit code; 128 + the signal's number when a stop signal ended it.

    Raises:
        ValueError: ``num_ps`` or ``num_workers`` below 1, or ``worker_restarts`` or
            ``max_restarts`` below 0.
    """
    if num_ps < 1 or num_workers < 1 or worker_restarts < 0 or max_restarts < 0:
        raise ValueError(
            f"hpcdist run: expected --ps >= 1, --workers >= 1, --worker-restarts >= 0 and "
            f"--max-restarts >= 0, got --ps {num_ps} --workers {num_workers} "
            f"--worker-restarts {worker_restarts} --max-restarts {max_restarts}"
        )
    base = os.environ if environ is None else environ
    code = 0
    with JobSignals() as signals:
        for attempt in range(max_restarts + 1):
            launch = _Launch(argv, num_ps, num_workers, base)
            try:
                code = _supervise(launch, signals, worker_restarts, kill_after, attempt)
            finally:
                launch.remove()
            if code == 0 or signals.received is not None:
                return code
            if attempt < max_restarts:
                _say(
                    f"the server job (coordinator + ps) failed with exit code {code}; "
                    f"restarting the whole launch ({attempt + 1} of {max_restarts})"
                )
            elif max_restarts:
                _say(f"the server job failed with exit code {code}; no restart left")
    return code


def _supervise(
    launch: _Launch, signals: JobSignals, restarts: int, kill_after: float, attempt: int = 0
) -> int:
    server = launch.start("server", restart=attempt)
    ranks = _ServerRanks(launch)
    signals.attach(server.job)  # a stop signal reaches the server job at once
    workers = {i: launch.start("worker", i) for i in range(launch.num_workers)}
    started = dict.fromkeys(workers, 0)
    try:
        while signals.received is None and server.job.poll() is None:
            ranks.check()
            for i, job in list(workers.items()):
                job.track()
                request = launch.dir / f"kill-worker-{i}"
                if request.exists():  # the coordinator found it hung past its deadline
                    request.unlink(missing_ok=True)
                    _say(f"worker {i} is hung past its deadline; killing it (SIGKILL)")
                    job.kill()
                code = job.job.poll()
                if code is None:
                    continue
                stopped = launch.dir / f"worker-{i}.stopped"
                if code == 0 and stopped.exists():  # it served until the coordinator stopped it
                    stopped.unlink(missing_ok=True)
                    del workers[i]
                    continue
                # srun ends a step whose node failed with code 0: not stopped, so failed
                how = f"code {code}" if code else "code 0 without being stopped (node failure?)"
                if started[i] < restarts:
                    started[i] += 1
                    _say(
                        f"worker {i} exited with {how}; restarting it ({started[i]} of {restarts})"
                    )
                    workers[i] = launch.start("worker", i, started[i])
                else:
                    _say(f"worker {i} exited with {how}; no restart left, not restarted")
                    del workers[i]
            time.sleep(_POLL_S)
        if signals.received is not None:
            return _stop_all(server, workers, signals, kill_after)
        if server.job.returncode != 0:
            ranks.check()
            ranks.report(server.job.returncode)
        # A failed server job (a ps died, the program raised) leaves nothing to finish.
        grace = WORKER_GRACE_S if server.job.returncode == 0 else 0.0
        deadline = time.monotonic() + grace
        while any(job.job.poll() is None for job in workers.values()):
            if time.monotonic() > deadline or signals.received is not None:
                break
            time.sleep(_POLL_S)
        for job in workers.values():
            job.kill()
        server.kill()  # the launcher is done; nothing of the job may outlive it
        return server.job.returncode
    finally:
        signals.attach(None)


def _stop_all(
    server: JobTree, workers: dict[int, JobTree], signals: JobSignals, kill_after: float
) -> int:
    """Forward the stop signal to every job; kill them all at the deadline."""
    assert signals.received is not None
    jobs = [server, *workers.values()]
    for job in workers.values():
        job.signal(signals.received)
    deadline = time.monotonic() + kill_after
    while any(job.job.poll() is None or job.alive() for job in jobs):
        signals.resend_if_due()
        if signals.forced or time.monotonic() >= deadline:
            why = "a second signal" if signals.forced else f"{kill_after:g} s after the first"
            _say(f"{signals.received.name} did not end the jobs; killing them (SIGKILL, {why})")
            break
        time.sleep(_POLL_S)
    for job in jobs:
        job.kill()
    return 128 + int(signals.received)
