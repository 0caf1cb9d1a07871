"""Losses (Keras): per-example values, then a reduction.

Reductions: ``"auto"`` / ``"sum_over_batch_size"`` / ``"mean"`` (mean over this replica's batch,
as in Keras 3), ``"mean_with_sample_weight"`` (the weighted sum over the sum of the weights),
``"sum"`` and ``"none"``, also as `Reduction` constants (``Reduction.NONE``). Keras 3's rules
throughout: sample weights are shaped against the losses by ``squeeze_or_expand_to_same_rank``,
the mean divides by the number of weighted values, a scalar loss is returned as it is, and the
mean is divided by the current strategy's ``num_replicas_in_sync`` (so the gradients that
replicas sum are those of the global mean, also in a custom loop that never calls
`compute_average_loss`). `Model.fit` turns per-example losses into the global-batch mean itself
(`hpcdist.nn.compute_average_loss`). Probabilities are clipped to ``[1e-7, 1 - 1e-7]`` before
their logarithm (no gradient flows through a clipped value), as Keras does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hpcdist.core import context
from hpcdist.core import math_ops as ops
from hpcdist.core.tensors import Tensor, as_tensor
from hpcdist.nn.activations import logits_of
from hpcdist.utils.xp import array_module, as_array_like

__all__ = [
    "BinaryCrossentropy",
    "CategoricalCrossentropy",
    "Loss",
    "MeanSquaredError",
    "Reduction",
    "SparseCategoricalCrossentropy",
    "as_loss",
    "binary_crossentropy",
    "categorical_crossentropy",
    "get",
    "mean_squared_error",
    "sparse_categorical_crossentropy",
]


class Reduction:
    """The reduction names as constants (``tf.keras.losses.Reduction``)."""

    AUTO = "auto"
    NONE = "none"
    SUM = "sum"
    SUM_OVER_BATCH_SIZE = "sum_over_batch_size"
    MEAN = "mean"
    MEAN_WITH_SAMPLE_WEIGHT = "mean_with_sample_weight"

    @classmethod
    def all(cls) -> tuple[str, ...]:
        """Every reduction."""
        return (
            cls.AUTO,
            cls.NONE,
            cls.SUM,
            cls.SUM_OVER_BATCH_SIZE,
            cls.MEAN,
            cls.MEAN_WITH_SAMPLE_WEIGHT,
        )


_REDUCTIONS = ("auto", "sum_over_batch_size", "mean", "mean_with_sample_weight", "sum", "none")
_EPS = 1e-7


class Loss:
    """Base class: ``loss(y_true, y_pred, sample_weight=None)``.

    Args:
        reduction: ``"auto"``, ``"sum_over_batch_size"``, ``"mean"``,
            ``"mean_with_sample_weight"``, ``"sum"`` or ``"none"`` (also ``None``, as in Keras 3).
        name: Name.

    Raises:
        ValueError: Unknown reduction.
    """

    def __init__(self, reduction: str | None = "auto", name: str | None = None) -> None:
        if reduction is None:  # Keras 3: None means no reduction
            reduction = "none"
        if reduction not in _REDUCTIONS:
            raise ValueError(f"reduction must be one of {_REDUCTIONS}, got {reduction!r}")
        self.reduction = reduction
        self.name = name or type(self).__name__

    def per_example(self, y_true: np.ndarray, y_pred: Tensor) -> Tensor:
        """Loss of each example, shape ``(batch,)`` (override)."""
        raise NotImplementedError

    def values(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> Tensor:
        """The unreduced, weighted losses (what ``reduction="none"`` returns)."""
        return self._weighted(y_true, y_pred, sample_weight)[0]

    def _weighted(self, y_true: Any, y_pred: Any, sample_weight: Any) -> tuple[Tensor, Any]:
        """The weighted losses and the weights as shaped against them (None without)."""
        y_pred = as_tensor(y_pred)
        # Targets join the predictions' array module (a host batch moves to the GPU here).
        y_true = as_array_like(y_true.value if isinstance(y_true, Tensor) else y_true, y_pred.value)
        losses = self.per_example(y_true, y_pred)
        if sample_weight is None:
            return losses, None
        weights = as_array_like(sample_weight, losses.value, losses.dtype)
        losses, weights = _squeeze_or_expand(losses, weights)
        return ops.multiply(losses, weights), weights

    def __call__(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> Tensor:
        """Reduced (or per-example, with ``"none"``) loss."""
        losses, weights = self._weighted(y_true, y_pred, sample_weight)
        if self.reduction == "none" or losses.shape in ((), (0,)):
            return losses
        total = ops.reduce_sum(losses)
        if self.reduction == "sum":
            return total
        if self.reduction == "mean_with_sample_weight" and weights is not None:
            divisor = float(weights.sum())
        else:
            divisor = float(losses.value.size)
        # Keras divides "no nan": a zero divisor gives 0
        mean = ops.divide(total, divisor) if divisor else ops.multiply(total, 0.0)
        replicas = context.get_strategy().num_replicas_in_sync
        return ops.multiply(mean, 1.0 / replicas) if replicas > 1 else mean


def _squeeze_or_expand(losses: Tensor, weights: Any) -> tuple[Tensor, Any]:
    """Keras' ``squeeze_or_expand_to_same_rank``: a trailing axis of 1 joins the other side."""
    if weights.ndim == losses.ndim + 1 and weights.shape[-1] == 1:
        if losses.ndim == 1:
            return ops.reshape(losses, (*losses.shape, 1)), weights
        return losses, weights[..., 0]
    if losses.ndim == weights.ndim + 1 and losses.shape[-1] == 1:
        if weights.ndim == 1:
            return losses, weights[..., None]
        return ops.reshape(losses, losses.shape[:-1]), weights
    return losses, weights


