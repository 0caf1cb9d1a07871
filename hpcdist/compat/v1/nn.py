"""``tf.nn`` of the TF1 layer: the differentiable activations and losses of hpcdist."""

from __future__ import annotations

from typing import Any

from hpcdist.core import math_ops
from hpcdist.core.math_ops import log_softmax, relu, sigmoid, softmax, softplus, tanh
from hpcdist.nn.embedding import embedding_lookup

__all__ = [
    "embedding_lookup",
    "l2_loss",
    "log_softmax",
    "relu",
    "sigmoid",
    "sigmoid_cross_entropy_with_logits",
    "softmax",
    "softplus",
    "tanh",
]


def l2_loss(t: Any) -> Any:
    """``sum(t ** 2) / 2``."""
    return math_ops.multiply(math_ops.reduce_sum(math_ops.square(t)), 0.5)


def sigmoid_cross_entropy_with_logits(labels: Any = None, logits: Any = None) -> Any:
    """``max(x, 0) - x * z + log(1 + exp(-|x|))`` element-wise (TF's stable form)."""
    x, z = logits, labels
    return math_ops.add(
        math_ops.subtract(math_ops.maximum(x, 0.0), math_ops.multiply(x, z)),
        math_ops.softplus(math_ops.negative(math_ops.abs(x))),
    )
