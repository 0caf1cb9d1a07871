"""Gradient clipping of the optimizers: ``clipnorm``, ``clipvalue``, ``global_clipnorm`` (Keras').

Applied to the gradients an optimizer is about to apply, after they were summed over the
replicas. Sparse gradients (`IndexedSlices`) are clipped through their values.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hpcdist.core.tensors import IndexedSlices
from hpcdist.utils.xp import array_module

__all__ = ["check_clip_options", "clip_gradients"]


def check_clip_options(clipnorm: Any, clipvalue: Any, global_clipnorm: Any) -> None:
    """Keras' rule: at most one of the three.

    Raises:
        ValueError: More than one set (Keras' message).
    """
    if sum(v is not None for v in (clipnorm, clipvalue, global_clipnorm)) > 1:
        raise ValueError(
            "Only one of `clipnorm`, `clipvalue` and `global_clipnorm` can be set. Received: "
            f"clipnorm={clipnorm}, clipvalue={clipvalue}, global_clipnorm={global_clipnorm}"
        )


def _values(grad: Any) -> Any:
    return grad.values if isinstance(grad, IndexedSlices) else grad


def _with_values(grad: Any, values: Any) -> Any:
    if isinstance(grad, IndexedSlices):
        return IndexedSlices(values, grad.indices, grad.dense_shape)
    return values


def _scaled(values: Any, clip: float, norm: Any) -> Any:
    """``values * clip / max(norm, clip)`` (no change while the norm is within ``clip``)."""
    xp = array_module(values)
    return (values * clip / xp.maximum(norm, clip)).astype(values.dtype, copy=False)


def clip_gradients(
    pairs: list[tuple[Any, Any]], clipnorm: Any, clipvalue: Any, global_clipnorm: Any
) -> list[tuple[Any, Any]]:
    """``pairs`` with each gradient clipped by the one option set (all None: unchanged)."""
    if clipvalue is not None:
        v = float(clipvalue)
        return [
            (_with_values(g, array_module(_values(g)).clip(_values(g), -v, v)), var)
            for g, var in pairs
        ]
    if clipnorm is not None:
        c = float(clipnorm)
        out = []
        for g, var in pairs:
            values = _values(g)
            norm = array_module(values).sqrt((values.astype(np.float64) ** 2).sum())
            out.append((_with_values(g, _scaled(values, c, norm)), var))
        return out
    if global_clipnorm is not None:
        c = float(global_clipnorm)
        total = sum(float((_values(g).astype(np.float64) ** 2).sum()) for g, _ in pairs)
        norm = np.sqrt(total)
        return [(_with_values(g, _scaled(_values(g), c, norm)), var) for g, var in pairs]
    return pairs
