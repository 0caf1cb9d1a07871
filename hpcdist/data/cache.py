"""The file cache of ``Dataset.cache(filename)``: HDF5, written atomically, read lazily.

As TF's file cache: the first complete pass over the source writes the elements while it
yields them, and only a pass that reaches the end leaves a cache; every later iteration (of
this dataset, or of the same pipeline in the next run) reads the file instead of the source.

The file is ``{filename}.h5``, or ``{filename}.rank{r}-of-{n}.h5`` when ``n > 1`` MPI
processes run (each rank caches its own shard of the data). It is written under a temporary
name in the same directory, flushed, ``fsync``-ed and renamed in one step, so a reader sees a
complete cache or none. No pickle: every leaf of the element structure is stored as raw
bytes (``leaf{k}/data``, uint8) with an index (``leaf{k}/index``: per element the end offset,
the item size and the shape), and the structure itself as JSON. Reads go block by block
(`READ_BLOCK_BYTES`), never the whole file. A file that HDF5 cannot read, or whose index and
data disagree, raises `hpcdist.errors.DataLossError` naming it.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import secrets
from collections.abc import Iterator
from typing import Any

import numpy as np

from hpcdist.data.nest import flatten, pack_sequence_as
from hpcdist.errors import DataLossError
from hpcdist.logger import process_rank


def h5py_module() -> Any:
    """h5py, loaded on the first file cache: ``import hpcdist.data`` does not load it."""
    import h5py  # documented exception (docs/architecture.md, "Imports inside functions")

    return h5py


__all__ = ["FORMAT", "READ_BLOCK_BYTES", "cache_path", "cached_iteration", "h5py_module"]

FORMAT = "hpcdist-dataset-cache-1"
"""The ``format`` attribute of every cache file."""

READ_BLOCK_BYTES = 8 << 20
"""Bytes read from the file at a time (also the size of the writer's buffer)."""

_RANK_VARIABLES = (("PMI_RANK", "PMI_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"))


def _rank_and_size() -> tuple[int, int]:
    """This process' MPI rank and the number of processes (MPI first, then the launcher)."""
    rank, size = process_rank()
    if size > 1:
        return rank, size
    for rank_name, size_name in _RANK_VARIABLES:
        if rank_name in os.environ and size_name in os.environ:
            return int(os.environ[rank_name]), int(os.environ[size_name])
    return 0, 1


def cache_path(filename: str | os.PathLike[str]) -> str:
    """The file ``Dataset.cache(filename)`` uses in this process."""
    rank, size = _rank_and_size()
    base = os.fspath(filename)
    return f"{base}.rank{rank}-of-{size}.h5" if size > 1 else f"{base}.h5"


# -- the element structure as JSON --------------------------------------------------------


def _describe(structure: Any) -> Any:
    if isinstance(structure, dict):
        if not all(isinstance(key, str) for key in structure):
            raise TypeError(f"cache(filename) needs string dict keys, got {list(structure)!r}")
        return {"dict": [[key, _describe(value)] for key, value in structure.items()]}
    if isinstance(structure, tuple) and hasattr(structure, "_fields"):
        fields = list(type(structure)._fields)  # type: ignore[attr-defined]
        return {
            "namedtuple": type(structure).__name__,
            "fields": fields,
            "items": [_describe(item) for item in structure],
        }
    if isinstance(structure, tuple):
        return {"tuple": [_describe(item) for item in structure]}
    return None  # a leaf


def _template(description: Any) -> Any:
    """A structure with placeholder leaves, for `pack_sequence_as`."""
    if description is None:
        return 0
    if "dict" in description:
        return {key: _template(value) for key, value in description["dict"]}
    if "namedtuple" in description:
        kind = collections.namedtuple(description["namedtuple"], description["fields"])  # type: ignore[misc]
        return kind(*(_template(item) for item in description["items"]))
    return tuple(_template(item) for item in description["tuple"])


# -- leaves as bytes --------------------------------------------------------------------------

_BYTES, _STR = "|Ob", "|Os"  # Python bytes and str items, kept exactly (NUL bytes included)


def _encode(leaf: Any) -> tuple[str, bytes, int, tuple[int, ...], list[int]]:
    """``(kind, raw bytes, item size or item count, shape, item lengths)`` of one leaf.

    Numeric, bool and numpy fixed-width ``S``/``U`` arrays are stored as their buffer (the
    kind leaves out the width of ``S``/``U``, which may vary per element). Python ``bytes``
    and ``str`` values, and object arrays of them, are stored item by item with their lengths.

    Raises:
        TypeError: An object array holds something else.
    """
    if isinstance(leaf, bytes | str):
        leaf = np.array(leaf, dtype=object)
    array = np.asarray(leaf)
    if array.dtype != object:
        if not array.flags.c_contiguous:  # (np.ascontiguousarray would make 0-d arrays 1-d)
            array = array.copy(order="C")
        kind = array.dtype.str[:2] if array.dtype.kind in "SU" else array.dtype.str
        return kind, array.tobytes(), array.dtype.itemsize, array.shape, []
    items = array.ravel().tolist()
    if all(isinstance(x, bytes) for x in items):
        kind, raw = _BYTES, items
    elif all(isinstance(x, str) for x in items):
        kind, raw = _STR, [x.encode("utf-8") for x in items]
    else:
        raise TypeError(
            "cache(filename) stores numeric, bool, bytes and str values, got an object array "
            f"of {sorted({type(x).__name__ for x in items})}"
        )
    return kind, b"".join(raw), len(raw), array.shape, [len(x) for x in raw]


def _decode(kind: str, raw: np.ndarray, size: int, shape: tuple[int, ...], lengths: Any) -> Any:
    """The leaf `_encode` stored (a 0-d leaf comes back as a scalar)."""
    if kind in (_BYTES, _STR):
        ends = np.cumsum(lengths).tolist()
        data = raw.tobytes()
        items: list[Any] = [data[a:b] for a, b in zip([0, *ends[:-1]], ends, strict=True)]
        if kind == _STR:
            items = [x.decode("utf-8") for x in items]
        if not shape:
            return items[0]
        array = np.empty(len(items), dtype=object)
        array[:] = items
        return array.reshape(shape)
    if kind[1:] in ("S", "U"):
        dtype = np.dtype(f"{kind}{size // 4 if kind[1] == 'U' else size}")
    else:
        dtype = np.dtype(kind)
    array = raw.view(dtype).reshape(shape).copy()
    return array[()] if array.ndim == 0 else array


class _Writer:
    """Writes one pass into a temporary file; `commit` renames it into place."""

    def __init__(self, path: str) -> None:
        directory = os.path.dirname(path) or "."
        os.makedirs(directory, exist_ok=True)
        self.path = path
        self.temporary = f"{path}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
        self.file = h5py_module().File(self.temporary, "w")
        self.count = 0
        self.started = False
        self.description: Any = None
        self.kinds: list[str] = []
        self.ndims: list[int] = []
        self.pending: list[tuple[list[bytes], list[list[int]], list[int]]] = []
        self.ends: list[int] = []
        self.buffered = 0

    def _start(self, element: Any, leaves: list[tuple[str, bytes, int, tuple, list]]) -> None:
        self.description = _describe(element)
        self.kinds = [leaf[0] for leaf in leaves]
        self.ndims = [len(leaf[3]) for leaf in leaves]
        self.pending = [([], [], []) for _ in leaves]
        self.ends = [0 for _ in leaves]
        for k, ndim in enumerate(self.ndims):
            group = self.file.create_group(f"leaf{k}")
            group.create_dataset("data", (0,), np.uint8, maxshape=(None,), chunks=(1 << 20,))
            group.create_dataset("index", (0, 2 + ndim), np.int64, maxshape=(None, 2 + ndim))
            group.create_dataset("lengths", (0,), np.int64, maxshape=(None,), chunks=(1 << 16,))
            group.attrs["dtype"] = self.kinds[k]

    def add(self, element: Any) -> None:
        """Buffer one element (written out every `READ_BLOCK_BYTES`).

        Raises:
            ValueError: The element's structure, a leaf's dtype or rank differ from the first's.
        """
        leaves = [_encode(leaf) for leaf in flatten(element)]
        if not self.started:
            self._start(element, leaves)
            self.started = True
        if _describe(element) != self.description:
            raise ValueError(
                f"cache(filename): element {self.count} has the structure "
                f"{_describe(element)!r}, the first had {self.description!r}"
            )
        for k, (kind, raw, size, shape, lengths) in enumerate(leaves):
            if kind != self.kinds[k] or len(shape) != self.ndims[k]:
                raise ValueError(
                    f"cache(filename): element {self.count}, leaf {k} is {kind} of rank "
                    f"{len(shape)}, the first element's was {self.kinds[k]} of rank "
                    f"{self.ndims[k]}"
                )
            self.ends[k] += len(raw)
            data, index, item_lengths = self.pending[k]
            data.append(raw)
            index.append([self.ends[k], size, *shape])
            item_lengths.extend(lengths)
            self.buffered += len(raw)
        self.count += 1
        if self.buffered >= READ_BLOCK_BYTES:
            self._flush()

    def _flush(self) -> None:
        for k, (data, index, lengths) in enumerate(self.pending):
            group = self.file[f"leaf{k}"]
            values = {
                "data": np.frombuffer(b"".join(data), dtype=np.uint8),
                "index": np.asarray(index, dtype=np.int64).reshape(-1, 2 + self.ndims[k]),
                "lengths": np.asarray(lengths, dtype=np.int64),
            }
            for name, value in values.items():
                dataset = group[name]
                start = dataset.shape[0]
                dataset.resize(start + value.shape[0], axis=0)
                dataset[start:] = value
            self.pending[k] = ([], [], [])
        self.buffered = 0

    def commit(self) -> None:
        """Write the rest, make it durable and rename it to its final name."""
        self._flush()
        self.file.attrs["format"] = FORMAT
        self.file.attrs["num_elements"] = self.count
        self.file.attrs["num_leaves"] = len(self.kinds)
        self.file.attrs["structure"] = json.dumps(self.description)
        self.file.close()
        with open(self.temporary, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(self.temporary, self.path)
        with contextlib.suppress(OSError):  # not every file system syncs directories
            fd = os.open(os.path.dirname(self.path) or ".", os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def abort(self) -> None:
        """Drop the partial file (a pass that did not finish leaves no cache)."""
        with contextlib.suppress(Exception):
            self.file.close()
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.temporary)


def _write_through(source: Any, path: str) -> Iterator[Any]:
    writer = _Writer(path)
    done = False
    try:
        for element in source:
            writer.add(element)
            yield element
        writer.commit()
        done = True
    finally:
        if not done:
            writer.abort()


def _lost(path: str, what: str) -> DataLossError:
    rank, size = _rank_and_size()
    where = f" (rank {rank} of {size})" if size > 1 else ""
    return DataLossError(
        f"the dataset cache file {path}{where} is corrupt or truncated: {what}; delete it to "
        "rebuild the cache from the source"
    )


class _Leaf:
    """One leaf of a cache file being read: its index in memory, its bytes on disk."""

    def __init__(self, file: Any, k: int) -> None:
        group = file[f"leaf{k}"]
        self.kind = str(group.attrs["dtype"])
        self.index = np.asarray(group["index"])
        self.data = group["data"]
        self.lengths = group["lengths"]
        self.ends = self.index[:, 0]
        objects = self.kind in (_BYTES, _STR)
        self.item_ends = np.cumsum(self.index[:, 1]) if objects else None

    def check(self, path: str, k: int, count: int) -> None:
        whole = count > 0 and self.index.shape[0] == count
        end = int(self.ends[-1]) if whole else 0
        items = int(self.item_ends[-1]) if self.item_ends is not None and whole else 0
        if (
            self.index.shape[0] != count
            or self.data.shape[0] != end
            or (self.item_ends is not None and self.lengths.shape[0] != items)
        ):
            raise _lost(
                path,
                f"leaf {k} has {self.index.shape[0]} index rows and {self.data.shape[0]} "
                f"bytes, expected {count} rows and {end} bytes",
            )

    def block(self, path: str, first: int, last: int) -> Iterator[Any]:
        """The leaf of elements ``first .. last - 1``, read with one read per dataset."""
        lo = int(self.ends[first - 1]) if first else 0
        try:
            raw = np.asarray(self.data[lo : int(self.ends[last - 1])])
            if self.item_ends is not None:
                items_lo = int(self.item_ends[first - 1]) if first else 0
                lengths = np.asarray(self.lengths[items_lo : int(self.item_ends[last - 1])])
        except OSError as exc:
            raise _lost(path, f"elements {first}:{last} cannot be read ({exc})") from exc
        at, item = 0, 0
        for j in range(first, last):
            row = self.index[j]
            size = int(row[0]) - lo - at
            count = int(row[1])
            mine = lengths[item : item + count] if self.item_ends is not None else None
            shape = tuple(int(d) for d in row[2:])
            yield _decode(self.kind, raw[at : at + size], count, shape, mine)
            at += size
            item += count if self.item_ends is not None else 0


def _read(path: str) -> Iterator[Any]:
    try:
        file = h5py_module().File(path, "r")
    except OSError as exc:
        raise _lost(path, f"HDF5 cannot open it ({exc})") from exc
    with file:
        try:
            if file.attrs.get("format") != FORMAT:
                raise _lost(path, f"expected format {FORMAT!r}, found {file.attrs.get('format')!r}")
            count = int(file.attrs["num_elements"])
            template = _template(json.loads(str(file.attrs["structure"])))
            leaves = [_Leaf(file, k) for k in range(int(file.attrs["num_leaves"]))]
        except (OSError, KeyError, IndexError, ValueError, TypeError, RuntimeError) as exc:
            raise _lost(path, f"its metadata cannot be read ({exc})") from exc
        for k, leaf in enumerate(leaves):
            leaf.check(path, k, count)
        if not leaves:
            for _ in range(count):
                yield pack_sequence_as(template, [])
            return
        total = np.sum([leaf.ends for leaf in leaves], axis=0)  # bytes up to each element
        first = 0
        while first < count:
            start = int(total[first - 1]) if first else 0
            last = int(np.searchsorted(total, start + READ_BLOCK_BYTES, side="right"))
            last = min(max(first + 1, last), count)
            columns = [leaf.block(path, first, last) for leaf in leaves]  # decoded as yielded
            for values in zip(*columns, strict=True):
                yield pack_sequence_as(template, list(values))
            first = last


def cached_iteration(source: Any, filename: str | os.PathLike[str]) -> Iterator[Any]:
    """One iteration of ``source.cache(filename)``: read the cache, or write it while passing.

    Raises:
        DataLossError: The cache file exists but cannot be read back.
    """
    path = cache_path(filename)
    if os.path.exists(path):
        yield from _read(path)
    else:
        yield from _write_through(source, path)
