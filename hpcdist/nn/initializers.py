"""Weight initializers (Keras names) drawing from a seedable generator.

`set_random_seed` makes model construction reproducible; under a multi-rank strategy every rank
starts from the chief's values anyway (variables are broadcast at creation).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["get", "set_random_seed"]

_rng = np.random.default_rng(0)


def set_random_seed(seed: int) -> None:
    """Seed the generator used by initializers and dropout."""
    global _rng
    _rng = np.random.default_rng(seed)


def generator() -> np.random.Generator:
    """The shared generator."""
    return _rng


def _fans(shape: tuple[int, ...]) -> tuple[int, int]:
    if len(shape) == 0:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    receptive = int(np.prod(shape[:-2])) if len(shape) > 2 else 1
    return shape[-2] * receptive, shape[-1] * receptive


def zeros(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """All zeros."""
    return np.zeros(shape, dtype)


def ones(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """All ones."""
    return np.ones(shape, dtype)


def glorot_uniform(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """Uniform in ``[-l, l]``, ``l = sqrt(6 / (fan_in + fan_out))``."""
    fan_in, fan_out = _fans(shape)
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return _rng.uniform(-limit, limit, shape).astype(dtype)


def he_normal(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """Normal with standard deviation ``sqrt(2 / fan_in)``."""
    fan_in, _ = _fans(shape)
    return (_rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(dtype)


def random_normal(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """Normal with standard deviation 0.05 (Keras' default)."""
    return (_rng.standard_normal(shape) * 0.05).astype(dtype)


def random_uniform(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """Uniform in ``[-0.05, 0.05]`` (Keras' default; also ``"uniform"``)."""
    return _rng.uniform(-0.05, 0.05, shape).astype(dtype)


_BY_NAME: dict[str, Callable[[tuple[int, ...], Any], np.ndarray]] = {
    "zeros": zeros,
    "ones": ones,
    "glorot_uniform": glorot_uniform,
    "he_normal": he_normal,
    "random_normal": random_normal,
    "random_uniform": random_uniform,
    "uniform": random_uniform,
}


def get(identifier: Any) -> Callable[[tuple[int, ...], Any], np.ndarray]:
    """An initializer from a name, a callable ``fn(shape, dtype)`` or a constant array.

    Raises:
        ValueError: Unknown name.
    """
    if callable(identifier):
        return identifier
    if isinstance(identifier, str):
        try:
            return _BY_NAME[identifier.lower()]
        except KeyError:
            raise ValueError(
                f"unknown initializer {identifier!r}; known: {sorted(_BY_NAME)}"
            ) from None
    value = np.asarray(identifier)
    return lambda shape, dtype: np.broadcast_to(value, shape).astype(dtype)