def _clip_probabilities(p: Tensor) -> Tensor:
    """``p`` in ``[1e-7, 1 - 1e-7]`` (Keras' ``clip_by_value`` before a logarithm)."""
    return ops.clip_by_value(p, _EPS, 1.0 - _EPS)


def _mean_last(x: Tensor) -> Tensor:
    """Mean over the last axis (Keras: 1-D targets and predictions are one sample)."""
    return ops.reduce_mean(x, axis=-1) if x.ndim >= 1 else x


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
            p = _clip_probabilities(y_pred)
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
        return self._log_of_probabilities(y_pred)

    def _log_of_probabilities(self, p: Tensor) -> Tensor:
        """Keras: normalized over the classes, clipped, then the logarithm."""
        total = ops.reduce_sum(p, axis=-1, keepdims=True)
        return ops.log(_clip_probabilities(ops.divide(p, total)))

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

    def _log_of_probabilities(self, p: Tensor) -> Tensor:
        """Keras: the clipped probabilities' logarithms are the logits of a softmax."""
        return ops.log_softmax(ops.log(_clip_probabilities(p)), axis=-1)

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


def mean_squared_error(y_true: Any, y_pred: Any) -> Tensor:
    """Per-sample mean squared error (``keras.losses.mean_squared_error``)."""
    return MeanSquaredError(reduction="none")(y_true, y_pred)


def binary_crossentropy(
    y_true: Any, y_pred: Any, from_logits: bool = False, label_smoothing: float = 0.0
) -> Tensor:
    """Per-sample binary cross-entropy (``keras.losses.binary_crossentropy``)."""
    loss = BinaryCrossentropy(from_logits, label_smoothing, reduction="none")
    return loss(y_true, y_pred)


def categorical_crossentropy(
    y_true: Any, y_pred: Any, from_logits: bool = False, label_smoothing: float = 0.0
) -> Tensor:
    """Per-sample categorical cross-entropy (``keras.losses.categorical_crossentropy``)."""
    loss = CategoricalCrossentropy(from_logits, label_smoothing, reduction="none")
    return loss(y_true, y_pred)


def sparse_categorical_crossentropy(y_true: Any, y_pred: Any, from_logits: bool = False) -> Tensor:
    """Per-sample cross-entropy of integer labels (Keras' function of that name)."""
    return SparseCategoricalCrossentropy(from_logits, reduction="none")(y_true, y_pred)


# Keras names: functions (per-sample values) and classes.
_FUNCTIONS = {
    "mse": mean_squared_error,
    "MSE": mean_squared_error,
    "mean_squared_error": mean_squared_error,
    "binary_crossentropy": binary_crossentropy,
    "categorical_crossentropy": categorical_crossentropy,
    "sparse_categorical_crossentropy": sparse_categorical_crossentropy,
}
_CLASSES = {
    cls.__name__: cls
    for cls in (
        MeanSquaredError,
        BinaryCrossentropy,
        CategoricalCrossentropy,
        SparseCategoricalCrossentropy,
    )
}
# For `Model.compile`: a name becomes the class whose per-example values the function gives.
_FUNCTION_CLASSES = {
    mean_squared_error: MeanSquaredError,
    binary_crossentropy: BinaryCrossentropy,
    categorical_crossentropy: CategoricalCrossentropy,
    sparse_categorical_crossentropy: SparseCategoricalCrossentropy,
}


def get(identifier: Any) -> Any:
    """Keras' ``losses.get``: a function name gives the function, a class name an instance.

    ``get("mse")`` is `mean_squared_error` (per-sample values), ``get("MeanSquaredError")``
    a `MeanSquaredError`; a callable is returned as it is.

    Raises:
        ValueError: Unknown name.
    """
    if identifier is None or isinstance(identifier, Loss) or callable(identifier):
        return identifier
    name = str(identifier)
    if name in _FUNCTIONS:
        return _FUNCTIONS[name]
    if name in _CLASSES:
        return _CLASSES[name]()
    known = sorted([*_FUNCTIONS, *_CLASSES])
    raise ValueError(f"unknown loss {identifier!r}; known: {known}")


def as_loss(identifier: Any) -> Loss:
    """A `Loss` for ``Model.compile``: an instance, a Keras name or a per-sample function.

    Raises:
        ValueError: Unknown name.
    """
    found = get(identifier)
    if isinstance(found, Loss):
        return found
    if found in _FUNCTION_CLASSES:
        return _FUNCTION_CLASSES[found]()
    fn = found

    class _Wrapped(Loss):
        def per_example(self, y_true: np.ndarray, y_pred: Tensor) -> Tensor:
            return as_tensor(fn(y_true, y_pred))

    return _Wrapped(name=getattr(fn, "__name__", "loss"))
