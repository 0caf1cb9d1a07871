"""Datasets made of datasets: ``interleave``, ``flat_map``, ``zip``, ``concatenate``, ``enumerate``.

`Composition` is a mixin of `hpcdist.data.dataset.Dataset`. The orders and cardinalities are
TF's (``InterleaveDatasetOp``, ``FlatMapDatasetOp``, ``ZipDatasetOp``,
``ConcatenateDatasetOp``; compared with TF 2.21 in tests/conformance/test_dataset_files.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from hpcdist.data.lineage import transformation
from hpcdist.data.nest import flatten, pack_sequence_as
from hpcdist.data.prefetch import Prefetcher

if TYPE_CHECKING:
    from hpcdist.data.dataset import Dataset

__all__ = ["Composition", "interleave_elements"]

INFINITE = -1
UNKNOWN = -2
AUTOTUNE = -1


def _call(fn: Callable[..., Any], element: Any) -> Any:
    """``fn`` of one element, a tuple element passed as arguments (tf.data's rule)."""
    return fn(*element) if type(element) is tuple else fn(element)


def _as_dataset(value: Any, what: str) -> Any:
    if not hasattr(value, "cardinality") or not callable(getattr(value, "__iter__", None)):
        raise TypeError(f"{what}: map_func must return a Dataset, got {type(value).__name__}")
    return value


def interleave_elements(
    inputs: Iterator[Any],
    open_input: Callable[[Any], Iterator[Any]],
    cycle_length: int,
    block_length: int,
) -> Iterator[Any]:
    """TF's deterministic interleave (``InterleaveDatasetOp``).

    A cycle of ``cycle_length`` open inputs; ``block_length`` consecutive elements are taken
    from each in turn; an input that ends is replaced by the next one, at the same place in
    the cycle, before the cycle moves on.
    """
    slots: list[Iterator[Any] | None] = [None] * cycle_length
    index = block = open_count = 0
    end_of_input = False
    done = object()
    while not end_of_input or open_count > 0:
        current = slots[index]
        if current is not None:
            element = next(current, done)
            if element is not done:
                block += 1
                if block == block_length:
                    block, index = 0, (index + 1) % cycle_length
                yield element
                continue
            slots[index] = None
            open_count -= 1
            block, index = 0, (index + 1) % cycle_length
        elif not end_of_input:
            value = next(inputs, done)
            if value is done:
                end_of_input = True
            else:
                slots[index] = open_input(value)
                open_count += 1
        else:
            block, index = 0, (index + 1) % cycle_length


def _positive(name: str, value: int | None, default: int) -> int:
    if value is None or value == AUTOTUNE:
        return default
    if not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer or AUTOTUNE (-1), got {value!r}")
    return int(value)


class Composition:
    """``interleave``, ``flat_map``, ``zip``, ``concatenate`` and ``enumerate`` of `Dataset`."""

    @transformation
    def interleave(
        self,
        map_func: Callable[..., Any],
        cycle_length: int | None = None,
        block_length: int | None = None,
        num_parallel_calls: int | None = None,
        deterministic: bool | None = None,
        name: str | None = None,
    ) -> Dataset:
        """Interleave the datasets ``map_func`` makes from each element (TF's order).

        ``cycle_length`` inputs are open at once (None or AUTOTUNE: the machine's cores, as
        TF), ``block_length`` (default 1) elements are taken from each in turn. With
        ``num_parallel_calls`` every open input is read ahead by a background thread (up to
        ``block_length`` elements), which overlaps the reads of the cycle; the order stays
        TF's deterministic one whatever ``deterministic`` says. A pipeline whose ``map_func``
        reads files (``TFRecordDataset``, ``from_hdf5``) is sharded by file under a strategy.
        Cardinality is unknown, as in TF.

        Raises:
            ValueError: ``cycle_length``, ``block_length`` or ``num_parallel_calls`` invalid.
        """
        del deterministic, name
        cycle = _positive("cycle_length", cycle_length, os.cpu_count() or 1)
        block = _positive("block_length", block_length, 1)
        parallel = None
        if num_parallel_calls is not None:
            parallel = _positive("num_parallel_calls", num_parallel_calls, cycle)
        elements = self._make_iterator

        def open_input(value: Any) -> Iterator[Any]:
            dataset = _as_dataset(_call(map_func, value), "interleave")
            if parallel is None:
                return iter(dataset)
            return Prefetcher(iter(dataset), block)

        return self._derive(
            lambda: interleave_elements(elements(), open_input, cycle, block), UNKNOWN
        )

    @transformation
    def flat_map(self, map_func: Callable[..., Any], name: str | None = None) -> Dataset:
        """The elements of ``map_func(element)`` (a dataset) for each element, in order."""
        del name
        elements = self._make_iterator

        def make() -> Iterator[Any]:
            for element in elements():
                yield from _as_dataset(_call(map_func, element), "flat_map")

        return self._derive(make, UNKNOWN)

    @transformation
    def concatenate(self, dataset: Dataset, name: str | None = None) -> Dataset:
        """This dataset's elements, then ``dataset``'s (TF's cardinality rule).

        Raises:
            TypeError: ``dataset`` is not a `Dataset`.
        """
        del name
        _as_dataset(dataset, "concatenate")
        elements = self._make_iterator

        def make() -> Iterator[Any]:
            yield from elements()
            yield from dataset

        a, b = self._cardinality, dataset.cardinality()
        if INFINITE in (a, b):
            card = INFINITE
        elif UNKNOWN in (a, b):
            card = UNKNOWN
        else:
            card = a + b
        return self._derive(make, card)

    @transformation
    def enumerate(self, start: int = 0, name: str | None = None) -> Dataset:
        """``(index, element)`` pairs, the index an int64 from ``start``."""
        del name
        elements = self._make_iterator

        def make() -> Iterator[Any]:
            for i, element in enumerate(elements(), start):
                yield np.int64(i), element

        return self._derive(make, self._cardinality)

    @classmethod
    def zip(cls, *args: Any, datasets: Any = None, name: str | None = None) -> Dataset:
        """Elements of several datasets side by side, up to the shortest (``Dataset.zip``).

        ``Dataset.zip(a, b)`` and ``Dataset.zip((a, b))`` give ``(x, y)`` pairs; a dict or a
        nested tuple of datasets gives elements of that structure.

        Raises:
            TypeError: A leaf of the structure is not a `Dataset`, or nothing is given.
        """
        del name
        if datasets is None:
            if not args:
                raise TypeError("Dataset.zip needs at least one dataset")
            datasets = args[0] if len(args) == 1 else tuple(args)
        elif args:
            raise TypeError("Dataset.zip takes positional datasets or datasets=, not both")
        leaves = flatten(datasets)
        for leaf in leaves:
            _as_dataset(leaf, "zip")

        def make() -> Iterator[Any]:
            iterators = [iter(leaf) for leaf in leaves]
            while True:
                values = []
                for it in iterators:
                    try:
                        values.append(next(it))
                    except StopIteration:
                        return
                yield pack_sequence_as(datasets, values)

        card = INFINITE
        for leaf in leaves:
            n = leaf.cardinality()
            if n == UNKNOWN:
                card = UNKNOWN
                break
            if n != INFINITE and (card == INFINITE or n < card):
                card = n
        return cls._new(make, card)
