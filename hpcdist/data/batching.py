"""`RowPlan`: a dataset whose elements are rows of in-memory arrays, batched by slicing.

``from_tensor_slices`` makes a plan: its elements are row ``i`` of every array. ``shard``,
``take``, ``skip`` (``count >= 0``), ``repeat`` and ``shuffle`` of a plan give a plan again: they
only change which rows come in which order. A plan describes one iteration as a sequence of
*chunks* of row indices (a ``slice`` or an int64 array), one chunk per pass over the arrays,
so that ``batch`` cuts the chunks into batches and builds each batch with one slice of every
array (no shuffle) or one ``np.take`` (shuffled rows), instead of stacking elements one by
one. Every other transformation (``map``, ``filter``, ``cache``, ``prefetch``, ...) ends the
plan: ``batch`` then stacks elements as before.

The chunk makers are generator functions, so that a plan does its work (a shuffle draws its
order, a repeat starts its next pass) at the moment the element-by-element iterator would:
on the first element asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from hpcdist.data.nest import pack_sequence_as

__all__ = ["Chunk", "RowPlan", "shuffle_order"]

Chunk = slice | np.ndarray
"""Row indices: a ``slice`` with int start, stop and step, or a 1-D int64 array."""


def _length(chunk: Chunk) -> int:
    if isinstance(chunk, slice):
        return len(range(chunk.start, chunk.stop, chunk.step))
    return int(chunk.shape[0])


def _part(chunk: Chunk, lo: int, hi: int, step: int = 1) -> Chunk:
    """Positions ``lo:hi:step`` of ``chunk``, as a chunk."""
    if isinstance(chunk, slice):
        r = range(chunk.start, chunk.stop, chunk.step)[lo:hi:step]
        return slice(r.start, r.stop, r.step)
    return chunk[lo:hi:step]


def _as_array(chunk: Chunk) -> np.ndarray:
    if isinstance(chunk, slice):
        return np.arange(chunk.start, chunk.stop, chunk.step, dtype=np.int64)
    return chunk


def shuffle_order(n: int, buffer_size: int, rng: np.random.Generator) -> np.ndarray:
    """The order in which TF's shuffle buffer emits ``n`` elements, as positions.

    The element-by-element algorithm (`hpcdist.data.dataset.Dataset.shuffle`): fill a buffer
    of ``m = min(n, buffer_size)`` elements; for each further element draw ``i`` in
    ``[0, m)``, emit ``buffer[i]`` and put the element in its place; at the end emit
    ``buffer.pop(j)`` with ``j`` drawn in ``[0, len(buffer))``. Here all the draws are made by
    one ``rng.integers`` call with one bound per draw (numpy draws exactly the same numbers as
    one call per draw), the fill phase is solved without a Python loop (the element emitted
    from slot ``s`` is the one put there by the previous draw of ``s``, or ``s`` itself), and
    only the final drain pops from a list.

    Args:
        n: Number of elements.
        buffer_size: TF's ``buffer_size`` (at least 1).
        rng: The generator the element-by-element algorithm would draw from.

    Returns:
        An int64 array: the ``k``-th element emitted is element ``order[k]`` of the input.
    """
    m = min(n, buffer_size)
    steps = n - m
    bounds = np.concatenate(
        [np.full(steps, m, dtype=np.int64), np.arange(m, 0, -1, dtype=np.int64)]
    )
    draws = rng.integers(0, bounds) if n else np.empty(0, dtype=np.int64)
    out = np.empty(n, dtype=np.int64)
    buffer = np.arange(m, dtype=np.int64)
    if steps:
        slots = draws[:steps]
        by_slot = np.argsort(slots, kind="stable")  # grouped by slot, in time order
        sorted_slots = slots[by_slot]
        repeated = np.zeros(steps, dtype=bool)
        repeated[1:] = sorted_slots[1:] == sorted_slots[:-1]
        previous_time = np.empty(steps, dtype=np.int64)
        previous_time[0] = 0
        previous_time[1:] = by_slot[:-1]
        out[by_slot] = np.where(repeated, m + previous_time, sorted_slots)
        last = np.ones(steps, dtype=bool)
        last[:-1] = sorted_slots[1:] != sorted_slots[:-1]
        buffer[sorted_slots[last]] = m + by_slot[last]
    remaining = buffer.tolist()
    out[steps:] = [remaining.pop(j) for j in draws[steps:].tolist()]
    return out


class RowPlan:
    """Which rows of ``arrays`` one iteration yields, chunk by chunk.

    Args:
        arrays: The structure of arrays the rows come from (as given to ``from_tensor_slices``).
        leaves: ``arrays``' leaves in `hpcdist.data.nest.flatten` order.
        chunks: Returns a fresh iterator over the chunks of one iteration.
        cardinality: Elements per iteration (a count, or -1 for infinite).
    """

    def __init__(
        self,
        arrays: Any,
        leaves: list[np.ndarray],
        chunks: Callable[[], Iterator[Chunk]],
        cardinality: int,
    ) -> None:
        self.arrays = arrays
        self.leaves = leaves
        self.chunks = chunks
        self.cardinality = cardinality

    @staticmethod
    def of_arrays(arrays: Any, leaves: list[np.ndarray], n: int) -> RowPlan:
        """Every row once, in order."""

        def chunks() -> Iterator[Chunk]:
            if n:
                yield slice(0, n, 1)

        return RowPlan(arrays, leaves, chunks, n)

    def _derive(self, chunks: Callable[[], Iterator[Chunk]], cardinality: int) -> RowPlan:
        return RowPlan(self.arrays, self.leaves, chunks, cardinality)

    def shard(self, num_shards: int, index: int, cardinality: int) -> RowPlan:
        """Every ``num_shards``-th element from ``index``, counted across chunks."""
        source = self.chunks

        def chunks() -> Iterator[Chunk]:
            offset = 0
            for chunk in source():
                size = _length(chunk)
                first = (index - offset) % num_shards
                offset += size
                if first < size:
                    yield _part(chunk, first, size, num_shards)

        return self._derive(chunks, cardinality)

    def take(self, count: int, cardinality: int) -> RowPlan:
        """The first ``count`` elements (``count >= 0``); no chunk is made after the last."""
        source = self.chunks

        def chunks() -> Iterator[Chunk]:
            left = count
            if left == 0:
                return
            for chunk in source():
                size = _length(chunk)
                yield _part(chunk, 0, min(size, left))
                left -= size
                if left <= 0:
                    return

        return self._derive(chunks, cardinality)

    def skip(self, count: int, cardinality: int) -> RowPlan:
        """Everything after the first ``count`` elements (``count >= 0``)."""
        source = self.chunks

        def chunks() -> Iterator[Chunk]:
            left = count
            for chunk in source():
                size = _length(chunk)
                if left >= size:
                    left -= size
                    continue
                yield _part(chunk, left, size)
                left = 0

        return self._derive(chunks, cardinality)

    def repeat(self, count: int | None, cardinality: int) -> RowPlan:
        """``count`` passes (for ever when None); stops at a pass that yields nothing."""
        source = self.chunks

        def chunks() -> Iterator[Chunk]:
            done = 0
            while count is None or done < count:
                empty = True
                for chunk in source():
                    empty = empty and _length(chunk) == 0
                    yield chunk
                done += 1
                if empty:
                    return

        return self._derive(chunks, cardinality)

    def shuffle(self, buffer_size: int, make_rng: Callable[[], np.random.Generator]) -> RowPlan:
        """TF's shuffle of a finite plan; ``make_rng`` is called once per iteration."""
        source = self.chunks

        def chunks() -> Iterator[Chunk]:
            rng = make_rng()
            parts = [_as_array(c) for c in source()]
            rows = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
            if rows.shape[0]:
                yield rows[shuffle_order(rows.shape[0], buffer_size, rng)]

        return self._derive(chunks, self.cardinality)

    def _gather(self, pieces: list[Chunk]) -> Any:
        if len(pieces) == 1 and isinstance(pieces[0], slice):
            rows = pieces[0]
            leaves = [np.array(leaf[rows]) for leaf in self.leaves]  # a copy, as np.stack
        else:
            index = np.concatenate([_as_array(p) for p in pieces])
            leaves = [np.take(leaf, index, axis=0) for leaf in self.leaves]
        return pack_sequence_as(self.arrays, leaves)

    def batches(self, batch_size: int, drop_remainder: bool) -> Iterator[Any]:
        """One iteration in batches of ``batch_size`` rows (the last one may be short)."""
        pending: list[Chunk] = []
        have = 0
        for chunk in self.chunks():
            size, at = _length(chunk), 0
            while at < size:
                take = min(batch_size - have, size - at)
                pending.append(_part(chunk, at, at + take))
                have += take
                at += take
                if have == batch_size:
                    yield self._gather(pending)
                    pending, have = [], 0
        if have and not drop_remainder:
            yield self._gather(pending)
