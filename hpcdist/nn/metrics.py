"""Metrics (Keras) with sync-on-read SUM state.

Each replica accumulates its own copy; `result()` in cross-replica context sums the copies over
all replicas (a collective under MPI), so every example is counted exactly once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from hpcdist.core import context
from hpcdist.core.tensors import Tensor
from hpcdist.core.variables import VariableAggregation, VariableSynchronization
from hpcdist.nn.scalars import ScalarValue
from hpcdist.utils.xp import to_numpy

__all__ = [
    "Accuracy",
    "BinaryAccuracy",
    "CategoricalAccuracy",
    "Mean",
    "MeanAbsoluteError",
    "MeanSquaredError",
    "Metric",
    "SparseCategoricalAccuracy",
    "Sum",
    "get",
]


def _array(x: Any) -> np.ndarray:
    """Metrics accumulate on the host: device values are copied back here."""
    return np.asarray(to_numpy(x.value if isinstance(x, Tensor) else x))


def _same_rank(values: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Keras' ``squeeze_or_expand_to_same_rank``: absorb one trailing axis of size 1."""
    if values.ndim == w.ndim + 1 and values.shape[-1] == 1:
        if w.ndim == 1:
            w = w[:, None]
        else:
            values = values[..., 0]
    if w.ndim == values.ndim + 1 and w.shape[-1] == 1:
        if values.ndim == 1:
            values = values[:, None]
        else:
            w = w[..., 0]
    return values, w


class Metric:
    """Base class: ``total`` and ``count`` state, ``result = total / count``.

    Args:
        name: Name.
    """

    def __init__(self, name: str | None = None) -> None:
        self.name = name or "".join(
            "_" + c.lower() if c.isupper() else c for c in type(self).__name__
        ).lstrip("_")
        strategy = context.get_strategy()
        make = lambda n: strategy.Variable(  # noqa: E731
            np.float64(0),
            name=f"{self.name}/{n}",
            trainable=False,
            synchronization=VariableSynchronization.ON_READ,
            aggregation=VariableAggregation.SUM,
        )
        self.total, self.count = make("total"), make("count")

    def _accumulate(
        self, values: np.ndarray, sample_weight: Any, reduce: Callable[..., Any] = np.mean
    ) -> None:
        """Add ``values`` per sample, as Keras' ``reduce_to_samplewise_values``.

        Each example's values are reduced (``reduce``) to one per-sample value; a weight is per
        sample (``[batch]``), per value (``[batch, ...]``) or for the whole batch (a scalar).
        ``count`` grows by the sum of the per-sample weights (or the number of samples).

        Raises:
            ValueError: ``sample_weight`` does not broadcast to the per-sample values.
        """
        values = np.asarray(values, dtype=np.float64)
        if sample_weight is None:
            samples = values.shape[0] if values.ndim else 1
            if values.ndim > 1:
                values = reduce(values, axis=tuple(range(1, values.ndim)))
            self.total.assign_add(float(values.sum()), read_value=False)
            self.count.assign_add(float(samples), read_value=False)
            return
        w = _array(sample_weight).astype(np.float64)
        values, w = _same_rank(values, w)
        if values.ndim > w.ndim:
            values = reduce(values, axis=tuple(range(w.ndim, values.ndim)))
        try:
            w = np.broadcast_to(w, values.shape)
        except ValueError:
            raise ValueError(
                f"{self.name}: sample_weight of shape {w.shape} must broadcast per sample to "
                f"the values of shape {values.shape}"
            ) from None
        values = values * w
        if w.ndim > 1:
            values = reduce(values, axis=tuple(range(1, values.ndim)))
            w = reduce(w, axis=tuple(range(1, w.ndim)))
        self.total.assign_add(float(values.sum()), read_value=False)
        self.count.assign_add(float(w.sum()), read_value=False)

    def update_state(self, *args: Any, sample_weight: Any = None) -> None:
        """Accumulate (override)."""
        raise NotImplementedError

    def result(self) -> ScalarValue:
        """``total / count`` over every replica (0 before any update); has ``numpy()``."""
        total, count = float(self.total.numpy()), float(self.count.numpy())
        return ScalarValue(total / count if count else 0.0)

    def __call__(self, *args: Any, **kwargs: Any) -> ScalarValue:
        """`update_state` with these arguments, then `result` (Keras' metric call)."""
        self.update_state(*args, **kwargs)
        return self.result()

    def reset_state(self) -> None:
        """Zero the state (cross-replica context)."""
        self.total.assign(0.0, read_value=False)
        self.count.assign(0.0, read_value=False)

    @property
    def variables(self) -> list[Any]:
        """The state variables."""
        return [self.total, self.count]

    def checkpoint_children(self) -> dict[str, Any]:
        """The state variables as ``state/<i>`` in `variables` order.

        The checkpoint protocol (`hpcdist.core.trackable.Trackable`).
        """
        return {f"state/{i}": v for i, v in enumerate(self.variables)}


