"""Batches that carry their row count: ``(x, y, rows)``, what the training steps consume.

Each step divides its replica's loss by the global batch size, so every batch travels with it
(``rows``: one entry per example, each the batch's size, so it splits across replicas with the
examples).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from hpcdist.data.dataset import Dataset
from hpcdist.data.nest import flatten

__all__ = ["array_batches", "check_input", "with_batch_rows"]


def with_batch_rows(dataset: Dataset, y: Any = None) -> Dataset:
    """A dataset of batches ``(x, y)`` or ``x`` as ``(x, y, rows)``: each row's batch size.

    Raises:
        ValueError: ``y`` is given (a dataset carries its targets).
    """
    if y is not None:
        raise ValueError("y must be None when x is a Dataset (yield (x, y) pairs)")
    return dataset.map(_add_rows)


def _add_rows(*element: Any) -> tuple[Any, ...]:
    parts = element if len(element) > 1 else (element[0], None)
    rows = np.shape(flatten(parts[0])[0])[0]
    # (x, y, w) batches keep their sample weights after the rows (Keras' 3-tuples).
    return (*parts[:2], np.full(rows, rows, np.int64), *parts[2:3])


def check_input(x: Any, batch_size: Any, what: str, allow_empty: bool = False) -> None:
    """Reject a ``batch_size`` that is not a positive int, and (unless allowed) empty ``x``.

    Raises:
        ValueError: The message names the argument and quotes the value (as Keras does).
    """
    if batch_size is not None and (
        not isinstance(batch_size, (int, np.integer))
        or isinstance(batch_size, bool)
        or batch_size < 1
    ):
        raise ValueError(
            f"{what}: batch_size must be a positive integer or None, got {batch_size!r}"
        )
    if allow_empty:
        return
    if isinstance(x, Dataset):
        if x.cardinality() == 0:
            raise ValueError(f"{what}: x is a Dataset with no batches")
    elif x is None or np.ndim(x) == 0 or len(x) == 0:
        raise ValueError(
            f"{what}: x has no examples (shape {np.shape(x)}); pass at least one example"
        )


def array_batches(
    x: Any,
    y: Any,
    batch_size: int | None,
    shuffle: bool,
    seed: int,
    sample_weight: Any = None,
) -> Dataset:
    """A dataset of global batches ``(x, y, global_rows)``, or ``(x, y, global_rows, w)``.

    Raises:
        ValueError: ``y`` or ``sample_weight`` has another number of examples than ``x``, or
            ``sample_weight`` comes with a Dataset (which carries its own weights).
    """
    if isinstance(x, Dataset):
        if sample_weight is not None:
            raise ValueError("sample_weight must be None when x is a Dataset (yield (x, y, w))")
        return with_batch_rows(x, y)
    x = np.asarray(x)
    y = None if y is None else np.asarray(y)
    if y is not None and len(y) != len(x):
        raise ValueError(f"x and y have different numbers of examples: {len(x)} and {len(y)}")
    w = None if sample_weight is None else np.asarray(sample_weight)
    if w is not None and len(w) != len(x):
        raise ValueError(
            f"x and sample_weight have different numbers of examples: {len(x)} and {len(w)}"
        )
    batch_size = batch_size or 32
    n = len(x)

    def make() -> Iterator[Any]:
        order = np.random.default_rng(seed).permutation(n) if shuffle else np.arange(n)
        for lo in range(0, n, batch_size):
            idx = order[lo : lo + batch_size]
            batch = (x[idx], None if y is None else y[idx], np.full(len(idx), len(idx), np.int64))
            yield batch if w is None else (*batch, w[idx])

    return Dataset(make, -(-n // batch_size))
