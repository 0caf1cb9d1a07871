"""Checkpoints: atomic HDF5 files, TF's manager rules, preemption handling."""

from hpcdist.checkpoint.checkpoint import Checkpoint, CheckpointLoadStatus, CheckpointOptions
from hpcdist.checkpoint.collective import checkpoint_communicator, is_checkpoint_chief
from hpcdist.checkpoint.format import CheckpointError
from hpcdist.checkpoint.manager import CheckpointManager
from hpcdist.checkpoint.preemption import PREEMPTION_EXIT_CODE, PreemptionCheckpointHandler

__all__ = [
    "PREEMPTION_EXIT_CODE",
    "Checkpoint",
    "CheckpointError",
    "CheckpointLoadStatus",
    "CheckpointManager",
    "CheckpointOptions",
    "PreemptionCheckpointHandler",
    "checkpoint_communicator",
    "is_checkpoint_chief",
]
