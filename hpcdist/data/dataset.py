"""`Dataset`: a lazy, numpy-backed input pipeline with ``tf.data``'s core methods.

A dataset is a recipe: iterating it builds a fresh Python iterator over numpy structures
(arrays, tuples, dicts), so datasets can be iterated many times and transformations cost
nothing until used. Cardinality follows TF: a count, `INFINITE` or `UNKNOWN`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from hpcdist.data.batching import RowPlan
from hpcdist.data.cache import cached_iteration
from hpcdist.data.composition import Composition
from hpcdist.data.dataset_options import Options
from hpcdist.data.iterator import DatasetIterator
from hpcdist.data.lineage import epoch_counters, register_epochs, source_of, transformation
from hpcdist.data.nest import flatten, map_structure
from hpcdist.data.parallel_map import ParallelMap, pool_size
from hpcdist.data.prefetch import Prefetcher
from hpcdist.data.reshaping import Reshaping, batch_cardinality
from hpcdist.data.sources import Sources
from hpcdist.utils.seeds import get_seed

__all__ = ["INFINITE", "UNKNOWN", "Dataset"]

INFINITE = -1
UNKNOWN = -2


def _stack(xs: tuple[Any, ...]) -> np.ndarray:
    """One batch of elements: ``np.stack``, except that ``bytes`` values stay whole.

    numpy's fixed-width bytes dtype drops trailing NUL bytes (a serialized proto may end in
    one), so a batch of ``bytes`` is an object array of them, as TF's string tensors read back.
    """
    if isinstance(xs[0], bytes):
        out = np.empty(len(xs), object)
        out[:] = list(xs)
        return out
    return np.stack(xs)


class Dataset(Sources, Composition, Reshaping):
    """A lazy sequence of numpy structures.

    Build one with `from_tensor_slices`, `from_tensors`, `range`, `from_generator`,
    `list_files`, `from_hdf5` or `hpcdist.data.TFRecordDataset`, then chain transformations
    (those of `hpcdist.data.composition` and `hpcdist.data.reshaping` too). Every
    transformation records its call (`hpcdist.data.lineage`), so that a strategy can replay the
    pipeline over one worker's files. ``iter(dataset)`` is a `DatasetIterator`, which a
    `hpcdist.Checkpoint` saves and restores.

    Args:
        make_iterator: Returns a fresh iterator over the elements.
        cardinality: Number of elements, `INFINITE` or `UNKNOWN`.
        options: The `hpcdist.data.Options` it carries (transformations keep them).
    """

    def __init__(
        self,
        make_iterator: Callable[[], Iterator[Any]],
        cardinality: int,
        options: Options | None = None,
    ) -> None:
        self._make_iterator = make_iterator
        self._cardinality = cardinality
        self._options = options
        self._rows: RowPlan | None = None  # set when the elements are rows of arrays

    def _derive(
        self,
        make_iterator: Callable[[], Iterator[Any]],
        cardinality: int,
        rows: RowPlan | None = None,
    ) -> Dataset:
        """A dataset made from this one: it carries this one's options, as in TF.

        ``rows`` is the derived dataset's `RowPlan` when its elements are still rows of the
        source arrays (``batch`` then slices them); None ends the plan.
        """
        derived = Dataset(make_iterator, cardinality, self._options)
        derived._rows = rows
        return derived

    @staticmethod
    def _new(make_iterator: Callable[[], Iterator[Any]], cardinality: int) -> Dataset:
        """A source dataset (a plain `Dataset`, also when called on a subclass)."""
        return Dataset(make_iterator, cardinality)

    # -- sources ------------------------------------------------------------------------------

    @staticmethod
    def from_tensor_slices(tensors: Any) -> Dataset:
        """One element per index of the first axis of every array in ``tensors``.

        Raises:
            ValueError: The arrays' first dimensions differ, or an array is a scalar.
        """
        arrays = map_structure(np.asarray, tensors)
        leaves = flatten(arrays)
        if not leaves:
            raise ValueError("from_tensor_slices needs at least one array")
        if any(a.ndim == 0 for a in leaves):
            raise ValueError("from_tensor_slices needs arrays with at least one axis")
        lengths = {a.shape[0] for a in leaves}
        if len(lengths) != 1:
            raise ValueError(
                "from_tensor_slices: all arrays must have the same first dimension, got "
                f"{[a.shape for a in leaves]}"
            )
        n = lengths.pop()

        def make() -> Iterator[Any]:
            for i in range(n):
                yield map_structure(lambda a, i=i: a[i], arrays)

        dataset = Dataset(make, n)
        dataset._rows = RowPlan.of_arrays(arrays, leaves, n)
        return dataset

    @staticmethod
    def from_tensors(tensors: Any) -> Dataset:
        """A dataset of exactly one element: ``tensors``."""
        value = map_structure(np.asarray, tensors)
        return Dataset(lambda: iter([value]), 1)

    @staticmethod
    def range(*args: int) -> Dataset:
        """Integers as in Python's ``range(stop)`` / ``range(start, stop[, step])`` (int64)."""
        r = range(*args)
        return Dataset(lambda: (np.int64(i) for i in r), len(r))

    # -- transformations --------------------------------------------------------------------

    @transformation
    def batch(self, batch_size: int, drop_remainder: bool = False) -> Dataset:
        """Stack consecutive elements into batches (the last one may be short).

        When the elements are rows of in-memory arrays (``from_tensor_slices`` followed only
        by ``shuffle``, ``shard``, ``take``, ``skip`` or ``repeat``), each batch is one slice
        (or, after a shuffle, one ``np.take``) of every array, with the same elements in the
        same order as stacking them one by one; right after ``from_hdf5`` each batch is one
        slice of every HDF5 dataset.
        """
        if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        elements = self._make_iterator
        rows = self._rows
        size = int(batch_size)

        source = source_of(self)
        whole = None if source is None else source.batches

        def make() -> Iterator[Any]:
            if rows is not None:
                yield from rows.batches(size, drop_remainder)
                return
            if whole is not None:
                yield from whole(size, drop_remainder)
                return
            buffer: list[Any] = []
            for element in elements():
                buffer.append(element)
                if len(buffer) == batch_size:
                    yield map_structure(lambda *xs: _stack(xs), *buffer)
                    buffer = []
            if buffer and not drop_remainder:
                yield map_structure(lambda *xs: _stack(xs), *buffer)

        return self._derive(make, batch_cardinality(self._cardinality, size, drop_remainder))

    @transformation
    def repeat(self, count: int | None = None) -> Dataset:
        """Repeat the dataset ``count`` times (forever when None or negative, as TF's -1)."""
        elements = self._make_iterator
        forever = count is None or count < 0

        def make() -> Iterator[Any]:
            done = 0
            while forever or done < count:
                empty = True
                for element in elements():
                    empty = False
                    yield element
                done += 1
                if empty:
                    return

        card = self._cardinality
        if forever:
            # TF: repeating an unknown (but not empty) dataset for ever is INFINITE too.
            card = 0 if card == 0 else INFINITE
        elif card >= 0:
            card *= count
        rows = self._rows
        plan = None if rows is None else rows.repeat(None if forever else count, card)
        return self._derive(make, card, plan)

    @transformation
    def shuffle(
        self, buffer_size: int, seed: int | None = None, reshuffle_each_iteration: bool = True
    ) -> Dataset:
        """Shuffle with a buffer of ``buffer_size`` elements (TF's algorithm).

        With a ``seed``, or after ``hd.random.set_seed`` (TF's `get_seed` rules), the order is
        the same in every run and every process, so ranks that shuffle the same data stay in
        step; each new iteration reshuffles unless ``reshuffle_each_iteration`` is false.
        """
        if buffer_size < 1:
            raise ValueError(f"buffer_size must be >= 1, got {buffer_size}")
        elements = self._make_iterator
        epoch = [0]
        seeds = get_seed(seed)
        base = list(seeds) if seeds[0] is not None else [np.random.SeedSequence().entropy]

        def next_rng() -> np.random.Generator:
            rng = np.random.default_rng([*base, epoch[0]])
            if reshuffle_each_iteration:
                epoch[0] += 1
            return rng

        def make() -> Iterator[Any]:
            rng = next_rng()
            buffer: list[Any] = []
            for element in elements():
                if len(buffer) < buffer_size:
                    buffer.append(element)
                    continue
                i = int(rng.integers(len(buffer)))
                yield buffer[i]
                buffer[i] = element
            while buffer:
                yield buffer.pop(int(rng.integers(len(buffer))))

        rows = self._rows
        finite = rows is not None and self._cardinality >= 0
        plan = rows.shuffle(int(buffer_size), next_rng) if finite else None
        shuffled = self._derive(make, self._cardinality, plan)
        register_epochs(shuffled, epoch)
        return shuffled

    @transformation
    def shard(self, num_shards: int, index: int) -> Dataset:
        """Keep every ``num_shards``-th element, starting at ``index``."""
        if num_shards < 1 or not 0 <= index < num_shards:
            raise ValueError(
                f"shard needs num_shards >= 1 and 0 <= index < num_shards, got "
                f"num_shards={num_shards}, index={index}"
            )
        elements = self._make_iterator

        def make() -> Iterator[Any]:
            for i, element in enumerate(elements()):
                if i % num_shards == index:
                    yield element

        card = self._cardinality
        if card >= 0:
            card = card // num_shards + (1 if index < card % num_shards else 0)
        rows = self._rows
        plan = None if rows is None else rows.shard(num_shards, index, card)
        return self._derive(make, card, plan)

    @transformation
    def map(
        self,
        map_func: Callable[..., Any],
        num_parallel_calls: int | None = None,
        deterministic: bool | None = None,
        name: str | None = None,
    ) -> Dataset:
        """Apply ``map_func`` to each element (a tuple element is passed as arguments).

        With ``num_parallel_calls`` (a count or ``hd.data.AUTOTUNE``: the machine's cores) the
        calls run on a pool of that many threads (`hpcdist.data.parallel_map`): in input order
        when ``deterministic`` is true or None (unless the options say
        ``deterministic=False``), in completion order when false. Threads help functions that
        release the GIL (numpy on large arrays, parsing a batch of records), not pure Python.

        Raises:
            ValueError: ``num_parallel_calls`` is neither positive nor AUTOTUNE.
        """
        del name
        elements = self._make_iterator

        def apply(element: Any) -> Any:
            out = map_func(*element) if type(element) is tuple else map_func(element)
            return map_structure(np.asarray, out)

        if num_parallel_calls is None:
            return self._derive(lambda: (apply(e) for e in elements()), self._cardinality)
        threads = pool_size(num_parallel_calls)
        if deterministic is None:
            deterministic = self.options().deterministic is not False
        ordered = bool(deterministic)
        return self._derive(
            lambda: ParallelMap(elements(), apply, threads, ordered), self._cardinality
        )

    @transformation
    def filter(self, predicate: Callable[..., Any]) -> Dataset:
        """Keep the elements for which ``predicate`` is true (cardinality becomes unknown)."""
        elements = self._make_iterator

        def make() -> Iterator[Any]:
            for element in elements():
                keep = predicate(*element) if type(element) is tuple else predicate(element)
                if bool(keep):
                    yield element

        return self._derive(make, UNKNOWN if self._cardinality != 0 else 0)

    @transformation
    def take(self, count: int) -> Dataset:
        """The first ``count`` elements (all when -1 or any negative count, as TF)."""
        elements = self._make_iterator

        def make() -> Iterator[Any]:
            if count < 0:
                yield from elements()
                return
            if count == 0:
                return
            for i, element in enumerate(elements(), 1):
                yield element
                if i >= count:  # stop without reading one element more (as TF)
                    return

        card = self._cardinality
        if count >= 0:
            if card == INFINITE:
                card = count
            elif card >= 0:
                card = min(card, count)
        rows = self._rows if count >= 0 else None
        plan = None if rows is None else rows.take(count, card)
        return self._derive(make, card, plan)

    @transformation
    def skip(self, count: int) -> Dataset:
        """Everything after the first ``count`` elements (nothing when -1 or negative, as TF).

        A negative count skips the whole input: on an infinite dataset iteration never ends.
        """
        elements = self._make_iterator

        def make() -> Iterator[Any]:
            for i, element in enumerate(elements()):
                if 0 <= count <= i:
                    yield element

        card = self._cardinality
        if card >= 0:
            card = 0 if count < 0 else max(0, card - count)
        rows = self._rows if count >= 0 else None
        plan = None if rows is None else rows.skip(count, card)
        return self._derive(make, card, plan)

    @transformation
    def prefetch(self, buffer_size: int = 1, name: str | None = None) -> Dataset:
        """Produce up to ``buffer_size`` elements ahead on a background thread.

        ``hd.data.AUTOTUNE`` (-1) keeps 2 elements ahead; 0 adds no thread (TF's no-op).

        Raises:
            ValueError: ``buffer_size`` below -1.
        """
        del name
        if buffer_size < -1:
            raise ValueError(f"prefetch: buffer_size must be >= -1 (AUTOTUNE), got {buffer_size}")
        elements = self._make_iterator
        if buffer_size == 0:
            return self._derive(elements, self._cardinality)
        size = buffer_size if buffer_size != -1 else 2
        return self._derive(lambda: Prefetcher(elements(), size), self._cardinality)

    @transformation
    def cache(self, filename: str | os.PathLike[str] = "") -> Dataset:
        """Cache the elements of the first complete iteration and replay them after (TF's rule).

        Without a ``filename`` (or with ``""``) the elements are kept in memory. With one, the
        first pass that reaches the end writes them to an HDF5 file while yielding them
        (``{filename}.h5``; ``{filename}.rank{r}-of-{n}.h5`` when ``n > 1`` MPI processes
        run), renamed into place only when the pass completes; every later iteration, in this
        run or the next, reads that file lazily instead of the source (see
        `hpcdist.data.cache`). In both cases an iteration stopped early caches nothing, and
        the next one reads the source again.

        Raises:
            DataLossError: (on iteration) the cache file exists but is corrupt or truncated.
        """
        elements = self._make_iterator
        if os.fspath(filename):
            return self._derive(lambda: cached_iteration(self, filename), self._cardinality)
        cached: list[list[Any]] = []

        def make() -> Iterator[Any]:
            if cached:
                yield from cached[0]
                return
            kept = []
            for element in elements():
                kept.append(element)
                yield element
            if not cached:
                cached.append(kept)

        return self._derive(make, self._cardinality)

    @transformation
    def with_options(self, options: Options) -> Dataset:
        """This dataset carrying ``options`` merged over its own (``tf.data``'s rule).

        ``options.experimental_distribute.auto_shard_policy`` decides how a distribution
        strategy splits it across workers.

        Raises:
            TypeError: ``options`` is not an `hpcdist.data.Options`.
        """
        if not isinstance(options, Options):
            raise TypeError(f"with_options needs hd.data.Options, got {type(options).__name__}")
        merged = Dataset(self._make_iterator, self._cardinality, self.options().merge(options))
        merged._rows = self._rows
        return merged

    # -- inspection ----------------------------------------------------------------------------

    def options(self) -> Options:
        """The options this dataset carries (default `Options` when none were set)."""
        return self._options if self._options is not None else Options()

    def cardinality(self) -> int:
        """Number of elements, or `INFINITE` (-1) / `UNKNOWN` (-2)."""
        return self._cardinality

    def __len__(self) -> int:
        if self._cardinality < 0:
            raise TypeError("the dataset length is infinite or unknown")
        return self._cardinality

    def __iter__(self) -> DatasetIterator:
        return DatasetIterator(self._make_iterator, epoch_counters(self))

    def as_numpy_iterator(self) -> DatasetIterator:
        """Same as ``iter(dataset)`` (elements are numpy already)."""
        return iter(self)

    def __repr__(self) -> str:
        return f"Dataset(cardinality={self._cardinality})"
