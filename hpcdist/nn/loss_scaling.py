"""Loss scaling for synchronous replicas (``tf.nn.compute_average_loss`` and friends).

Gradients are summed across replicas, so each replica's loss must be divided by the *global*
batch size (not its own) for the summed gradient to be the gradient of the global mean loss.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hpcdist.core import context
from hpcdist.core import math_ops as ops
from hpcdist.core.tensors import as_tensor

__all__ = ["compute_average_loss", "scale_regularization_loss"]


def _check_replica_context(name: str) -> None:
    if context.has_strategy() and context.in_cross_replica_context():
        raise RuntimeError(
            f"You are calling `{name}` in cross replica context, while it was expected to be "
            "called in replica context (inside strategy.run)."
        )


def compute_average_loss(
    per_example_loss: Any, sample_weight: Any = None, global_batch_size: int | None = None
) -> Any:
    """Sum of ``per_example_loss`` (times ``sample_weight``) divided by the global batch size.

    Args:
        per_example_loss: Losses of this replica's examples, rank >= 1 (first axis = batch).
        sample_weight: Optional weights broadcastable to ``per_example_loss``.
        global_batch_size: Default: this replica's batch size x ``num_replicas_in_sync``.

    Returns:
        A scalar `hpcdist.nn.Tensor` (differentiable under a `GradientTape`).

    Raises:
        RuntimeError: Called in cross-replica context without ``global_batch_size``.
        ValueError: ``per_example_loss`` is a scalar, or ``global_batch_size`` is not a
            non-negative integer (0 gives 0, as TF's ``div_no_nan``).
    """
    loss = as_tensor(per_example_loss)
    if loss.ndim == 0:
        raise ValueError(
            "Invalid value passed for `per_example_loss`. Expected a tensor with at least rank 1, "
            f"received: {per_example_loss!r}"
        )
    if sample_weight is not None:
        loss = ops.multiply(loss, np.asarray(sample_weight))
    if global_batch_size is None:
        # Only the default needs the replica context (TF's rule): it counts the replicas.
        _check_replica_context("compute_average_loss")
        global_batch_size = loss.shape[0] * context.get_strategy().num_replicas_in_sync
    elif isinstance(global_batch_size, bool) or not isinstance(
        global_batch_size, (int, np.integer)
    ):
        raise ValueError(f"global_batch_size must be an integer, got {global_batch_size!r}")
    if global_batch_size < 0:
        raise ValueError(f"global_batch_size must be non-negative, got {global_batch_size}")
    if global_batch_size == 0:
        return ops.multiply(ops.reduce_sum(loss), 0.0)
    return ops.divide(ops.reduce_sum(loss), float(global_batch_size))


def scale_regularization_loss(regularization_loss: Any) -> Any:
    """Sum of ``regularization_loss`` divided by ``num_replicas_in_sync``.

    Raises:
        RuntimeError: Called in cross-replica context.
    """
    _check_replica_context("scale_regularization_loss")
    total = ops.reduce_sum(regularization_loss)
    return ops.divide(total, float(context.get_strategy().num_replicas_in_sync))
