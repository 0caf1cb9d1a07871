"""Sorting ids into unique rows: the index work of sparse reads, updates and gradients.

Sort-based (one ``argsort`` of the ids), which beats ``np.unique`` plus ``np.add.at`` for the
short id lists of embedding lookups: repeated ids are few, and only they are added row by row.
"""

from __future__ import annotations

import numpy as np

__all__ = ["sum_rows", "unique_inverse"]


def _sorted_groups(flat: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sort ``flat`` and find its runs of equal ids.

    Returns:
        ``order`` sorting ``flat``, ``keep`` marking the first entry of each run in sorted
        order, and ``group``, the index of each sorted entry among the unique ids.
    """
    order = np.argsort(flat, kind="stable")
    ids = flat[order]
    keep = np.empty(len(ids), bool)
    keep[:1] = True
    np.not_equal(ids[1:], ids[:-1], out=keep[1:])
    return order, keep, np.cumsum(keep) - 1


def unique_inverse(flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(flat, return_inverse=True)``, faster for short id lists."""
    order, keep, group = _sorted_groups(flat)
    inverse = np.empty(len(flat), np.int64)
    inverse[order] = group
    return flat[order][keep], inverse


def sum_rows(flat: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique ids and the sum of the rows given for each."""
    if len(flat) < 2 or np.all(flat[:-1] < flat[1:]):
        return flat, rows
    order, keep, group = _sorted_groups(flat)
    first = order[keep]
    summed = rows[first]
    extra = np.flatnonzero(~keep)
    if len(extra):  # repeated ids: few in practice, added row by row
        np.add.at(summed, group[extra], rows[order[extra]])
    return flat[first], summed
