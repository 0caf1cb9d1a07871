"""Per-example losses for `Model.fit` and `evaluate`: the compiled loss unreduced, then weighted.

The steps sum these and divide by the global batch size (Keras' ``sum_over_batch_size``), so a
distributed step equals one process's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hpcdist.core import math_ops as ops
from hpcdist.core.autodiff import Tensor
from hpcdist.utils.xp import to_numpy

__all__ = ["penalty_sum", "per_example_losses"]


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
