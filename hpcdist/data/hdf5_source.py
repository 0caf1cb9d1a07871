"""Rows of HDF5 datasets, read lazily in chunks (``Dataset.from_hdf5``).

A source is one or more files and one or more keys (HDF5 dataset paths) whose first dimensions
agree within each file; element ``i`` is row ``i`` of every key, files one after the other. The
files are opened when the source is made only to read their shapes; iteration reads
`CHUNK_BYTES` worth of rows at a time (at least one row), so a file larger than memory is read
as it is iterated, never whole. A shard is a list of row ranges (`balanced_ranges`).

Errors: a missing file is `hpcdist.errors.NotFoundError`, a file HDF5 cannot open or read is
`hpcdist.errors.DataLossError`, a missing key or keys of different lengths
`hpcdist.errors.InvalidArgumentError`, each naming the file and the key.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from hpcdist.data.cache import h5py_module
from hpcdist.data.nest import flatten, pack_sequence_as
from hpcdist.errors import DataLossError, InvalidArgumentError, NotFoundError
from hpcdist.utils.split import balanced_bounds

__all__ = [
    "CHUNK_BYTES",
    "Hdf5Rows",
    "balanced_ranges",
    "describe",
    "read_batches",
    "read_rows",
]

CHUNK_BYTES = 4 << 20
"""Bytes of rows read from a file at a time."""


@dataclass(frozen=True)
class Hdf5Rows:
    """Which rows of which files a source reads.

    Attributes:
        keys: The element structure, with HDF5 dataset names as leaves.
        files: ``(path, rows in the file)`` for every file.
        ranges: ``(file index, first row, end row)`` read in this order.
    """

    keys: Any
    files: tuple[tuple[str, int], ...]
    ranges: tuple[tuple[int, int, int], ...]

    @property
    def count(self) -> int:
        """Rows read."""
        return sum(hi - lo for _, lo, hi in self.ranges)


def _open(path: str) -> Any:
    if not os.path.exists(path):
        raise NotFoundError(f"{path}: no such file (Dataset.from_hdf5)")
    try:
        return h5py_module().File(path, "r")
    except OSError as exc:
        raise DataLossError(f"{path}: HDF5 cannot open it ({exc}) (Dataset.from_hdf5)") from exc


def describe(paths: tuple[str, ...], keys: Any) -> Hdf5Rows:
    """The rows of every file, checked: every key exists and has the same first dimension.

    Raises:
        NotFoundError, DataLossError, InvalidArgumentError: see the module docstring.
    """
    names = flatten(keys)
    if not names or not all(isinstance(k, str) for k in names):
        raise InvalidArgumentError(
            f"from_hdf5: keys must be a dataset name or a tuple/dict of names, got {keys!r}"
        )
    files = []
    for path in paths:
        with _open(path) as file:
            lengths = []
            for key in names:
                if key not in file:
                    raise InvalidArgumentError(
                        f"{path}: has no dataset {key!r} (from_hdf5 keys {names}); it holds "
                        f"{sorted(file.keys())}"
                    )
                shape = file[key].shape
                if not shape:
                    raise InvalidArgumentError(
                        f"{path}: dataset {key!r} is a scalar; from_hdf5 needs rows (rank >= 1)"
                    )
                lengths.append(shape[0])
            if len(set(lengths)) > 1:
                raise InvalidArgumentError(
                    f"{path}: the datasets {names} have {lengths} rows; from_hdf5 needs the "
                    "same number of rows in every key"
                )
            files.append((path, int(lengths[0])))
    ranges = tuple((i, 0, n) for i, (_, n) in enumerate(files) if n)
    return Hdf5Rows(keys, tuple(files), ranges)


def balanced_ranges(rows: Hdf5Rows, num_shards: int, index: int) -> Hdf5Rows:
    """Shard ``index`` of ``num_shards``: one contiguous balanced range of all the rows."""
    lo, hi = balanced_bounds(rows.count, num_shards)[index]
    out, at = [], 0
    for f, a, b in rows.ranges:
        start, end = max(a, a + lo - at), min(b, a + hi - at)
        if start < end:
            out.append((f, start, end))
        at += b - a
    return Hdf5Rows(rows.keys, rows.files, tuple(out))


def read_rows(rows: Hdf5Rows) -> Iterator[Any]:
    """The elements of ``rows``, a chunk of rows read at a time from each file."""
    names = flatten(rows.keys)
    for f, lo, hi in rows.ranges:
        path = rows.files[f][0]
        with _open(path) as file:
            datasets = [file[key] for key in names]
            row_bytes = sum(
                max(1, int(np.prod(d.shape[1:], dtype=np.int64)) * d.dtype.itemsize)
                for d in datasets
            )
            step = max(1, CHUNK_BYTES // row_bytes)
            for start in range(lo, hi, step):
                end = min(hi, start + step)
                try:
                    chunks = [np.asarray(d[start:end]) for d in datasets]
                except OSError as exc:
                    raise DataLossError(
                        f"{path}: rows {start}:{end} cannot be read ({exc}) (Dataset.from_hdf5)"
                    ) from exc
                for i in range(end - start):
                    yield pack_sequence_as(rows.keys, [chunk[i] for chunk in chunks])


def read_batches(rows: Hdf5Rows, size: int, drop_remainder: bool) -> Iterator[Any]:
    """The elements of ``rows`` in batches of ``size``, each read with one slice per key.

    A batch that spans two files is joined from a slice of each; the same batches as stacking
    the rows one by one.
    """
    names = flatten(rows.keys)
    pending: list[list[np.ndarray]] = []
    have = 0
    for f, lo, hi in rows.ranges:
        path = rows.files[f][0]
        with _open(path) as file:
            datasets = [file[key] for key in names]
            start = lo
            while start < hi:
                end = min(hi, start + size - have)
                try:
                    pending.append([np.asarray(d[start:end]) for d in datasets])
                except OSError as exc:
                    raise DataLossError(
                        f"{path}: rows {start}:{end} cannot be read ({exc}) (Dataset.from_hdf5)"
                    ) from exc
                have += end - start
                start = end
                if have == size:
                    yield _joined(rows.keys, pending)
                    pending, have = [], 0
    if have and not drop_remainder:
        yield _joined(rows.keys, pending)


def _joined(keys: Any, pieces: list[list[np.ndarray]]) -> Any:
    if len(pieces) == 1:
        return pack_sequence_as(keys, pieces[0])
    return pack_sequence_as(keys, [np.concatenate(parts) for parts in zip(*pieces, strict=True)])
