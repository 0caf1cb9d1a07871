"""Activations by Keras name (``tf.keras.activations``).

`sigmoid` and `softmax` remember their input: a `LogitsTensor` carries the logits, and the
cross-entropy losses given such a tensor with ``from_logits=False`` compute from the logits
instead (Keras' ``_keras_logits``), which keeps a useful gradient where the probability
saturates.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hpcdist.core import math_ops as ops
from hpcdist.core import special_ops
from hpcdist.core.tensors import Tensor, as_tensor

__all__ = [
    "LogitsTensor",
    "exponential",
    "gelu",
    "get",
    "linear",
    "logits_of",
    "relu",
    "sigmoid",
    "silu",
    "softmax",
    "softplus",
    "swish",
    "tanh",
]


class LogitsTensor(Tensor):
    """The output of `sigmoid` or `softmax`, remembering the logits it was computed from."""

    __slots__ = ("keras_logits",)

    def __init__(self, out: Tensor, logits: Tensor) -> None:
        super().__init__(out.value, out.parents, out.backward, out.source)
        self.trace = out.trace
        self.keras_logits = logits


def logits_of(x: Any) -> Tensor | None:
    """The logits behind ``x`` when it is the direct output of `sigmoid` or `softmax`."""
    return x.keras_logits if isinstance(x, LogitsTensor) else None


def linear(x: Any) -> Tensor:
    """Identity."""
    return as_tensor(x)


def relu(x: Any) -> Tensor:
    """``max(x, 0)``."""
    return ops.relu(x)


def tanh(x: Any) -> Tensor:
    """Hyperbolic tangent."""
    return ops.tanh(x)


def softplus(x: Any) -> Tensor:
    """``log(1 + exp(x))``."""
    return ops.softplus(x)


def exponential(x: Any) -> Tensor:
    """``exp(x)``."""
    return ops.exp(x)


def gelu(x: Any, approximate: bool = False) -> Tensor:
    """Gaussian error linear unit, ``x * Phi(x)``; exact (erf) by default, as Keras 3.

    ``approximate=True`` uses the tanh form (`hpcdist.core.special_ops.gelu`).
    """
    return special_ops.gelu(x, approximate=approximate)


def silu(x: Any) -> Tensor:
    """``x * sigmoid(x)`` (Keras' ``silu``, also called ``swish``)."""
    return special_ops.silu(x)


swish = silu


def sigmoid(x: Any) -> LogitsTensor:
    """Logistic sigmoid; the result remembers ``x``."""
    x = as_tensor(x)
    return LogitsTensor(ops.sigmoid(x), x)


def softmax(x: Any, axis: int = -1) -> LogitsTensor:
    """Softmax along ``axis``; the result remembers ``x``."""
    x = as_tensor(x)
    return LogitsTensor(ops.softmax(x, axis=axis), x)


_BY_NAME: dict[str, Callable[[Any], Tensor]] = {
    "linear": linear,
    "relu": relu,
    "sigmoid": sigmoid,
    "tanh": tanh,
    "softmax": softmax,
    "softplus": softplus,
    "exponential": exponential,
    "gelu": gelu,
    "silu": silu,
    "swish": swish,
}


def get(identifier: Any) -> Callable[[Any], Tensor]:
    """An activation from None, a name or a callable.

    Raises:
        ValueError: Unknown name.
    """
    if identifier is None:
        return linear
    if callable(identifier):
        return identifier
    try:
        return _BY_NAME[str(identifier).lower()]
    except KeyError:
        raise ValueError(f"unknown activation {identifier!r}; known: {sorted(_BY_NAME)}") from None


def name_of(fn: Callable[[Any], Tensor]) -> str | None:
    """The Keras name of a built-in activation (None for another callable)."""
    return next((name for name, f in _BY_NAME.items() if f is fn), None)
