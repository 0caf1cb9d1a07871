"""Per-example losses for `Model.fit` and `evaluate`: the compiled loss unreduced, then weighted.

The steps sum these and divide by the global batch size (Keras' ``sum_over_batch_size``), so a
distributed step equals one process's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hpcdist.core import math_ops as ops
from hpcdist.core.tensors import Tensor
from hpcdist.utils.xp import to_numpy

__all__ = ["penalty_sum", "per_example_losses", "replica_loss"]


def per_example_losses(loss: Any, y: Any, y_pred: Tensor, sample_weight: Any = None) -> Tensor:
    """``loss.values(y, y_pred)`` per example (shape ``(batch,)``), times ``sample_weight``.

    1-D predictions are one sample in Keras (a scalar loss); it is spread over the batch's
    examples so that the sum over examples is the batch's mean times its size. A trailing axis of
    1 on the weights is dropped.

    Raises:
        ValueError: The weights are not one per example.
    """
    losses = loss.values(y, y_pred)
    if losses.ndim == 0 and y_pred.ndim:
        losses = ops.multiply(losses, np.ones(y_pred.shape[0], losses.dtype))
    if sample_weight is None:
        return losses
    w = np.asarray(to_numpy(sample_weight), dtype=losses.dtype)
    if w.ndim == losses.ndim + 1 and w.shape[-1] == 1:
        w = w[..., 0]
    if w.shape != losses.shape:
        raise ValueError(
            f"sample_weight must hold one weight per example, shape {losses.shape}; "
            f"got shape {w.shape}"
        )
    return ops.multiply(losses, w)


def penalty_sum(penalties: list[Any]) -> Tensor | None:
    """Sum of a model's ``losses`` (recorded under a tape), or None without penalties."""
    if not penalties:
        return None
    total = penalties[0]
    for p in penalties[1:]:
        total = ops.add(total, p)
    return total


def replica_loss(
    loss: Any,
    per_example: Tensor,
    one_sample: bool,
    sample_weight: Any,
    global_rows: float,
    replicas: int,
) -> tuple[Tensor, float]:
    """One replica's batch loss, reduced as the compiled loss's ``reduction`` says (Keras' fit).

    ``"sum"`` sums the weighted losses (the replicas' gradients then add up to the global
    sum's); ``"mean_with_sample_weight"`` divides by the replica's sum of weights and by the
    number of replicas, 0 when the weights sum to 0; every other reduction divides by the global
    batch size (``sum_over_batch_size``). A 1-D prediction is one sample in Keras: its loss is
    the mean whatever the reduction.

    Args:
        loss: The compiled loss (its ``reduction`` is read).
        per_example: `per_example_losses` of this replica's batch.
        one_sample: The predictions were 1-D (Keras reduces nothing then).
        sample_weight: This replica's weights, or None.
        global_rows: Examples in the global batch.
        replicas: Replicas in sync.

    Returns:
        The loss to differentiate, and what Keras' loss tracker records for this replica
        (unscaled by the replicas), to be weighted by the replica's batch size.
    """
    rows = per_example.shape[0] if per_example.ndim else 1
    total = ops.reduce_sum(per_example)
    reduction = "auto" if one_sample else getattr(loss, "reduction", "auto")
    if reduction == "sum":
        return total, float(to_numpy(total.value)) * replicas
    if reduction == "mean_with_sample_weight" and sample_weight is not None:
        weight = float(np.sum(to_numpy(sample_weight)))
        if not weight:
            return ops.multiply(total, 0.0), 0.0
        return ops.divide(total, weight * replicas), float(to_numpy(total.value)) / weight
    return ops.divide(total, global_rows), float(to_numpy(total.value)) / max(rows, 1)
