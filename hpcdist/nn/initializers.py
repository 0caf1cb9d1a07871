"""Weight initializers (Keras names) drawing from the seed system's generator.

The generator is `hpcdist.utils.seeds.initializer_generator`: `set_random_seed` (Keras'
``keras.utils.set_random_seed``) and ``hd.random.set_seed`` (TF's ``tf.random.set_seed``) both
reseed it, with everything else that draws random numbers. Under a multi-rank strategy every
rank starts from the chief's values anyway (variables are broadcast at creation).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import numpy as np

from hpcdist.utils import seeds

__all__ = ["generator", "get", "set_random_seed"]


def set_random_seed(seed: int) -> None:
    """Seed everything that draws random numbers (``keras.utils.set_random_seed``).

    As in Keras: Python's `random`, numpy's global generator, and hpcdist's one seed system
    (`hpcdist.utils.seeds.set_global_seed`, also ``hd.random.set_seed``): the initializers and
    dropout (``default_rng(seed)``, so the weights are those of earlier versions), ``hd.random``
    and unseeded dataset shuffles.

    Raises:
        ValueError: ``seed`` is not an integer (Keras' check).
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"set_random_seed needs an integer seed, got {seed!r}")
    random.seed(int(seed))
    np.random.seed(int(seed) % 2**32)
    seeds.set_global_seed(int(seed))


def generator() -> np.random.Generator:
    """The generator of initial weights and dropout seeds (the seed system's)."""
    return seeds.initializer_generator()


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
    return generator().uniform(-limit, limit, shape).astype(dtype)


def he_normal(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """Normal with standard deviation ``sqrt(2 / fan_in)``."""
    fan_in, _ = _fans(shape)
    return (generator().standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(dtype)


def random_normal(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """Normal with standard deviation 0.05 (Keras' default)."""
    return (generator().standard_normal(shape) * 0.05).astype(dtype)


def random_uniform(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """Uniform in ``[-0.05, 0.05]`` (Keras' default; also ``"uniform"``)."""
    return generator().uniform(-0.05, 0.05, shape).astype(dtype)


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
