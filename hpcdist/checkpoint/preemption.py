"""`PreemptionCheckpointHandler`: save one checkpoint when the job is about to be killed.

The signal handler only sets a flag. After every step run through `run`, all ranks agree on it
(a one-byte all-reduce, so a signal that reached a single rank is enough); if any rank was
signalled, every rank saves the same checkpoint, the chief asks Slurm to requeue the job
(``scontrol requeue $SLURM_JOB_ID``, inside Slurm and with ``requeue=True``), and all ranks exit
with `PREEMPTION_EXIT_CODE`. On restart the handler restores the latest checkpoint, and
`total_run_calls` says how many steps are done.

Signals: SIGUSR2 (what ``sbatch --signal=USR2@120`` sends before the time limit) and SIGTERM (what
Slurm sends at preemption or ``scancel``). SIGUSR1 is left alone on purpose: some NCCL versions
use it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from hpcdist.checkpoint.collective import checkpoint_communicator, is_checkpoint_chief
from hpcdist.checkpoint.manager import CheckpointManager
from hpcdist.core import context
from hpcdist.logger import get_logger

__all__ = ["PREEMPTION_EXIT_CODE", "PreemptionCheckpointHandler"]

#: Exit code of every rank after a preemption checkpoint (Slurm shows it; requeued jobs restart).
PREEMPTION_EXIT_CODE = 42


class PreemptionCheckpointHandler:
    """Checkpoint-and-exit on preemption signals (TF's name and contract).

    Args:
        checkpoint_manager: Saves the checkpoint; its checkpoint gains a run counter.
        signals: Signals that mean "preempted".
        requeue: Under Slurm, requeue the job after saving.
        exit_fn: Called instead of ``sys.exit(PREEMPTION_EXIT_CODE)`` (tests).
    """

    def __init__(
        self,
        checkpoint_manager: CheckpointManager,
        signals: Sequence[int] = (signal.SIGUSR2, signal.SIGTERM),
        requeue: bool = True,
        exit_fn: Callable[[], Any] | None = None,
    ) -> None:
        self._manager = checkpoint_manager
        self._requeue = requeue
        self._exit_fn = exit_fn
        self._received: int | None = None
        ckpt = checkpoint_manager.checkpoint
        self._counter = context.get_strategy().Variable(
            np.int64(0), name="run_counter", trainable=False
        )
        ckpt.track("_preemption_run_counter", self._counter)
        self._previous = {sig: signal.signal(sig, self._on_signal) for sig in signals}
        restored = checkpoint_manager.restore_or_initialize()
        if restored:
            get_logger().info("resumed from %s after %d steps", restored, self.total_run_calls)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._received = signum  # only a flag: the step in progress finishes normally

    @property
    def total_run_calls(self) -> int:
        """Steps completed through `run`, over every restart."""
        return int(self._counter.numpy())

    def run(self, step_fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run one step; then, if any rank was signalled, checkpoint and exit on every rank."""
        result = step_fn(*args, **kwargs)
        self._counter.assign_add(1, read_value=False)
        if self._agreed():
            self._save_and_exit()
        return result

    def _agreed(self) -> bool:
        comm = checkpoint_communicator()
        mine = np.array([1 if self._received is not None else 0], dtype=np.int8)
        if comm is None:
            return bool(mine[0])
        return bool(comm.allreduce(mine, "max")[0])

    def _save_and_exit(self) -> None:
        path = self._manager.save(check_interval=False)
        comm = checkpoint_communicator()
        chief = is_checkpoint_chief(comm)
        log = get_logger()
        log.warning("preemption signal: saved %s after %d steps", path, self.total_run_calls)
        job = os.environ.get("SLURM_JOB_ID")
        if chief and self._requeue and job:
            # Logged first: Slurm may stop the job's processes as soon as it requeues it.
            log.warning("requeueing Slurm job %s", job)
            sys.stderr.flush()
            try:
                subprocess.run(["scontrol", "requeue", job], check=True, timeout=60)
            except (OSError, subprocess.SubprocessError) as exc:
                log.warning("could not requeue Slurm job %s: %s", job, exc)
        if comm is not None:
            comm.barrier()
        if self._exit_fn is not None:
            self._exit_fn()
            return
        sys.exit(PREEMPTION_EXIT_CODE)

    def close(self) -> None:
        """Put the previous signal handlers back."""
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
