"""``hpcdist run --max-restarts K``: relaunch a failed job, as torchrun's ``--max-restarts``.

The whole job is started again when it fails (a rank killed, or exiting non-zero), up to K
times, with ``HPCDIST_RESTART_COUNT`` telling the script how many restarts came before; a script
that restores its newest checkpoint (``CheckpointManager.restore_or_initialize``,
``BackupAndRestore``) resumes where the failed attempt last saved. Not restarted: a job that
succeeded, a job that exited with `PREEMPTION_EXIT_CODE` (it checkpointed because Slurm is
preempting it; Slurm's requeue brings it back), and a job stopped by SIGTERM, SIGINT or SIGHUP
to the launcher (`hpcdist.cli.launch` stops the whole job; no attempt follows). With
``--min-ranks M`` each restart runs on one rank fewer than the attempt before, down to M: a job
that lost a node comes back on what is left, and its checkpoint is resharded to the new world
size on restore.

Nothing here starts MPI: this runs in the launching process.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence

from hpcdist.cli.launch import DEFAULT_KILL_AFTER_S, JobSignals, run_job
from hpcdist.exit_codes import PREEMPTION_EXIT_CODE

__all__ = ["RESTART_COUNT_VARIABLE", "run_with_restarts"]

#: Environment variable holding the number of restarts before this attempt (0 on the first).
RESTART_COUNT_VARIABLE = "HPCDIST_RESTART_COUNT"


def run_with_restarts(
    command: Callable[[int], Sequence[str]],
    ranks: int,
    max_restarts: int,
    min_ranks: int | None = None,
    env: dict[str, str] | None = None,
    log: Callable[[str], None] | None = None,
    kill_after: float = DEFAULT_KILL_AFTER_S,
) -> int:
    """Run ``command(ranks)`` until it succeeds, is preempted or stopped, or K restarts are used up.

    Args:
        command: The launch command for a number of ranks.
        ranks: Ranks of the first attempt.
        max_restarts: Restarts allowed after the first attempt (K >= 0).
        min_ranks: With a value below ``ranks``, each restart uses one rank fewer, down to it.
        env: Base environment (default: this process's).
        log: Where the one-line messages go (default: stderr).
        kill_after: Seconds a job stopped by a signal has to end before it is killed.

    Returns:
        The exit code of the last attempt; 128 + the signal's number when a SIGTERM, SIGINT or
        SIGHUP to this process stopped the job (no restart follows).

    Raises:
        ValueError: ``max_restarts`` < 0, or ``min_ranks`` not in [1, ranks].
    """
    if max_restarts < 0:
        raise ValueError(f"--max-restarts must be >= 0, got {max_restarts}")
    if min_ranks is not None and not 1 <= min_ranks <= ranks:
        raise ValueError(f"--min-ranks must be between 1 and -n ({ranks}), got {min_ranks}")
    say = log or (lambda line: print(line, file=sys.stderr, flush=True))
    base = dict(os.environ if env is None else env)
    n = ranks
    code = 0
    with JobSignals() as signals:
        for attempt in range(max_restarts + 1):
            started = time.monotonic()
            env = {**base, RESTART_COUNT_VARIABLE: str(attempt)}
            code = run_job(command(n), signals, env, kill_after)
            took = time.monotonic() - started
            if signals.received is not None:
                say(
                    f"hpcdist run: stopped by {signals.received.name} after {took:.1f} s; "
                    "not restarting the job"
                )
                return code
            if code == 0:
                return 0
            if code == PREEMPTION_EXIT_CODE:
                say(
                    f"hpcdist run: the job was preempted (exit code {code}) after {took:.1f} s; "
                    "not restarting it (the scheduler requeues preempted jobs)"
                )
                return code
            if attempt == max_restarts:
                say(
                    f"hpcdist run: the job failed with exit code {code} after {took:.1f} s, "
                    f"and {max_restarts} restart(s) were used up; giving up"
                )
                return code
            if min_ranks is not None and n > min_ranks:
                n -= 1
            say(
                f"hpcdist run: the job failed with exit code {code} after {took:.1f} s; "
                f"restart {attempt + 1} of {max_restarts} on {n} rank(s)"
            )
    return code  # not reached
