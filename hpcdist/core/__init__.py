"""The core types every strategy and model shares.

Tensors (`tensors`: `Tensor`, `IndexedSlices`, and `constant` by TF's dtype rule: float32 for
Python floats), autodiff (`autodiff`: `GradientTape`) with its differentiable operations
(`math_ops`, registered as the operators of tensors and variables), the base `Variable` with its
enums and storage, the strategy context (which strategy and replica are current), and the
checkpoint protocol (`trackable`) that objects implement to be saved. It imports nothing above
the foundation: no communication, no strategy, no model. Importing it keeps freed arrays' memory
for reuse (`hpcdist.utils.heap`; ``HPCDIST_KEEP_FREED_MEMORY=0`` turns that off).
"""

from hpcdist.core import autodiff, context, math_ops, tensors, trackable, variables
from hpcdist.core.autodiff import GradientTape
from hpcdist.core.tensors import IndexedSlices, Tensor, constant, convert_to_tensor
from hpcdist.core.trackable import (
    CheckpointVariable,
    SlicedValue,
    SlotTrackable,
    StateTrackable,
    Trackable,
)
from hpcdist.core.variables import (
    LocalStorage,
    Storage,
    Variable,
    VariableAggregation,
    VariableSynchronization,
)
from hpcdist.settings import Settings
from hpcdist.utils import heap

# Arrays' temporaries: their memory is kept for the next step (read once, only this variable).
heap.keep_freed_memory(Settings.one("keep_freed_memory"))

__all__ = [
    "CheckpointVariable",
    "GradientTape",
    "IndexedSlices",
    "LocalStorage",
    "SlicedValue",
    "SlotTrackable",
    "StateTrackable",
    "Storage",
    "Tensor",
    "Trackable",
    "Variable",
    "VariableAggregation",
    "VariableSynchronization",
    "autodiff",
    "constant",
    "context",
    "convert_to_tensor",
    "math_ops",
    "tensors",
    "trackable",
    "variables",
]
