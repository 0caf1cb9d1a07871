"""``tf.gather`` of the TF1 layer: rows of a variable, with TF's sparse gradient.

In TF the gradient of ``tf.gather(variable, ids)`` is an ``IndexedSlices`` over the rows
gathered, so the optimizers' sparse updates move only those rows (``MomentumOptimizer`` leaves
the others' accumulators and values alone). Gathering rows of a TF1 `Variable` along axis 0
reads only the rows used (`Variable.sparse_read`) and gives that gradient; other arrays and
tensors fall back to a dense gather.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hpcdist.compat.v1.variables import Variable
from hpcdist.core import math_ops
from hpcdist.core.tensors import Tensor, as_tensor
from hpcdist.errors import InvalidArgumentError
from hpcdist.nn.embedding import embedding_lookup

__all__ = ["gather"]


def gather(
    params: Any,
    indices: Any,
    validate_indices: Any = None,
    name: str | None = None,
    axis: int | None = None,
    batch_dims: int = 0,
) -> Tensor:
    """``tf.gather(params, indices)``: ``params[indices]`` along axis 0.

    Args:
        params: A variable, tensor or array.
        indices: Integer row ids (any shape).
        validate_indices: Accepted (ids are always checked).
        name: Accepted.
        axis: 0 or None.
        batch_dims: 0.

    Raises:
        NotImplementedError: ``axis`` other than 0, or ``batch_dims`` other than 0.
        InvalidArgumentError: An id is not a row of ``params`` (TF's CPU kernel's error).
        TypeError: ``indices`` are not integers.
    """
    del validate_indices, name
    if axis not in (None, 0) or batch_dims != 0:
        raise NotImplementedError(
            f"tf.gather supports axis=0 and batch_dims=0 here, got axis={axis}, "
            f"batch_dims={batch_dims}"
        )
    ids = as_tensor(indices).value  # a placeholder gives its fed ids
    shape = getattr(params, "shape", None) or np.shape(params)
    rows = shape[0] if len(shape) else 0
    flat = np.asarray(ids).reshape(-1)
    bad = np.flatnonzero((flat < 0) | (flat >= rows)) if flat.dtype.kind in "iu" else []
    if len(bad):
        raise InvalidArgumentError(
            f"indices[{bad[0]}] = {flat[bad[0]]} is not in [0, {rows}) (tf.gather of "
            f"{getattr(params, 'name', 'a tensor')})"
        )
    if isinstance(params, Variable):
        return embedding_lookup(params, ids)
    return math_ops.gather(params, ids)
