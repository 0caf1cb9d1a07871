"""Sources: ``list_files``, ``from_generator`` and ``from_hdf5``.

`Sources` is a mixin of `hpcdist.data.dataset.Dataset`. ``list_files`` and ``from_hdf5``
record what they read (`hpcdist.data.lineage.FileSource`), which a strategy's auto-sharding
uses to give each worker its own files or rows.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from hpcdist.data.hdf5_source import balanced_ranges, describe, read_batches, read_rows
from hpcdist.data.lineage import FileSource, mark_source
from hpcdist.data.nest import flatten, map_structure, pack_sequence_as
from hpcdist.data.spec import TensorSpec
from hpcdist.errors import InvalidArgumentError

if TYPE_CHECKING:
    from hpcdist.data.dataset import Dataset

__all__ = ["Sources", "match_files"]

UNKNOWN = -2


def _names(value: Any) -> list[str]:
    if isinstance(value, (str, bytes, os.PathLike)):
        value = [value]
    out = []
    for item in np.asarray(value, dtype=object).reshape(-1).tolist():
        out.append(item.decode() if isinstance(item, bytes) else os.fspath(item))
    return out


def match_files(file_pattern: Any) -> list[str]:
    """The files matching one or more glob patterns, sorted (TF's ``matching_files``).

    Raises:
        InvalidArgumentError: Nothing matches (TF's message: "No files matched pattern").
    """
    patterns = _names(file_pattern)
    found = sorted({path for pattern in patterns for path in glob.glob(pattern)})
    if not found:
        raise InvalidArgumentError(f"No files matched pattern: {', '.join(patterns)}")
    return found


def _signature(output_signature: Any, output_types: Any, output_shapes: Any) -> Any:
    """A structure of `TensorSpec` from either form of ``from_generator``'s arguments."""
    if output_signature is not None:
        if output_types is not None or output_shapes is not None:
            raise TypeError(
                "from_generator: give output_signature, or output_types (and output_shapes), "
                "not both"
            )
        return map_structure(lambda s: TensorSpec(s.shape, s.dtype), output_signature)
    if output_types is None:
        raise TypeError("from_generator needs output_signature (or output_types)")
    types = flatten(output_types)
    shapes = (
        [None] * len(types) if output_shapes is None else _shapes_like(output_shapes, len(types))
    )
    return pack_sequence_as(
        output_types, [TensorSpec(s, t) for t, s in zip(types, shapes, strict=True)]
    )


def _shapes_like(output_shapes: Any, n: int) -> list[Any]:
    if isinstance(output_shapes, dict):
        shapes = [output_shapes[k] for k in sorted(output_shapes)]
    elif n == 1:
        shapes = [output_shapes]
    else:
        shapes = list(output_shapes)
    if len(shapes) != n:
        raise ValueError(f"from_generator: {n} output types but {len(shapes)} output shapes")
    return shapes


def _convert(value: Any, spec: TensorSpec, index: int) -> Any:
    try:
        if spec.dtype == object:
            array = np.asarray(value, dtype=object)
            array = (
                np.vectorize(lambda v: v.encode() if isinstance(v, str) else v, otypes=[object])(
                    array
                )
                if array.size
                else array
            )
            out = array[()] if array.ndim == 0 else array
        else:
            array = np.asarray(value)
            if array.dtype == object or (array.dtype.kind in "US" and spec.dtype.kind not in "US"):
                raise ValueError(value)
            out = array.astype(spec.dtype, copy=False)
    except (TypeError, ValueError):
        raise InvalidArgumentError(
            f"TypeError: `generator` yielded an element that could not be converted to the "
            f"expected type. The expected type was {spec.dtype}, but the yielded element was "
            f"{value!r} (element {index})."
        ) from None
    if not spec.is_compatible_with(out):
        raise InvalidArgumentError(
            f"`generator` yielded an element of shape {np.shape(out)} where an element of shape "
            f"{spec.shape} was expected (element {index})."
        )
    return out


class Sources:
    """``list_files``, ``from_generator`` and ``from_hdf5`` of `Dataset`."""

    @classmethod
    def list_files(
        cls,
        file_pattern: Any,
        shuffle: bool | None = None,
        seed: int | None = None,
        name: str | None = None,
    ) -> Dataset:
        """The files matching ``file_pattern`` (one glob or a list of them), as ``bytes``.

        Sorted; shuffled (again on every iteration) unless ``shuffle`` is False, as TF (a
        ``seed`` or ``hd.random.set_seed`` makes the order repeatable). The pattern is matched
        when the dataset is made. Under a strategy a pipeline that reads these files is
        sharded by file.

        Raises:
            InvalidArgumentError: No file matches.
        """
        del name
        files = tuple(match_files(file_pattern))
        return cls._list_of_files(files, shuffle is None or shuffle, seed)

    @classmethod
    def _list_of_files(cls, files: tuple[str, ...], shuffle: bool, seed: int | None) -> Dataset:
        names = [f.encode() for f in files]
        dataset = cls._new(lambda: iter(names), len(names))
        if shuffle and len(names) > 1:
            dataset = dataset.shuffle(len(names), seed=seed)
        mark_source(
            dataset,
            FileSource(
                "names", files, with_files=lambda fs: cls._list_of_files(tuple(fs), shuffle, seed)
            ),
        )
        return dataset

    @classmethod
    def from_generator(
        cls,
        generator: Callable[..., Any],
        output_types: Any = None,
        output_shapes: Any = None,
        args: tuple[Any, ...] | None = None,
        output_signature: Any = None,
        name: str | None = None,
    ) -> Dataset:
        """The values ``generator(*args)`` yields, checked against ``output_signature``.

        ``output_signature`` is a structure of `hpcdist.data.TensorSpec` (or ``tf.TensorSpec``);
        TF's older ``output_types`` / ``output_shapes`` work too. Every iteration calls
        ``generator`` again. Each value is converted to its spec's dtype; cardinality unknown.

        Raises:
            TypeError: ``generator`` is not callable, or no signature is given.
            InvalidArgumentError: (iteration) a value of the wrong type or shape.
        """
        del name
        if not callable(generator):
            raise TypeError(
                f"`generator` must be a Python callable, got {type(generator).__name__}"
            )
        signature = _signature(output_signature, output_types, output_shapes)
        specs = flatten(signature)
        call_args = tuple(args or ())

        def make() -> Iterator[Any]:
            for index, value in enumerate(generator(*call_args)):
                if isinstance(signature, (tuple, dict)):
                    if isinstance(signature, tuple) and (
                        not isinstance(value, (tuple, list)) or len(value) != len(signature)
                    ):
                        raise InvalidArgumentError(
                            f"`generator` yielded an element {value!r} that did not match the "
                            f"expected structure of {len(signature)} components (element "
                            f"{index})."
                        )
                    leaves = flatten(tuple(value) if isinstance(value, list) else value)
                else:
                    leaves = [value]
                if len(leaves) != len(specs):
                    raise InvalidArgumentError(
                        f"`generator` yielded {len(leaves)} values where {len(specs)} were "
                        f"expected (element {index})."
                    )
                yield pack_sequence_as(
                    signature, [_convert(v, s, index) for v, s in zip(leaves, specs, strict=True)]
                )

        return cls._new(make, UNKNOWN)

    @classmethod
    def from_hdf5(cls, path: Any, keys: Any) -> Dataset:
        """Rows of HDF5 datasets (``keys``) in one or more files, read lazily in chunks.

        ``keys`` is a dataset name (elements are its rows) or a tuple/dict of names (elements
        are tuples/dicts of rows of the same index); with several files their rows follow one
        another. Cardinality is the number of rows. Under a strategy, several files are
        sharded by file (AUTO, FILE) and one file by contiguous row ranges (AUTO, DATA).

        Raises:
            NotFoundError: A file does not exist.
            DataLossError: HDF5 cannot read a file.
            InvalidArgumentError: A key is missing, or the keys' row counts differ.
        """
        files = tuple(_names(path))
        return cls._from_rows(describe(files, keys))

    @classmethod
    def _from_rows(cls, rows: Any) -> Dataset:
        dataset = cls._new(lambda: read_rows(rows), rows.count)
        files = tuple(p for p, _ in rows.files)
        complete = rows.ranges == tuple((i, 0, n) for i, (_, n) in enumerate(rows.files) if n)

        def with_files(subset: tuple[str, ...]) -> Any:
            return cls.from_hdf5(list(subset), rows.keys)

        mark_source(
            dataset,
            FileSource(
                "reader" if len(files) > 1 and complete else "rows",
                files,
                with_files=with_files if complete else None,
                rows=lambda n, i: cls._from_rows(balanced_ranges(rows, n, i)),
                batches=lambda size, drop: read_batches(rows, size, drop),
            ),
        )
        return dataset
