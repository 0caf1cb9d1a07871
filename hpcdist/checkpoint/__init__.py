"""Checkpoints: atomic HDF5 files, TF's manager rules, `latest_checkpoint`, preemption handling."""

from hpcdist.checkpoint.checkpoint import Checkpoint, CheckpointLoadStatus, CheckpointOptions
from hpcdist.checkpoint.collective import checkpoint_communicator, is_checkpoint_chief
from hpcdist.checkpoint.format import (
    CheckpointCorruptError,
    CheckpointError,
    CheckpointMismatchError,
    CheckpointWriteError,
)
from hpcdist.checkpoint.manager import CheckpointManager
from hpcdist.checkpoint.preemption import PREEMPTION_EXIT_CODE, PreemptionCheckpointHandler
from hpcdist.checkpoint.state import latest_checkpoint

__all__ = [
    "PREEMPTION_EXIT_CODE",
    "Checkpoint",
    "CheckpointCorruptError",
    "CheckpointError",
    "CheckpointLoadStatus",
    "CheckpointManager",
    "CheckpointMismatchError",
    "CheckpointOptions",
    "CheckpointWriteError",
    "PreemptionCheckpointHandler",
    "checkpoint_communicator",
    "is_checkpoint_chief",
    "latest_checkpoint",
]
