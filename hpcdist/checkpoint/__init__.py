"""Checkpoints (API section 6): atomic HDF5 files, TF's manager rules, preemption handling."""

from hpcdist.checkpoint.checkpoint import Checkpoint, CheckpointLoadStatus, CheckpointOptions
from hpcdist.checkpoint.format import CheckpointError
from hpcdist.checkpoint.manager import CheckpointManager

__all__ = [
    "Checkpoint",
    "CheckpointError",
    "CheckpointLoadStatus",
    "CheckpointManager",
    "CheckpointOptions",
]
