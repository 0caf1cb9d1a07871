"""Distributed values: one value per replica (`PerReplica`) or the same on all (`Mirrored`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["DistributedValues", "Mirrored", "PerReplica", "local_results"]


class DistributedValues:
    """A value with one component per local replica.

    Args:
        values: One value per local replica of this worker, in replica order.
    """

    def __init__(self, values: Sequence[Any]) -> None:
        self._values = tuple(values)
        if not self._values:
            raise ValueError(f"{type(self).__name__} needs at least one value")

    @property
    def values(self) -> tuple[Any, ...]:
        """The components, one per local replica."""
        return self._values

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        inner = ", ".join(f"{i}: {v!r}" for i, v in enumerate(self._values))
        return f"{type(self).__name__}:{{{inner}}}"


class PerReplica(DistributedValues):
    """Different values on different replicas (e.g. each replica's loss)."""


class Mirrored(DistributedValues):
    """The same value on every replica; reads as its first component (``numpy()``, arrays)."""

    def numpy(self) -> Any:
        """The value (the first replica's copy), as TF's ``Mirrored.numpy``."""
        first = self._values[0]
        return first.numpy() if hasattr(first, "numpy") else np.asarray(first)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        value = np.asarray(self.numpy())
        return value if dtype is None else value.astype(dtype)


def local_results(value: Any) -> tuple[Any, ...]:
    """The components of ``value`` on this worker's replicas (a plain value counts as one)."""
    if isinstance(value, DistributedValues):
        return value.values
    return (value,)
