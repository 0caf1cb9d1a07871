"""Weight regularizers (Keras): a penalty added to the loss through ``model.losses``."""

from __future__ import annotations

from typing import Any

from hpcdist.core import math_ops as ops
from hpcdist.core.tensors import Tensor

__all__ = ["L1", "L1L2", "L2", "Regularizer", "get"]


class Regularizer:
    """Base class: ``regularizer(weight) -> scalar Tensor``."""

    def __call__(self, x: Any) -> Tensor:
        """The penalty of weight ``x``."""
        raise NotImplementedError


class L1L2(Regularizer):
    """``l1 * sum(|x|) + l2 * sum(x**2)``.

    The L1 term's gradient is ``l1 * sign(x)``: 0 where a weight is exactly 0, as in Keras.
    """

    def __init__(self, l1: float = 0.0, l2: float = 0.0) -> None:
        self.l1, self.l2 = float(l1), float(l2)

    def __call__(self, x: Any) -> Tensor:
        """``l1 * sum(|x|) + l2 * sum(x**2)``."""
        penalty = ops.multiply(0.0, ops.reduce_sum(x))
        if self.l1:
            penalty = penalty + self.l1 * ops.reduce_sum(ops.abs(x))
        if self.l2:
            penalty = penalty + self.l2 * ops.reduce_sum(ops.square(x))
        return penalty

    def __repr__(self) -> str:
        return f"{type(self).__name__}(l1={self.l1}, l2={self.l2})"


class L1(L1L2):
    """``l1 * sum(|x|)`` (Keras' default factor 0.01)."""

    def __init__(self, l1: float = 0.01) -> None:
        super().__init__(l1=l1)


class L2(L1L2):
    """``l2 * sum(x**2)`` (Keras' default factor 0.01)."""

    def __init__(self, l2: float = 0.01) -> None:
        super().__init__(l2=l2)


def get(identifier: Any) -> Regularizer | None:
    """A regularizer from None, an instance, ``"l1"``/``"l2"``/``"l1_l2"`` or a callable."""
    if identifier is None or isinstance(identifier, Regularizer) or callable(identifier):
        return identifier
    names = {"l1": L1, "l2": L2, "l1_l2": lambda: L1L2(0.01, 0.01)}
    try:
        return names[str(identifier).lower()]()
    except KeyError:
        raise ValueError(f"unknown regularizer {identifier!r}; known: {sorted(names)}") from None
