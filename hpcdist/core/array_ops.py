"""Differentiable array operations on `Tensor`: ``concat``, ``pad`` and ``expand_dims``.

As ``tf.concat``, ``tf.pad`` (constant mode) and ``tf.expand_dims``; each computes in the array
module of its inputs (numpy or CuPy), moving host operands to the device when they meet one.
"""

from __future__ import annotations

import itertools
from typing import Any

from hpcdist.core.autodiff import record
from hpcdist.core.math_ops import same_device
from hpcdist.core.tensors import Tensor, as_tensor, is_python_data, python_array
from hpcdist.utils.xp import array_module

__all__ = ["concat", "expand_dims", "pad"]


def _tensor(x: Any) -> Tensor:
    return as_tensor(python_array(x) if is_python_data(x) else x)


def concat(values: Any, axis: int = 0) -> Tensor:
    """Join tensors of one rank and dtype along ``axis`` (``tf.concat``).

    Raises:
        ValueError: No tensor, different ranks or dtypes, or sizes that differ off ``axis``.
    """
    tensors = [_tensor(v) for v in values]
    if not tensors:
        raise ValueError("concat needs at least one tensor, got an empty list")
    for i in range(1, len(tensors)):
        tensors[0], tensors[i] = same_device(tensors[0], tensors[i])
    shapes = [t.shape for t in tensors]
    ranks = {len(s) for s in shapes}
    if len(ranks) != 1 or len({t.dtype for t in tensors}) != 1:
        raise ValueError(
            "concat needs tensors of one rank and dtype, got "
            f"{[(s, str(t.dtype)) for s, t in zip(shapes, tensors, strict=True)]}"
        )
    rank = ranks.pop()
    if not -rank <= axis < rank:
        raise ValueError(f"concat axis {axis} is out of range for tensors of rank {rank}")
    axis %= rank
    off_axis = {s[:axis] + s[axis + 1 :] for s in shapes}
    if len(off_axis) != 1:
        raise ValueError(f"concat along axis {axis} needs equal sizes off that axis, got {shapes}")
    xp = array_module(tensors[0].value)
    bounds = [0]
    for s in shapes:
        bounds.append(bounds[-1] + s[axis])

    def backward(g: Any) -> tuple[Any, ...]:
        index = [slice(None)] * rank
        out = []
        for start, stop in itertools.pairwise(bounds):
            index[axis] = slice(start, stop)
            out.append(g[tuple(index)])
        return tuple(out)

    return record(xp.concatenate([t.value for t in tensors], axis=axis), tuple(tensors), backward)


def pad(x: Any, paddings: Any, constant_values: float = 0) -> Tensor:
    """``x`` with ``paddings[i] = (before, after)`` constant entries on axis ``i`` (``tf.pad``).

    Raises:
        ValueError: Not one non-negative ``(before, after)`` pair per axis.
    """
    x = _tensor(x)
    pairs = [tuple(int(v) for v in p) for p in paddings]
    if len(pairs) != x.ndim or any(len(p) != 2 or min(p) < 0 for p in pairs):
        raise ValueError(
            f"pad needs one non-negative (before, after) pair per axis of a rank-{x.ndim} "
            f"tensor, got {paddings!r}"
        )
    xp = array_module(x.value)
    out = xp.pad(x.value, pairs, constant_values=constant_values)
    inside = tuple(slice(b, b + n) for (b, _), n in zip(pairs, x.shape, strict=True))
    return record(out, (x,), lambda g: (g[inside],))


def expand_dims(x: Any, axis: int) -> Tensor:
    """``x`` with a new axis of size 1 at ``axis`` (``tf.expand_dims``)."""
    x = _tensor(x)
    xp = array_module(x.value)
    shape = x.shape
    return record(xp.expand_dims(x.value, axis), (x,), lambda g: (g.reshape(shape),))
