"""What ``Model.compile`` makes of ``metrics`` and ``weighted_metrics``; how steps update them.

Keras' rules: plain metrics never see sample weights; weighted metrics get the weights of
``fit`` and ``evaluate``, and one whose name a plain metric already has is logged as
``weighted_<name>``. The loss tracker is Keras' batch-size-weighted mean of each replica's
batch loss (reduced as the compiled loss says, unscaled by the replicas, plus the penalty).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hpcdist.core.tensors import Tensor
from hpcdist.nn import metrics as metrics_mod
from hpcdist.utils.xp import to_numpy

__all__ = ["build", "update"]


def build(metrics: Any, weighted_metrics: Any, loss: Any) -> tuple[list, list, list[str]]:
    """Metric objects for ``compile`` (call inside the strategy's scope).

    Returns:
        The plain metrics, the weighted ones (renamed where Keras renames them), and the
        weighted ones' names as asked for (what a saved model records).
    """
    plain = [metrics_mod.get(m, loss) for m in (metrics or [])]
    weighted = [metrics_mod.get(m, loss) for m in (weighted_metrics or [])]
    asked = [m.name for m in weighted]
    taken = {m.name for m in plain}
    for metric in weighted:
        if metric.name in taken:
            metric.name = f"weighted_{metric.name}"
    return plain, weighted, asked


def update(
    model: Any,
    y: Any,
    y_pred: Tensor,
    loss: tuple[float, Tensor],
    reg: Any,
    sample_weight: Any,
) -> None:
    """Update ``model``'s loss tracker, plain and weighted metrics with one replica's batch.

    Args:
        model: The model.
        y: Targets.
        y_pred: Predictions.
        loss: The replica's batch loss as the tracker records it (`replica_loss`) and its
            per-example losses (their count weights the batch in the tracker's mean).
        reg: The regularization penalty, or None.
        sample_weight: The batch's weights, or None.
    """
    tracked, per_example = loss
    if reg is not None:
        tracked += float(to_numpy(reg.value if isinstance(reg, Tensor) else reg))
    rows = per_example.shape[0] if per_example.ndim else 1
    model.loss_tracker.update_state(np.array([tracked]), sample_weight=np.array([float(rows)]))
    for metric in model.compiled_metrics:
        metric.update_state(y, y_pred)
    for metric in model.compiled_weighted_metrics:
        metric.update_state(y, y_pred, sample_weight=sample_weight)
