"""``tf.random``: uniform and normal tensors, and the global seed.

TF's argument rules (float32 by default, ``maxval`` required for integers, ``[minval,
maxval)``) with numpy's generator: the numbers are not TF's (TF uses Philox counters), but
``set_seed`` and ``seed=`` make them reproducible across runs, and each call draws new ones.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hpcdist.core.dtypes import as_dtype
from hpcdist.core.tensors import Tensor
from hpcdist.utils import seeds
from hpcdist.utils.seeds import get_seed

__all__ = ["get_seed", "normal", "set_seed", "uniform"]


def set_seed(seed: int | None) -> None:
    """Make later random numbers reproducible (``tf.random.set_seed``); None unsets it.

    hpcdist has one seed system (`hpcdist.utils.seeds`): this also seeds dataset shuffles and
    the initializers and dropout of `hpcdist.nn`, as TF's global seed does.
    """
    seeds.set_global_seed(seed)


def _generator(seed: int | None) -> np.random.Generator:
    """The global generator, or the one of an operation seed (its draws continue per call)."""
    return seeds.random_generator() if seed is None else seeds.operation_generator(seed)


def _shape(shape: Any) -> tuple[int, ...]:
    array = np.asarray(shape.numpy() if hasattr(shape, "numpy") else shape)
    return tuple(int(d) for d in array.reshape(-1))


def uniform(
    shape: Any,
    minval: Any = 0,
    maxval: Any = None,
    dtype: Any = "float32",
    seed: int | None = None,
    name: str | None = None,
) -> Tensor:
    """Values drawn uniformly from ``[minval, maxval)`` (``tf.random.uniform``).

    Args:
        shape: The output shape.
        minval: Lower bound (included).
        maxval: Upper bound (excluded); 1 for floats when None, required for integers.
        dtype: A float or integer dtype (float32 by default).
        seed: Operation seed (with `set_seed`, the draws are reproducible).
        name: Accepted for TF compatibility.

    Raises:
        ValueError: An integer ``dtype`` without ``maxval``, or ``maxval <= minval`` for
            integers.
    """
    del name
    dtype = as_dtype(dtype)
    rng = _generator(seed)
    size = _shape(shape)
    if dtype.kind in "iu":
        if maxval is None:
            raise ValueError(f"uniform needs maxval for the integer dtype {dtype}, got None")
        low, high = int(np.asarray(minval)), int(np.asarray(maxval))
        if high <= low:
            raise ValueError(f"uniform needs minval < maxval, got minval={low}, maxval={high}")
        return Tensor(rng.integers(low, high, size=size, dtype=dtype))
    if dtype.kind != "f":
        raise ValueError(f"uniform needs a float or integer dtype, got {dtype}")
    high = 1.0 if maxval is None else maxval
    low_a, high_a = np.asarray(minval, dtype), np.asarray(high, dtype)
    out = low_a + (high_a - low_a) * rng.random(size=size, dtype=np.float64)
    return Tensor(np.asarray(out, dtype=dtype))


def normal(
    shape: Any,
    mean: Any = 0.0,
    stddev: Any = 1.0,
    dtype: Any = "float32",
    seed: int | None = None,
    name: str | None = None,
) -> Tensor:
    """Values drawn from a normal distribution (``tf.random.normal``).

    Raises:
        ValueError: ``dtype`` is not a float dtype.
    """
    del name
    dtype = as_dtype(dtype)
    if dtype.kind != "f":
        raise ValueError(f"normal needs a float dtype, got {dtype}")
    draw = _generator(seed).standard_normal(size=_shape(shape))
    return Tensor(np.asarray(np.asarray(mean) + np.asarray(stddev) * draw, dtype=dtype))
