"""Losses (Keras): per-example values, then a reduction.

Reductions: ``"auto"`` / ``"sum_over_batch_size"`` (mean over this replica's batch, as in Keras
3), ``"sum"`` and ``"none"``. Under a strategy, `Model.fit` turns per-example losses into the
global-batch mean itself (`hpcdist.nn.compute_average_loss`); in a custom loop use
``reduction="none"`` and `compute_average_loss`, as TF recommends.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hpcdist.core import math_ops as ops
from hpcdist.core.autodiff import Tensor, as_tensor
from hpcdist.utils.xp import array_module, as_array_like

__all__ = [
    "BinaryCrossentropy",
    "CategoricalCrossentropy",
    "Loss",
    "MeanSquaredError",
    "SparseCategoricalCrossentropy",
    "get",
]

_REDUCTIONS = ("auto", "sum_over_batch_size", "sum", "none")
_EPS = 1e-7


class Loss:
    """Base class: ``loss(y_true, y_pred, sample_weight=None)``.

    Args:
        reduction: ``"auto"``, ``"sum_over_batch_size"``, ``"sum"`` or ``"none"``.
        name: Name.

    Raises:
        ValueError: Unknown reduction.
    """

    def __init__(self, reduction: str = "auto", name: str | None = None) -> None:
        if reduction not in _REDUCTIONS:
            raise ValueError(f"reduction must be one of {_REDUCTIONS}, got {reduction!r}")
        self.reduction = reduction
        self.name = name or type(self).__name__

    def per_example(self, y_true: np.ndarray, y_pred: Tensor) -> Tensor:
        """Loss of each example, shape ``(batch,)`` (override)."""
        raise NotImplementedError

    def __call__(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> Tensor:
        """Reduced (or per-example, with ``"none"``) loss."""
        y_pred = as_tensor(y_pred)
        # Targets join the predictions' array module (a host batch moves to the GPU here).
        y_true = as_array_like(y_true.value if isinstance(y_true, Tensor) else y_true, y_pred.value)
        losses = self.per_example(y_true, y_pred)
        if sample_weight is not None:
            weights = as_array_like(sample_weight, losses.value, losses.dtype)
            losses = ops.multiply(losses, weights)
        if self.reduction == "none":
            return losses
        total = ops.reduce_sum(losses)
        if self.reduction == "sum":
            return total
        return ops.divide(total, max(losses.shape[0] if losses.ndim else 1, 1))


def _mean_last(x: Tensor) -> Tensor:
    return ops.reduce_mean(x, axis=-1) if x.ndim > 1 else x


class MeanSquaredError(Loss):
    """Mean over the last axis of ``(y_true - y_pred) ** 2``."""

    def per_example(self, y_true: np.ndarray, y_pred: Tensor) -> Tensor:
        """Squared error averaged over the last axis."""
        diff = ops.subtract(y_pred, y_true.astype(y_pred.dtype).reshape(y_pred.shape))
        return _mean_last(ops.square(diff))


class BinaryCrossentropy(Loss):
    """Cross-entropy of 0/1 targets; ``from_logits`` takes scores instead of probabilities."""

    def __init__(self, from_logits: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.from_logits = from_logits

    def per_example(self, y_true: np.ndarray, y_pred: Tensor) -> Tensor:
        """Mean over the last axis of the element-wise cross-entropy."""
        y = y_true.astype(y_pred.dtype).reshape(y_pred.shape)
        if self.from_logits:
            # max(z, 0) - z*y + log(1 + exp(-|z|)) == softplus(z) - z*y
            loss = ops.subtract(ops.softplus(y_pred), ops.multiply(y_pred, y))
        else:
            p = ops.add(ops.multiply(y_pred, 1 - 2 * _EPS), _EPS)
            loss = ops.negative(
                ops.add(
                    ops.multiply(ops.log(p), y), ops.multiply(ops.log(ops.subtract(1.0, p)), 1 - y)
                )
            )
        return _mean_last(loss)


class CategoricalCrossentropy(Loss):
    """Cross-entropy of one-hot targets over the last axis."""

    def __init__(self, from_logits: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.from_logits = from_logits

    def _log_probs(self, y_pred: Tensor) -> Tensor:
        if self.from_logits:
            return ops.log_softmax(y_pred, axis=-1)
        total = ops.reduce_sum(y_pred, axis=-1, keepdims=True)
        return ops.log(ops.add(ops.divide(y_pred, total), _EPS))

    def per_example(self, y_true: np.ndarray, y_pred: Tensor) -> Tensor:
        """``-sum(y_true * log p)``."""
        return ops.negative(
            ops.reduce_sum(
                ops.multiply(self._log_probs(y_pred), y_true.astype(y_pred.dtype)), axis=-1
            )
        )


class SparseCategoricalCrossentropy(CategoricalCrossentropy):
    """Cross-entropy of integer class targets."""

    def per_example(self, y_true: np.ndarray, y_pred: Tensor) -> Tensor:
        """``-log p[label]``.

        Raises:
            ValueError: A label outside ``[0, classes)``.
        """
        labels = y_true.reshape(-1).astype(np.int64)
        classes = y_pred.shape[-1]
        if labels.size and (labels.min() < 0 or labels.max() >= classes):
            raise ValueError(
                f"labels must be in [0, {classes}), got {labels.min()}..{labels.max()}"
            )
        log_probs = self._log_probs(y_pred)
        rows = array_module(labels).arange(labels.size)
        return ops.negative(ops.getitem(log_probs, (rows, labels)))


_BY_NAME = {
    "mse": MeanSquaredError,
    "mean_squared_error": MeanSquaredError,
    "binary_crossentropy": BinaryCrossentropy,
    "categorical_crossentropy": CategoricalCrossentropy,
    "sparse_categorical_crossentropy": SparseCategoricalCrossentropy,
}


def get(identifier: Any) -> Loss:
    """A loss from an instance or a Keras name (``"mse"``, ``"sparse_categorical_crossentropy"``).

    Raises:
        ValueError: Unknown name.
    """
    if isinstance(identifier, Loss):
        return identifier
    if callable(identifier):
        fn = identifier

        class _Wrapped(Loss):
            def per_example(self, y_true: np.ndarray, y_pred: Tensor) -> Tensor:
                return as_tensor(fn(y_true, y_pred))

        return _Wrapped(name=getattr(fn, "__name__", "loss"))
    try:
        return _BY_NAME[str(identifier).lower()]()
    except KeyError:
        raise ValueError(f"unknown loss {identifier!r}; known: {sorted(_BY_NAME)}") from None
