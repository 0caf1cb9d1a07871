"""Tensors for the fusion tests: many sizes, chunk-crossing and empty ones, per-rank values."""

from __future__ import annotations

import numpy as np

import hpcdist as hd

#: The reference path: one MPI all-reduce per tensor.
MPI_OPTS = hd.CommunicationOptions(implementation="mpi")


def tensors(
    rank: int, dtype: type, seed: int = 0, count: int = 60, strided: bool = True
) -> list[np.ndarray]:
    """Tensors of 0 to 2.3 MiB (more than two 1 MiB segment chunks), rank-dependent values.

    Args:
        rank: Whose values (every rank can build every rank's tensors).
        dtype: Their dtype.
        seed: Sizes and values.
        count: How many (at least 21).
        strided: Make tensor 3 a strided view (not C-contiguous).

    Returns:
        Tensor 7 is empty, tensor 20 has 600,001 elements (it crosses chunk boundaries of every
        dtype), tensor 4 is 2-D when its size allows.
    """
    rng = np.random.default_rng(seed)
    sizes = [int(k) * 256 + int(j) for k, j in rng.integers((1, 0), (65, 9), (count, 2))]
    sizes[7] = 0
    sizes[20] = 600_001
    vals = np.random.default_rng(seed + 1 + rank)
    out = [(vals.integers(-8, 9, s) * (rank + 1)).astype(dtype) for s in sizes]
    if strided:
        out[3] = out[3][::2]
    out[4] = out[4].reshape(4, -1) if out[4].size % 4 == 0 else out[4]
    return out
