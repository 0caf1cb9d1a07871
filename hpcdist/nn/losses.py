"""Losses (Keras): per-example values, then a reduction.

Reductions: ``"auto"`` / ``"sum_over_batch_size"`` (mean over this replica's batch, as in Keras
3), ``"sum"`` and ``"none"``, also as `Reduction` constants (``Reduction.NONE``). Under a
strategy, `Model.fit` turns per-example losses into the global-batch mean itself
(`hpcdist.nn.compute_average_loss`); in a custom loop use ``reduction="none"`` and
`compute_average_loss`, as TF recommends.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hpcdist.core import math_ops as ops
from hpcdist.core.autodiff import Tensor, as_tensor
from hpcdist.nn.activations import logits_of
from hpcdist.utils.xp import array_module, as_array_like

__all__ = [
    "BinaryCrossentropy",
    "CategoricalCrossentropy",
    "Loss",
    "MeanSquaredError",
    "Reduction",
    "SparseCategoricalCrossentropy",
    "get",
]


class Reduction:
    """The reduction names as constants (``tf.keras.losses.Reduction``)."""

    AUTO = "auto"
    NONE = "none"
    SUM = "sum"
    SUM_OVER_BATCH_SIZE = "sum_over_batch_size"

    @classmethod
    def all(cls) -> tuple[str, ...]:
        """Every reduction."""
        return (cls.AUTO, cls.NONE, cls.SUM, cls.SUM_OVER_BATCH_SIZE)


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

    def __init__(self, reduction: str | None = "auto", name: str | None = None) -> None:
        if reduction is None:
            reduction = "auto"
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


def _same_rank(y_true: Any, y_pred: Tensor, name: str) -> Any:
    """Targets shaped against the predictions as Keras does, then broadcast.

    Keras' ``squeeze_or_expand_to_same_rank``: a trailing axis of size 1 on either side is
    absorbed; otherwise the two broadcast by numpy's rules (so ``(n,)`` targets against
    ``(n, 10)`` predictions pair along the last axis, which works only for ``n`` of 1 or 10,
    exactly as in Keras).

    Raises:
        ValueError: The shapes do not broadcast.
    """
    y_true = y_true.astype(y_pred.dtype, copy=False)
    if y_true.ndim == y_pred.ndim + 1 and y_true.shape[-1] == 1:
        y_true = y_true[..., 0]
    elif y_pred.ndim == y_true.ndim + 1 and y_pred.shape[-1] == 1:
        y_true = y_true[..., None]
    try:
        np.broadcast_shapes(y_true.shape, y_pred.shape)
    except ValueError:
        raise ValueError(
            f"{name}: targets of shape {y_true.shape} do not broadcast to predictions of "
            f"shape {y_pred.shape}"
        ) from None
    return y_true


class MeanSquaredError(Loss):
    """Mean over the last axis of ``(y_true - y_pred) ** 2``."""

    def per_example(self, y_true: np.ndarray, y_pred: Tensor) -> Tensor:
        """Squared error averaged over the last axis."""
        diff = ops.subtract(y_pred, _same_rank(y_true, y_pred, self.name))
        return _mean_last(ops.square(diff))


class BinaryCrossentropy(Loss):
    """Cross-entropy of 0/1 targets; ``from_logits`` takes scores instead of probabilities.

    ``label_smoothing`` moves targets towards 0.5: ``y * (1 - s) + 0.5 * s`` (Keras).
    """

    def __init__(self, from_logits: bool = False, label_smoothing: float = 0.0, **kwargs: Any):
        super().__init__(**kwargs)
        self.from_logits = from_logits
        self.label_smoothing = float(label_smoothing)

    def per_example(self, y_true: np.ndarray, y_pred: Tensor) -> Tensor:
        """Mean over the last axis of the element-wise cross-entropy."""
        y = _same_rank(y_true, y_pred, self.name)
        if self.label_smoothing:
            y = y * (1.0 - self.label_smoothing) + 0.5 * self.label_smoothing
        logits = None if self.from_logits else logits_of(y_pred)
        if logits is not None:  # a sigmoid's output: compute from its input (Keras)
            y_pred = logits
        if self.from_logits or logits is not None:
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
    """Cross-entropy of one-hot targets over the last axis.

    ``label_smoothing`` spreads part of each target over the classes:
    ``y * (1 - s) + s / classes`` (Keras).
    """

    def __init__(self, from_logits: bool = False, label_smoothing: float = 0.0, **kwargs: Any):
        super().__init__(**kwargs)
        self.from_logits = from_logits
        self.label_smoothing = float(label_smoothing)

    def _log_probs(self, y_pred: Tensor) -> Tensor:
        logits = None if self.from_logits else logits_of(y_pred)
        if self.from_logits or logits is not None:  # a softmax's output: from its input
            return ops.log_softmax(y_pred if logits is None else logits, axis=-1)
        total = ops.reduce_sum(y_pred, axis=-1, keepdims=True)
        return ops.log(ops.add(ops.divide(y_pred, total), _EPS))

    def per_example(self, y_true: np.ndarray, y_pred: Tensor) -> Tensor:
        """``-sum(y_true * log p)``."""
        y = y_true.astype(y_pred.dtype)
        if self.label_smoothing:
            s = self.label_smoothing
            y = y * (1.0 - s) + s / y_pred.shape[-1]
        return ops.negative(ops.reduce_sum(ops.multiply(self._log_probs(y_pred), y), axis=-1))


class SparseCategoricalCrossentropy(CategoricalCrossentropy):
    """Cross-entropy of integer class targets (no label smoothing, as in Keras)."""

    def __init__(self, from_logits: bool = False, **kwargs: Any) -> None:
        Loss.__init__(self, **kwargs)  # reduction and name only: no label_smoothing
        self.from_logits = from_logits

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
