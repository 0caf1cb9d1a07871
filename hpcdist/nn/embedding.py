"""`embedding_lookup`: rows of a table, reading (and differentiating) only the rows used."""

from __future__ import annotations

from typing import Any

import numpy as np

from hpcdist.core import math_ops as ops
from hpcdist.core.autodiff import variable_accessed
from hpcdist.core.tensors import Tensor
from hpcdist.utils.rows import unique_inverse

__all__ = ["embedding_lookup"]


def embedding_lookup(params: Any, ids: Any) -> Tensor:
    """Rows of ``params`` at integer ``ids`` (any shape): ``params[ids]``.

    For a table with ``sparse_read`` (`hpcdist.ShardedVariable` or a parameter-server variable)
    only the distinct rows in ``ids`` are read, and under a `GradientTape` its gradient is an
    `hpcdist.core.autodiff.IndexedSlices` over those rows, which optimizers apply with
    ``scatter_add``: an embedding table larger than one process's memory trains by moving only
    the rows a batch touches. Other arrays and variables fall back to a dense gather.

    Raises:
        TypeError: ``ids`` are not integers.
        ValueError: An id is out of range.
    """
    ids = np.asarray(ids.value if isinstance(ids, Tensor) else ids)
    if not hasattr(params, "sparse_read"):
        return ops.gather(params, ids)
    if ids.dtype.kind not in "iu":
        raise TypeError(f"embedding_lookup needs integer ids, got dtype {ids.dtype}")
    unique, inverse = unique_inverse(ids.reshape(-1))
    rows = params.sparse_read(unique)
    leaf = variable_accessed(params, rows, unique)
    return ops.gather(leaf, inverse.reshape(ids.shape))
