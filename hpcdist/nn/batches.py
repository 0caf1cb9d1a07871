"""Batches that carry their row count: ``(x, y, rows)``, what the training steps consume.

Each step divides its replica's loss by the global batch size, so every batch travels with it
(``rows``: one entry per example, each the batch's size, so it splits across replicas with the
examples).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hpcdist.data.dataset import Dataset
from hpcdist.data.nest import flatten

__all__ = ["with_batch_rows"]


def with_batch_rows(dataset: Dataset, y: Any = None) -> Dataset:
    """A dataset of batches ``(x, y)`` or ``x`` as ``(x, y, rows)``: each row's batch size.

    Raises:
        ValueError: ``y`` is given (a dataset carries its targets).
    """
    if y is not None:
        raise ValueError("y must be None when x is a Dataset (yield (x, y) pairs)")
    return dataset.map(_add_rows)


def _add_rows(*element: Any) -> tuple[Any, Any, np.ndarray]:
    parts = element if len(element) > 1 else (element[0], None)
    rows = np.shape(flatten(parts[0])[0])[0]
    return (*parts[:2], np.full(rows, rows, np.int64))
