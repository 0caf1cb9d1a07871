"""``tf.nn`` of the TF1 layer: the differentiable activations and losses of hpcdist."""

from __future__ import annotations

from typing import Any

from hpcdist.compat.v1.array_ops import gather
from hpcdist.core import math_ops
from hpcdist.core.math_ops import log_softmax, relu, sigmoid, softmax, softplus, tanh

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


def embedding_lookup(params: Any, ids: Any, partition_strategy: str = "mod", **kwargs: Any) -> Any:
    """``tf.nn.embedding_lookup`` of one table: `tf.gather` of its rows (a sparse gradient).

    Raises:
        NotImplementedError: ``params`` is a list of tables (a partitioned table).
    """
    del partition_strategy, kwargs
    if isinstance(params, list | tuple):
        if len(params) != 1:
            raise NotImplementedError(
                f"embedding_lookup of a list of {len(params)} tables (partitioned) is not "
                "supported here: pass one table"
            )
        params = params[0]
    return gather(params, ids)


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
