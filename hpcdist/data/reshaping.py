"""Changing the batch structure: ``unbatch``, ``padded_batch``, ``rebatch``, ``window``.

`Reshaping` is a mixin of `hpcdist.data.dataset.Dataset`, with TF's semantics (compared with
TF 2.21 in tests/conformance/test_dataset_files.py).
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from hpcdist.data.lineage import transformation
from hpcdist.data.nest import flatten, map_structure, pack_sequence_as
from hpcdist.errors import InvalidArgumentError

if TYPE_CHECKING:
    from hpcdist.data.dataset import Dataset

__all__ = ["Reshaping", "batch_cardinality", "unbatch_rows"]

INFINITE = -1
UNKNOWN = -2


def batch_cardinality(card: int, size: int, drop_remainder: bool) -> int:
    """Batches of ``size`` from ``card`` elements (unknown and infinite stay so)."""
    if card < 0:
        return card
    return card // size if drop_remainder else -(-card // size)


def unbatch_rows(element: Any) -> Iterator[Any]:
    """The rows of one batched element (every leaf split along its first axis).

    Raises:
        ValueError: A leaf is a scalar (TF's message).
        InvalidArgumentError: The leaves' first dimensions differ.
    """
    leaves = [
        np.asarray(leaf) if not isinstance(leaf, np.ndarray) else leaf for leaf in flatten(element)
    ]
    if any(leaf.ndim == 0 for leaf in leaves):
        raise ValueError("Cannot unbatch an input with scalar components.")
    sizes = {leaf.shape[0] for leaf in leaves}
    if len(sizes) > 1:
        raise InvalidArgumentError(
            "Input element must have the same batch size in each component, got first "
            f"dimensions {[leaf.shape[0] for leaf in leaves]}"
        )
    for i in range(sizes.pop() if sizes else 0):
        yield pack_sequence_as(element, [leaf[i] for leaf in leaves])


def _padding_value(value: Any, leaf: np.ndarray) -> Any:
    if value is not None:
        return value
    return b"" if leaf.dtype == object else leaf.dtype.type(0)


def _pad(leaves: list[np.ndarray], shape: Any, value: Any, k: int) -> np.ndarray:
    ndim = leaves[0].ndim
    for leaf in leaves:
        if leaf.ndim != ndim:
            raise InvalidArgumentError(
                f"padded_batch: component {k} has rank {leaf.ndim} in one element and {ndim} "
                "in another"
            )
    longest = [max(leaf.shape[d] for leaf in leaves) for d in range(ndim)]
    if shape is not None:
        want = (
            [None if s is None or s < 0 else int(s) for s in np.atleast_1d(shape).tolist()]
            if np.ndim(shape)
            else []
        )
        if len(want) != ndim:
            raise ValueError(
                f"padded_batch: padded_shapes of component {k} has rank {len(want)}, the "
                f"element has rank {ndim}"
            )
        for d, (w, n) in enumerate(zip(want, longest, strict=True)):
            if w is not None and n > w:
                raise InvalidArgumentError(
                    f"padded_batch: component {k} has size {n} in dimension {d}, larger than "
                    f"its padded shape {want}"
                )
        longest = [n if w is None else w for w, n in zip(want, longest, strict=True)]
    fill = _padding_value(value, leaves[0])
    out = np.full((len(leaves), *longest), fill, dtype=leaves[0].dtype)
    for i, leaf in enumerate(leaves):
        out[(i, *(slice(0, n) for n in leaf.shape))] = leaf
    return out


class Reshaping:
    """``unbatch``, ``padded_batch``, ``rebatch`` and ``window`` of `Dataset`."""

    @transformation
    def unbatch(self, name: str | None = None) -> Dataset:
        """One element per row of each element (the inverse of ``batch``).

        Cardinality is unknown (TF knows it only for batches of a static size).
        Iteration raises ValueError for a scalar component and `InvalidArgumentError` for
        components of different first dimensions.
        """
        del name
        elements = self._make_iterator

        def make() -> Iterator[Any]:
            for element in elements():
                yield from unbatch_rows(element)

        return self._derive(make, 0 if self._cardinality == 0 else UNKNOWN)

    @transformation
    def padded_batch(
        self,
        batch_size: int,
        padded_shapes: Any = None,
        padding_values: Any = None,
        drop_remainder: bool = False,
        name: str | None = None,
    ) -> Dataset:
        """Batches whose components are padded to the longest in the batch (or to a shape).

        ``padded_shapes`` (a structure like the elements) fixes dimensions; None or -1 pads to
        the longest. ``padding_values`` defaults to 0 (``b""`` for strings).

        Raises:
            ValueError: ``batch_size`` is not positive, or a padded shape's rank differs.
            InvalidArgumentError: (iteration) an element is larger than its padded shape.
        """
        del name
        if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        size = int(batch_size)
        elements = self._make_iterator

        def batch(buffer: list[Any]) -> Any:
            structure = buffer[0]
            columns = list(zip(*(flatten(e) for e in buffer), strict=True))
            n = len(columns)
            shapes = [None] * n if padded_shapes is None else _spread(padded_shapes, structure, n)
            values = [None] * n if padding_values is None else _spread(padding_values, structure, n)
            return pack_sequence_as(
                structure,
                [
                    _pad([np.asarray(x) for x in column], shapes[k], values[k], k)
                    for k, column in enumerate(columns)
                ],
            )

        def make() -> Iterator[Any]:
            buffer: list[Any] = []
            for element in elements():
                buffer.append(element)
                if len(buffer) == size:
                    yield batch(buffer)
                    buffer = []
            if buffer and not drop_remainder:
                yield batch(buffer)

        return self._derive(make, batch_cardinality(self._cardinality, size, drop_remainder))

    @transformation
    def rebatch(
        self, batch_size: Any, drop_remainder: bool = False, name: str | None = None
    ) -> Dataset:
        """The same rows in batches of ``batch_size`` (a list of sizes is used in turn).

        As ``unbatch().batch(batch_size)``, TF's ``Dataset.rebatch``; cardinality unknown.

        Raises:
            ValueError: A batch size is not positive.
        """
        del name
        sizes = [int(s) for s in np.atleast_1d(batch_size).tolist()]
        if not sizes or any(s < 1 for s in sizes):
            raise ValueError(f"rebatch: batch sizes must be positive, got {batch_size!r}")
        elements = self._make_iterator

        def make() -> Iterator[Any]:
            buffer: list[Any] = []
            turn = 0
            for element in elements():
                for row in unbatch_rows(element):
                    buffer.append(row)
                    if len(buffer) == sizes[turn % len(sizes)]:
                        yield map_structure(lambda *xs: _stacked(xs), *buffer)
                        buffer, turn = [], turn + 1
            if buffer and not drop_remainder:
                yield map_structure(lambda *xs: _stacked(xs), *buffer)

        return self._derive(make, 0 if self._cardinality == 0 else UNKNOWN)

    @transformation
    def window(
        self,
        size: int,
        shift: int | None = None,
        stride: int = 1,
        drop_remainder: bool = False,
        name: str | None = None,
    ) -> Dataset:
        """Windows of ``size`` elements every ``shift`` (default ``size``), ``stride`` apart.

        Each window is a structure of datasets like the elements (TF's nested windows): a
        ``(x, y)`` element gives ``(dataset of x, dataset of y)``; ``flat_map`` with ``batch``
        turns them into arrays. Cardinality follows TF's rule.

        Raises:
            ValueError: ``size``, ``shift`` or ``stride`` is not positive.
        """
        del name
        shift = size if shift is None else shift
        for what, value in (("size", size), ("shift", shift), ("stride", stride)):
            if not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"window: {what} must be a positive integer, got {value!r}")
        span = (size - 1) * stride + 1
        elements = self._make_iterator
        new = self._new

        def as_window(rows: list[Any]) -> Any:
            structure = rows[0]
            columns = list(zip(*(flatten(r) for r in rows), strict=True))
            return pack_sequence_as(
                structure, [new(lambda c=column: iter(c), len(column)) for column in columns]
            )

        def make() -> Iterator[Any]:
            buffer: collections.deque[tuple[int, Any]] = collections.deque()
            first = 0  # input index where the next window starts
            last = -1
            for last, element in enumerate(elements()):
                if last >= first:
                    buffer.append((last, element))
                while first + span - 1 <= last:
                    yield as_window(
                        [e for i, e in buffer if (i - first) % stride == 0 and i < first + span]
                    )
                    first += shift
                    while buffer and buffer[0][0] < first:
                        buffer.popleft()
            while not drop_remainder and first <= last:
                yield as_window([e for i, e in buffer if (i - first) % stride == 0])
                first += shift
                while buffer and buffer[0][0] < first:
                    buffer.popleft()

        card = self._cardinality
        if card >= 0:
            if drop_remainder:
                card = 0 if card < span else (card - span) // shift + 1
            else:
                card = -(-card // shift)
        return self._derive(make, card)


def _spread(value: Any, structure: Any, n: int) -> list[Any]:
    """A per-component list from a structure like the element's, or one value for all.

    For an element that is one array the whole ``value`` is its entry (a shape such as
    ``(4,)`` is one shape, not a structure).
    """
    if not isinstance(structure, (tuple, dict)):
        return [value]
    if isinstance(value, (tuple, dict)):
        leaves = _flat_like(value, structure)
        if len(leaves) != n:
            raise ValueError(f"padded_batch: {n} components, but {len(leaves)} values given")
        return leaves
    return [value] * n


def _flat_like(value: Any, structure: Any) -> list[Any]:
    """``value``'s leaves at the leaf positions of ``structure`` (lists of dims are leaves)."""
    if isinstance(structure, dict):
        return [
            leaf for key in sorted(structure) for leaf in _flat_like(value[key], structure[key])
        ]
    if isinstance(structure, tuple):
        return [leaf for v, s in zip(value, structure, strict=True) for leaf in _flat_like(v, s)]
    return [value]


def _stacked(xs: tuple[Any, ...]) -> np.ndarray:
    if isinstance(xs[0], bytes):
        out = np.empty(len(xs), object)
        out[:] = list(xs)
        return out
    return np.stack(xs)
