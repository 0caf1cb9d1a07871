"""`TFRecordDataset`: the records of TFRecord files as a `Dataset` (``tf.data.TFRecordDataset``).

Each element is one record's serialized bytes (``bytes``; TF yields a scalar ``tf.string``
whose numpy value is the same ``bytes``), files read one after the other or, with
``num_parallel_reads``, interleaved as TF interleaves them: a cycle of that many open files,
one record from each in turn, the next file taking the place of one that ends. The reads run in
the iterating thread (TF's order, not its reader threads): ``prefetch`` puts them on a
background thread. The records are checked as they are read (`hpcdist.data.tfrecord_format`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from hpcdist.data.dataset import UNKNOWN, Dataset
from hpcdist.data.lineage import FileSource, mark_source
from hpcdist.data.tfrecord_format import read_records
from hpcdist.data.tfrecord_options import compression_type_string
from hpcdist.errors import InvalidArgumentError

__all__ = ["TFRecordDataset"]

AUTOTUNE = -1


def _filename(value: Any) -> str:
    """One file name from a str, bytes, path or numpy string scalar."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    if isinstance(value, (bytes, np.bytes_)):
        return bytes(value).decode()
    if isinstance(value, (str, os.PathLike)):
        return os.fspath(value)
    raise TypeError(
        f"TFRecordDataset: every file name must be a string, got {type(value).__name__} ({value!r})"
    )


def _filenames(filenames: Any) -> tuple[str, ...] | Dataset:
    """The file names as a tuple, or the `Dataset` of file names as it was given."""
    if isinstance(filenames, Dataset):
        return filenames
    if isinstance(filenames, (str, bytes, os.PathLike, np.bytes_, np.str_)):
        return (_filename(filenames),)
    if isinstance(filenames, np.ndarray):
        if filenames.ndim > 1:
            raise ValueError(
                f"TFRecordDataset: filenames must be a scalar or a vector of strings, got "
                f"shape {filenames.shape}"
            )
        return tuple(_filename(f) for f in filenames.reshape(-1))
    try:
        items = list(filenames)
    except TypeError:
        raise TypeError(
            "TFRecordDataset: filenames must be a string, a list of strings or a Dataset of "
            f"strings, got {type(filenames).__name__}"
        ) from None
    return tuple(_filename(f) for f in items)


class TFRecordDataset(Dataset):
    """The records of one or more TFRecord files (``tf.data.TFRecordDataset``).

    Args:
        filenames: A file name, a list of them, or a `Dataset` of file names (for instance
            ``Dataset.list_files``).
        compression_type: None or ``""`` (none), ``"ZLIB"`` or ``"GZIP"``.
        buffer_size: Bytes read from a file at a time (TF's default: 256 KiB).
        num_parallel_reads: Files read in an interleaved cycle (None: one after the other;
            ``hd.data.AUTOTUNE``: as many as the machine has cores).
        name: Accepted for TF's signature.

    Raises:
        InvalidArgumentError: Unknown compression, or a ``buffer_size`` or
            ``num_parallel_reads`` that is not positive.
        TypeError: A file name is not a string.

    Iteration raises `hpcdist.errors.NotFoundError` for a missing file and
    ``hpcdist.errors.DataLossError`` for a corrupt one, after the records before the fault.
    Cardinality is unknown, as in TF.
    """

    def __init__(
        self,
        filenames: Any,
        compression_type: str | None = None,
        buffer_size: int | None = None,
        num_parallel_reads: int | None = None,
        name: str | None = None,
    ) -> None:
        del name
        self._filenames = _filenames(filenames)
        self._compression_type = compression_type_string(compression_type)
        if buffer_size is not None and buffer_size <= 0:
            raise InvalidArgumentError(
                f"TFRecordDataset: buffer_size must be a positive number of bytes, got "
                f"{buffer_size}"
            )
        self._buffer_size = buffer_size
        if (
            num_parallel_reads is not None
            and num_parallel_reads not in (AUTOTUNE,)
            and (num_parallel_reads < 1)
        ):
            raise InvalidArgumentError(
                "TFRecordDataset: num_parallel_reads must be positive or AUTOTUNE (-1), "
                f"got {num_parallel_reads}"
            )
        self._num_parallel_reads = num_parallel_reads
        super().__init__(self._iterate, UNKNOWN)
        if isinstance(self._filenames, Dataset):
            source = FileSource("reader", names=self._filenames, with_names=self.with_filenames)
        else:
            source = FileSource("reader", self._filenames, with_files=self.with_filenames)
        mark_source(self, source)

    # -- what the sharding of files needs ----------------------------------------------------

    @property
    def files(self) -> tuple[str, ...] | None:
        """The file names when given as names (None when given as a `Dataset`)."""
        return None if isinstance(self._filenames, Dataset) else self._filenames

    @property
    def filenames(self) -> tuple[str, ...] | Dataset:
        """The file names, or the `Dataset` of file names, this dataset reads."""
        return self._filenames

    def with_filenames(self, filenames: Any) -> TFRecordDataset:
        """The same reader (compression, buffer, parallel reads) over other files."""
        return TFRecordDataset(
            filenames, self._compression_type, self._buffer_size, self._num_parallel_reads
        )

    # -- reading -----------------------------------------------------------------------------

    def _file_names(self) -> Iterator[str]:
        if isinstance(self._filenames, Dataset):
            return (_filename(f) for f in self._filenames)
        return iter(self._filenames)

    def _read(self, path: str) -> Iterator[bytes]:
        return read_records(path, self._compression_type, self._buffer_size)

    def _iterate(self) -> Iterator[bytes]:
        cycle = self._num_parallel_reads
        if cycle == AUTOTUNE:
            cycle = os.cpu_count() or 1
        if cycle is None or cycle == 1:
            for path in self._file_names():
                yield from self._read(path)
            return
        yield from self._interleave(self._file_names(), cycle)

    def _interleave(self, paths: Iterator[str], cycle: int) -> Iterator[bytes]:
        """TF's deterministic interleave with block length 1 (``InterleaveDatasetOp``)."""
        slots: list[Iterator[bytes] | None] = [None] * cycle
        index = 0
        open_count = 0
        end_of_input = False
        while not end_of_input or open_count > 0:
            current = slots[index]
            if current is not None:
                record = next(current, None)
                if record is not None:
                    yield record
                else:
                    slots[index] = None
                    open_count -= 1
                index = (index + 1) % cycle
            elif not end_of_input:
                path = next(paths, None)
                if path is None:
                    end_of_input = True
                else:
                    slots[index] = self._read(path)
                    open_count += 1
            else:
                index = (index + 1) % cycle

    def __repr__(self) -> str:
        files = self.files
        shown = f"{len(files)} files" if files is not None else "files from a Dataset"
        return f"TFRecordDataset({shown}, compression_type={self._compression_type!r})"
