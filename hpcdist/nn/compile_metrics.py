"""What ``Model.compile`` makes of ``metrics`` and ``weighted_metrics``; how steps update them.

Keras' rules: plain metrics never see sample weights; weighted metrics get the weights of
``fit`` and ``evaluate``, and one whose name a plain metric already has is logged as
``weighted_<name>``. The loss tracker averages each example's weighted loss (plus the
regularization penalty), which is Keras' batch-size-weighted mean of the batch losses.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hpcdist.core.autodiff import Tensor
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
    model: Any, y: Any, y_pred: Tensor, per_example: Tensor, reg: Any, sample_weight: Any
) -> None:
    """Update ``model``'s loss tracker, plain and weighted metrics with one replica's batch."""
    values = per_example.value.astype(np.float64)
    if reg is not None:
        values = values + float(to_numpy(reg.value if isinstance(reg, Tensor) else reg))
    model._loss_tracker.update_state(values)
    for metric in model.compiled_metrics:
        metric.update_state(y, y_pred)
    for metric in model.compiled_weighted_metrics:
        metric.update_state(y, y_pred, sample_weight=sample_weight)
