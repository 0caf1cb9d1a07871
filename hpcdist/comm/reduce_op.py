"""Reduction operations (`ReduceOp`) and their MPI and numpy counterparts."""

from __future__ import annotations

import enum

import numpy as np
from mpi4py import MPI

__all__ = ["ReduceOp"]


class ReduceOp(str, enum.Enum):
    """How values from all replicas are combined. Strings are accepted, case-insensitively."""

    SUM = "SUM"
    MEAN = "MEAN"
    MIN = "MIN"
    MAX = "MAX"
    PROD = "PROD"

    @classmethod
    def parse(cls, op: ReduceOp | str) -> ReduceOp:
        """Return the `ReduceOp` for an op or its name.

        Raises:
            ValueError: Not a known op; the message lists the valid ones.
        """
        if isinstance(op, cls):
            return op
        if isinstance(op, str):
            try:
                return cls[op.strip().upper()]
            except KeyError:
                pass
        valid = ", ".join(m.name for m in cls)
        raise ValueError(f"unknown reduce op {op!r}; expected one of {valid} (any case)")

    @property
    def code(self) -> int:
        """Small integer identifying the op in collective fingerprints."""
        return _CODES[self]

    @property
    def mpi(self) -> MPI.Op:
        """The MPI op that implements it (MEAN reduces with SUM, then divides)."""
        return _MPI_OPS[self]

    @property
    def ufunc(self) -> np.ufunc:
        """The numpy ufunc that combines two operands."""
        return _UFUNCS[self]


_CODES = {ReduceOp.SUM: 1, ReduceOp.MEAN: 2, ReduceOp.MIN: 3, ReduceOp.MAX: 4, ReduceOp.PROD: 5}
_MPI_OPS = {
    ReduceOp.SUM: MPI.SUM,
    ReduceOp.MEAN: MPI.SUM,
    ReduceOp.MIN: MPI.MIN,
    ReduceOp.MAX: MPI.MAX,
    ReduceOp.PROD: MPI.PROD,
}
_UFUNCS = {
    ReduceOp.SUM: np.add,
    ReduceOp.MEAN: np.add,
    ReduceOp.MIN: np.minimum,
    ReduceOp.MAX: np.maximum,
    ReduceOp.PROD: np.multiply,
}