class Mean(Metric):
    """The (weighted) mean of the values passed to `update_state`."""

    def update_state(self, values: Any, sample_weight: Any = None) -> None:
        """Add values."""
        self._accumulate(_array(values), sample_weight)


class Sum(Metric):
    """The (weighted) sum of the values passed to `update_state`."""

    def update_state(self, values: Any, sample_weight: Any = None) -> None:
        """Add values."""
        self._accumulate(_array(values), sample_weight, reduce=np.sum)

    def result(self) -> ScalarValue:
        """The sum."""
        return ScalarValue(self.total.numpy())


class Accuracy(Metric):
    """Fraction of predictions equal to the targets."""

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        """Compare element-wise."""
        t, p = _array(y_true), _array(y_pred)
        self._accumulate((t.reshape(p.shape) == p).astype(np.float64), sample_weight)


class BinaryAccuracy(Metric):
    """Fraction of ``(y_pred > threshold) == y_true``."""

    def __init__(self, name: str | None = None, threshold: float = 0.5) -> None:
        super().__init__(name)
        self.threshold = threshold

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        """Threshold, then compare."""
        p = _array(y_pred) > self.threshold
        t = _array(y_true).reshape(p.shape) > 0.5
        self._accumulate(p == t, sample_weight)  # per element: weights may be too (Keras)


class CategoricalAccuracy(Metric):
    """Fraction where ``argmax(y_pred) == argmax(y_true)``."""

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        """Compare arg-maxes."""
        self._accumulate(_array(y_pred).argmax(-1) == _array(y_true).argmax(-1), sample_weight)


class SparseCategoricalAccuracy(Metric):
    """Fraction where ``argmax(y_pred) == y_true`` (integer labels)."""

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        """Compare the arg-max with the label."""
        p = _array(y_pred)
        t = _array(y_true).reshape(-1)
        classes = p.shape[-1] if p.ndim > 1 else 1
        self._accumulate(p.reshape(len(t), classes).argmax(-1) == t, sample_weight)


class MeanSquaredError(Metric):
    """Mean of ``(y_true - y_pred) ** 2`` per example."""

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        """Squared error averaged over the last axis."""
        self._accumulate(_per_example(np.square(_errors(y_true, y_pred))), sample_weight)


class MeanAbsoluteError(Metric):
    """Mean of ``|y_true - y_pred|`` per example."""

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        """Absolute error averaged over the last axis."""
        self._accumulate(_per_example(np.abs(_errors(y_true, y_pred))), sample_weight)


def _errors(y_true: Any, y_pred: Any) -> np.ndarray:
    p = _array(y_pred)
    return p - _array(y_true).reshape(p.shape)


def _per_example(err: np.ndarray) -> np.ndarray:
    return err.mean(axis=-1) if err.ndim > 1 else err


_BY_NAME = {
    "accuracy": Accuracy,
    "acc": Accuracy,
    "binary_accuracy": BinaryAccuracy,
    "categorical_accuracy": CategoricalAccuracy,
    "sparse_categorical_accuracy": SparseCategoricalAccuracy,
    "mse": MeanSquaredError,
    "mean_squared_error": MeanSquaredError,
    "mae": MeanAbsoluteError,
    "mean_absolute_error": MeanAbsoluteError,
}


def get(identifier: Any, loss: Any = None) -> Metric:
    """A metric from an instance or a name. ``"accuracy"`` picks the accuracy matching ``loss``.

    Raises:
        ValueError: Unknown name.
    """
    if isinstance(identifier, Metric):
        return identifier
    name = str(identifier).lower()
    if name in ("accuracy", "acc") and loss is not None:
        loss_name = type(loss).__name__
        if loss_name == "SparseCategoricalCrossentropy":
            return SparseCategoricalAccuracy(name="accuracy")
        if loss_name == "CategoricalCrossentropy":
            return CategoricalAccuracy(name="accuracy")
        if loss_name == "BinaryCrossentropy":
            return BinaryAccuracy(name="accuracy")
    try:
        return _BY_NAME[name](name=name)
    except KeyError:
        raise ValueError(f"unknown metric {identifier!r}; known: {sorted(_BY_NAME)}") from None
