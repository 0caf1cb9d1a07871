"""Balanced splitting of ``count`` items into ``parts`` contiguous pieces.

The first ``count % parts`` pieces get one extra item (7 over 3: 3, 2, 2). Used wherever hpcdist
splits rows or elements: ring segments, reduce-scatter blocks, global batches over replicas.
"""

from __future__ import annotations

__all__ = ["balanced_bounds", "balanced_sizes"]


def balanced_sizes(count: int, parts: int) -> list[int]:
    """Sizes of the pieces."""
    base, extra = divmod(count, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def balanced_bounds(count: int, parts: int) -> list[tuple[int, int]]:
    """``(start, stop)`` of each piece."""
    out, lo = [], 0
    for size in balanced_sizes(count, parts):
        out.append((lo, lo + size))
        lo += size
    return out
