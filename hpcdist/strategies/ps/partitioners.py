"""Variable partitioners of `ParameterServerStrategy` (TF's ``experimental.partitioners``).

A partitioner maps a variable's ``(shape, dtype)`` to the number of shards along each axis, e.g.
``[4, 1]``. As in TF, only the first axis may be split; the strategy rejects anything else. The
rules are TF's exactly (``min_max_variable_partitioner`` and
``variable_axis_size_partitioner``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "FixedShardsPartitioner",
    "MaxSizePartitioner",
    "MinSizePartitioner",
    "Partitioner",
    "validate_partitions",
]


def _shape_dtype(
    shape: Any, dtype: Any, axis: int, bytes_per_string: int
) -> tuple[tuple[int, ...], int]:
    """The shape as ints and the bytes per element (``bytes_per_string`` for strings)."""
    shape = tuple(int(d) for d in shape)
    if not 0 <= axis < len(shape):
        raise ValueError(f"cannot partition along axis {axis} a variable of shape {shape}")
    dtype = np.dtype(dtype)
    return shape, bytes_per_string if dtype.kind in "OSU" else dtype.itemsize


class Partitioner:
    """Base class: ``partitioner(shape, dtype, axis=0) -> list of shard counts per axis``."""

    def __call__(self, shape: Sequence[int], dtype: Any, axis: int = 0) -> list[int]:
        """The number of shards along each axis."""
        raise NotImplementedError


class FixedShardsPartitioner(Partitioner):
    """``num_shards`` shards (fewer when the axis is shorter).

    Args:
        num_shards: Number of shards.
    """

    def __init__(self, num_shards: int) -> None:
        if int(num_shards) < 1:
            raise ValueError(f"num_shards must be positive, got {num_shards}")
        self._num_shards = int(num_shards)

    def __call__(self, shape: Sequence[int], dtype: Any, axis: int = 0) -> list[int]:
        """``min(num_shards, shape[axis])`` along ``axis``."""
        shape, _ = _shape_dtype(shape, dtype, axis, 16)
        partitions = [1] * len(shape)
        partitions[axis] = min(self._num_shards, shape[axis])
        return partitions


class MinSizePartitioner(Partitioner):
    """As many shards as keep each at least ``min_shard_bytes``, at most ``max_shards``.

    Args:
        min_shard_bytes: Minimum bytes per shard.
        max_shards: Maximum number of shards.
        bytes_per_string: Bytes assumed per string element.
    """

    def __init__(
        self, min_shard_bytes: int = 256 << 10, max_shards: int = 1, bytes_per_string: int = 16
    ) -> None:
        if min_shard_bytes < 1:
            raise ValueError(f"min_shard_bytes must be positive, got {min_shard_bytes}")
        if max_shards < 1:
            raise ValueError(f"max_shards must be positive, got {max_shards}")
        if bytes_per_string < 1:
            raise ValueError(f"bytes_per_string must be positive, got {bytes_per_string}")
        self._min_shard_bytes = min_shard_bytes
        self._max_shards = max_shards
        self._bytes_per_string = bytes_per_string

    def __call__(self, shape: Sequence[int], dtype: Any, axis: int = 0) -> list[int]:
        """TF's ``min_max_variable_partitioner`` rule."""
        shape, itemsize = _shape_dtype(shape, dtype, axis, self._bytes_per_string)
        total = math.prod(shape) * itemsize
        partitions = [1] * len(shape)
        wanted = math.ceil(total / self._min_shard_bytes)
        partitions[axis] = max(1, min(shape[axis], self._max_shards, wanted))
        return partitions


class MaxSizePartitioner(Partitioner):
    """As few shards as keep each at most ``max_shard_bytes`` (capped at ``max_shards``).

    Args:
        max_shard_bytes: Maximum bytes per shard.
        max_shards: Optional maximum number of shards.
        bytes_per_string: Bytes assumed per string element.
    """

    def __init__(
        self, max_shard_bytes: int, max_shards: int | None = None, bytes_per_string: int = 16
    ) -> None:
        if max_shard_bytes < 1 or bytes_per_string < 1:
            raise ValueError(
                "max_shard_bytes and bytes_per_string must be positive, got "
                f"{max_shard_bytes} and {bytes_per_string}"
            )
        if max_shards is not None and max_shards < 1:
            raise ValueError(f"max_shards must be positive, got {max_shards}")
        self._max_shard_bytes = max_shard_bytes
        self._max_shards = max_shards
        self._bytes_per_string = bytes_per_string

    def __call__(self, shape: Sequence[int], dtype: Any, axis: int = 0) -> list[int]:
        """TF's ``variable_axis_size_partitioner`` rule."""
        shape, itemsize = _shape_dtype(shape, dtype, axis, self._bytes_per_string)
        partitions = [1] * len(shape)
        if shape[axis] == 0:
            return partitions
        bytes_per_slice = math.prod(shape) / shape[axis] * itemsize
        slices_per_shard = max(1, math.floor(self._max_shard_bytes / bytes_per_slice))
        axis_shards = math.ceil(shape[axis] / slices_per_shard)
        if self._max_shards:
            axis_shards = min(self._max_shards, axis_shards)
        partitions[axis] = axis_shards
        return partitions


def validate_partitions(partitions: Any, shape: tuple[int, ...], name: str) -> int:
    """Check a partitioner's answer for a variable of ``shape``; return the shard count.

    Raises:
        ValueError: Not a list of ints, one per axis, whose entries are 1 except a positive
            first one no larger than the first dimension (TF's rule, plus the last check).
    """
    try:
        parts = [int(p) for p in partitions]
        ok = all(int(p) == p for p in partitions)
    except (TypeError, ValueError):
        parts, ok = [], False
    if not ok or len(parts) != len(shape) or parts[0] < 1 or any(p != 1 for p in parts[1:]):
        raise ValueError(
            f"variable_partitioner must return a list with one entry per axis of variable "
            f"{name!r} (shape {shape}): a positive shard count first, 1 for every other axis; "
            f"got {partitions!r}"
        )
    if parts[0] > shape[0]:
        raise ValueError(
            f"variable_partitioner asked for {parts[0]} shards of variable {name!r}, which has "
            f"only {shape[0]} rows"
        )
    return parts[0]
